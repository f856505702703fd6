"""The workflow itself: Snakemake DAG, error reporting, incremental reruns, and DVC equivalence.

End-to-end tests run the real Snakefile and dvc.yaml in a scratch copy of the repository, with the
tiny random Llama as `model.source` (a local path goes through the same code as a hub id).
"""

import filecmp
import re
import shutil
import sys

import pytest
import yaml

from conftest import (REFUSED_PARAMS, REPO, assert_report_shows_every_output, build_html_report, copy_workflow,
                      edit_params, planned_jobs, read_jsonl, run, snakemake, tiny_params)
from conftest import CLI, GIT_COMMIT, dvc_repository

# Every test here runs Snakemake, the `adaptive_rag` CLI or DVC in subprocesses.
pytestmark = pytest.mark.slow


def test_dry_run_plans_the_full_dag(tmp_path):
    copy_workflow(tmp_path)
    assert planned_jobs(tmp_path) == {
        "model": 1, "corpus": 1, "index": 1, "split": 2, "generate": 12, "score": 12, "report": 1,
        "explorer_page": 2, "all": 1,
    }


def test_every_job_that_loads_the_model_claims_the_models_threads(tmp_path):
    """A job that runs the model (its command passes `--model-dir`) takes `generation.threads` torch threads
    (lm/models.py); one that declared fewer would let Snakemake start two such jobs on cores one of them
    fills (two calibrations at once)."""
    copy_workflow(tmp_path)
    threads = yaml.safe_load((tmp_path / "params.yaml").read_text())["generation"]["threads"]
    assert threads > 1  # else a rule without `threads:` would pass unseen
    out = snakemake(tmp_path, "-n", "-p", "--cores", str(threads), "ablation_seakr_sweep", "ablation_sugar_signal",
                    "ablation_word_significance", "detectors").stdout
    claimed = {}  # rule of a model-loading job -> the threads its jobs claim (1 when the dry run prints none)
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", out, flags=re.M):
        head = re.match(r"(?:local)?rule (\w+):$", block, re.M)
        if head and "--model-dir" in block:
            found = re.search(r"^\s+threads: (\d+)$", block, re.M)
            claimed.setdefault(head[1], set()).add(int(found[1]) if found else 1)
    assert claimed.keys() >= {"generate", "calibrate", "significance", "uncertainty_sweep", "detector_data_early",
                              "detector_data_realtime", "detector_data_radio"}
    assert claimed == {rule: {threads} for rule in claimed}


@pytest.mark.parametrize("edit, line", [
    pytest.param(lambda d: d["methods"]["sr-rag"].update(top_k="many"),
                 "methods.sr-rag.top_k: expected an integer >= 1, got 'many'", id="type"),
    *REFUSED_PARAMS,
])
def test_bad_params_stop_snakemake_with_the_key_named(tmp_path, edit, line):
    copy_workflow(tmp_path)
    edit_params(tmp_path, edit)
    result = snakemake(tmp_path, "-n", check=False)
    assert result.returncode != 0
    assert result.stderr == f"error: params.yaml: {line}\n"  # the line check-params prints
    assert "Traceback" not in result.stderr


def test_cli_reports_user_errors_without_traceback(tmp_path):
    copy_workflow(tmp_path)
    cli = [sys.executable, "-m", "adaptive_rag"]
    result = run([*cli, "generate", "--dataset", "demo", "--method", "flair", "--split", "x", "--model-dir", "m",
                  "--out-dir", "o"], tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: unknown method 'flair'; params.yaml defines: wo-rag, sr-rag, fl-rag, fs-rag, ircot, flare, dragin, "
        "dragin-code, flare-word, flare-code, origin-currsent, attn-realwords, scaar, seakr, seakr-simple, sugar, "
        "dior, dior-context, dior-context-wo-ed, dior-wo-ed, dior-wo-rd, dior-wo-pre, dior-wo-post, "
        "dior-dragin-prompt, radio, sugar-mean, sugar-pe-mean, sugar-pe-se, wo-rag-qa, sr-rag-qa, ircot-8, "
        "adaptive-rag, adaptive-retrieval (and 132 ablation variants, `<ablation>--<values>`)")
    result = run([*cli, "split", "--dataset", "demo", "--out", "s.jsonl"], tmp_path / "data", check=False)
    assert result.returncode == 2 and "params file not found: params.yaml" in result.stderr
    (tmp_path / "data" / "demo" / "hotpot_demo.json").unlink()
    result = run([*cli, "split", "--dataset", "demo", "--out", "s.jsonl"], tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.strip() == "error: dataset file not found: data/demo/hotpot_demo.json"


@pytest.fixture(scope="module")
def built_workflow(tiny_llama_dir, tmp_path_factory):
    """The tiny demo built once by `snakemake --cores all` (the default target: the main experiment, not
    the cheap ablation; no DVC command run yet), shared by the tests below: recording it for DVC, and
    Snakemake's incremental reruns. Each builds the ablation when it needs it."""
    root = dvc_repository(tmp_path_factory.mktemp("built"), tiny_llama_dir)
    snakemake(root)
    return root


def test_snakemake_outputs_are_recorded_for_dvc_without_recomputing_and_pulled_into_a_clone(built_workflow, tmp_path):
    """The README's sharing recipe, step by step: `snakemake --cores all`, `adaptive-rag dvc-record` (which
    records what was built and names the ablation never built), then the ablation built and recorded
    too, `dvc push`, and a collaborator's clone and `dvc pull`."""
    sm = built_workflow
    stages = yaml.safe_load((sm / "dvc.yaml").read_text())["stages"]
    assert {"report", "generate_demo_wo-rag", "ablation_sr_topk"} <= set(stages)
    assert not (sm / "reports/ablations").exists()  # `snakemake --cores all` builds no ablation

    # Outputs that no longer match params.yaml are not recorded: Snakemake would still rerun them.
    edit_params(sm, lambda d: d["methods"]["sr-rag"].update(top_k=2))
    stale = run([*CLI, "dvc-record", "generate_demo_sr-rag"], sm, check=False)
    assert stale.returncode == 2 and "nothing recorded: Snakemake would still run jobs" in stale.stderr
    assert "(generate 1)" in stale.stderr and not (sm / "dvc.lock").exists()
    edit_params(sm, lambda d: d["methods"]["sr-rag"].update(top_k=3))

    # Right after `snakemake --cores all`: everything built is recorded, the ablation is named in one line.
    recorded = run([*CLI, "dvc-record"], sm)
    lines = recorded.stdout.strip().splitlines()  # DVC's own lines, then the command's two
    assert lines[-2].startswith(f"recorded {len(stages) - 1} stage(s) in dvc.lock")
    assert lines[-1] == ("not recorded, never built (1 stage(s)): ablation_sr_topk; to record them, build them with "
                         "`snakemake --cores all ablation_sr_topk` and run `adaptive-rag dvc-record` again")
    status = run(["dvc", "status"], sm).stdout
    assert "ablation_sr_topk" in status and "generate_demo_wo-rag" not in status and "report:" not in status

    # Later: build it and record again, as the line says.
    snakemake(sm, "ablation_sr_topk")
    recorded = run([*CLI, "dvc-record"], sm)
    assert recorded.stdout.strip().splitlines()[-1] == (
        f"recorded {len(stages)} stage(s) in dvc.lock without running them; `dvc status` is clean for them. "
        f"Commit dvc.lock (git add dvc.lock) and `dvc push` to share the outputs.")
    assert "Data and pipelines are up to date." in run(["dvc", "status"], sm).stdout
    repro = run(["dvc", "repro"], sm)
    assert "Running stage" not in repro.stdout + repro.stderr
    assert repro.stdout.count("didn't change, skipping") == len(stages)

    # Push; a collaborator clones the commit and pulls every table and figure, byte for byte.
    run(["dvc", "remote", "add", "-d", "local", str(tmp_path / "remote")], sm)
    run(["git", "add", "-A"], sm)
    run([*GIT_COMMIT, "-m", "results"], sm)
    run(["dvc", "push"], sm)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(sm), str(clone)], tmp_path)
    assert not (clone / "reports").exists()  # reports travel through DVC, not git
    run(["dvc", "pull"], clone)
    reports = sorted(str(p.relative_to(sm)) for p in (sm / "reports").rglob("*") if p.is_file())
    assert reports == sorted([
        *(f"reports/ablations/sr-topk.{suffix}" for suffix in ("csv", "md", "png", "tex", "html")),
        "reports/explorer/demo-single.html", "reports/explorer/demo.html",
        "reports/figures/retrievals.png", "reports/figures/scores.png", "reports/figures/scores.svg", "reports/params.yaml",
        *(f"reports/tables/{table}.{suffix}" for table in ("quality", "cost") for suffix in ("md", "html", "tex")),
        "reports/tables/retrievals.csv", "reports/tables/retrievals.md", "reports/tables/retrievals.html",
        "reports/tables/scores.csv"])
    for rel in reports + ["data/runs/demo/sr-rag/predictions.jsonl", "data/scores/demo/wo-rag.json"]:
        assert filecmp.cmp(sm / rel, clone / rel, shallow=False), rel
    assert not (clone / "data/runs/demo/sr-topk--1").exists()  # an ablation's own runs are not shared
    assert "Data and pipelines are up to date." in run(["dvc", "status"], clone).stdout


def test_dvc_stages_own_exactly_what_snakemake_writes(tmp_path):
    """The report files of every stage in the repository's dvc.yaml are the ones Snakemake's rules write for
    the stages' targets, and every other out is one of their outputs or a directory holding some."""
    copy_workflow(tmp_path)
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    targets = [stage["cmd"].removeprefix("snakemake --cores all ").split()[0] for stage in stages.values()]
    summary = snakemake(tmp_path, "--summary", *targets).stdout.splitlines()
    written = {line.split("\t")[0] for line in summary[1:] if line.strip()}
    outs = [out for stage in stages.values() for out in stage["outs"]]
    assert {o for o in outs if o.startswith("reports/")} == {w for w in written if w.startswith("reports/")}
    for out in outs:
        assert out in written or any(w.startswith(out + "/") for w in written), out


def test_snakemake_end_to_end_is_incremental_and_dvc_reproduces_it(built_workflow, tiny_llama_dir, tmp_path):
    sm = built_workflow
    snakemake(sm, "ablation_sr_topk")  # the HTML report below shows it (nothing to do if already built)
    for name in ("reports/tables/quality.md", "reports/tables/cost.html", "reports/tables/scores.csv",
                 "reports/tables/quality.tex", "reports/figures/scores.png", "reports/tables/retrievals.md",
                 "reports/figures/retrievals.png", "reports/params.yaml"):
        assert (sm / name).stat().st_size > 0, name
    table = (sm / "reports/tables/scores.csv").read_text().splitlines()
    assert table[0] == ("dataset,method,questions,em,f1,acc,N_R,S_eff ×100,Rc,Gc,Hc,Tc,Sc,answer_found,"
                        "em_lo,em_hi,f1_lo,f1_hi,acc_lo,acc_hi,baseline,d_em,d_em_lo,d_em_hi,p_em,"
                        "d_f1,d_f1_lo,d_f1_hi,p_f1,d_acc,d_acc_lo,d_acc_hi,p_acc,wall_time_s_mean,cache_hits")
    assert len(table) == 1 + 6 * 2  # the six methods of the demo experiment on its two datasets
    assert [row.split(",")[0] for row in table[1:]] == ["demo"] * 6 + ["demo-single"] * 6
    for method in ("fl-rag", "fs-rag", "flare", "dragin"):
        for trace in read_jsonl(sm / f"data/runs/demo/{method}/trace.jsonl"):
            queries = [step["query"] for step in trace["steps"] if step.get("query") is not None]
            assert trace["counters"]["retrievals"] == len(queries) and trace["counters"]["llm_calls"] >= 1
    predictions = read_jsonl(sm / "data/runs/demo/sr-rag/predictions.jsonl")
    assert len(predictions) == 4 and all(len(p["retrieved_ids"]) == 3 for p in predictions)
    assert all(p["retrievals"] == 0 for p in read_jsonl(sm / "data/runs/demo/wo-rag/predictions.jsonl"))
    trace = read_jsonl(sm / "data/runs/demo/sr-rag/trace.jsonl")
    # one generation, plus the answer fallback's call when the output lacks "So the answer is"
    assert trace[0]["prompt"] and trace[0]["counters"]["llm_calls"] == len(trace[0]["steps"])
    assert [s["phase"] for s in trace[0]["steps"]][0] == "generate"
    for log in ("logs/index/demo.log", "logs/generate/demo/sr-rag.log"):
        assert (sm / log).stat().st_size > 0

    # A second run has nothing to do; a method's setting reruns only what depends on it.
    assert planned_jobs(sm) == {}
    edit_params(sm, lambda d: d["methods"]["sr-rag"].update(top_k=2))
    assert planned_jobs(sm) == {"generate": 2, "score": 2, "report": 1, "explorer_page": 2,
                                "all": 1}  # sr-rag on each dataset
    first = (sm / "data/runs/demo/sr-rag/predictions.jsonl").read_bytes()
    edit_params(sm, lambda d: d["methods"]["sr-rag"].update(top_k=3))
    snakemake(sm, "--forcerun", "generate")
    assert (sm / "data/runs/demo/sr-rag/predictions.jsonl").read_bytes() == first  # a rerun is byte-identical

    # The HTML report (`make report`): every table and figure of the main experiment and of each ablation
    # already built, here one without `paper:` (filed under "Ablations"); the 19 not built are left out.
    def significance(data):
        repo = yaml.safe_load((REPO / "params.yaml").read_text())["ablations"]["word-significance"]
        data["ablations"]["word-significance"] = {k: v for k, v in repo.items() if k not in ("question", "paper")}
    edit_params(sm, significance)  # the split's first question; no `paper:`
    snakemake(sm, "ablation_word_significance")
    report, seconds = build_html_report(sm, "report_all")
    print(f"report_all: HTML report built in {seconds:.1f} s")
    assert_report_shows_every_output(sm, report, {"Main experiment": {"scores", "retrievals", "configuration",
                                                                      "explorer"},
                                                  "Ablations": {"word-significance", "sr-topk"}})
    assert set(report["inline"]) == {"reports/tables/quality.html", "reports/tables/cost.html",
                                     "reports/tables/retrievals.html", "reports/ablations/sr-topk.html",
                                     "reports/explorer/demo.html", "reports/explorer/demo-single.html"}
    assert "<dt>N_R</dt>" in report["inline"]["reports/tables/cost.html"]  # the glossary is shown too
    # the front page prints the resolved settings: the tiny params, and a default params.yaml leaves out
    assert "name: tiny\n" in report["configuration"] and "max_new_tokens: 6\n" in report["configuration"]
    assert "attention_scope: full" in report["configuration"] and "does not hold" not in report["configuration"]
    text = {path: re.sub(r"<[^>]+>", "", result["caption"]) for path, result in report["results"].items()}
    assert "dragin: {reference: paper, theta: 0.3, top_n: 35}" in text["reports/tables/quality.html"]
    assert "sample: {mode: random, size: 4, seed: 0}" in text["reports/figures/retrievals.png"]
    assert "scaar (the configuration whose similarity encoder scores SCW): {theta: 0.8" in text[
        "reports/ablations/word-significance.csv"]

    # dvc repro in a fresh repository produces the same predictions; push/pull round-trips them.
    dv = dvc_repository(tmp_path / "dvc", tiny_llama_dir)
    run(["dvc", "repro", "report"], dv)  # the main experiment (`dvc repro` alone also runs the ablation)
    for method in ("wo-rag", "sr-rag"):
        rel = f"data/runs/demo/{method}/predictions.jsonl"
        assert filecmp.cmp(sm / rel, dv / rel, shallow=False), rel
    assert "up to date" in run(["dvc", "status", "--with-deps", "report"], dv).stdout
    run(["dvc", "remote", "add", "-d", "local", str(tmp_path / "remote")], dv)
    run(["dvc", "push", "--with-deps", "report"], dv)
    shutil.copy(dv / "data/runs/demo/sr-rag/predictions.jsonl", tmp_path / "expected.jsonl")
    shutil.rmtree(dv / "data/runs")
    shutil.rmtree(dv / ".dvc/cache")
    run(["dvc", "pull", "--with-deps", "report"], dv)
    assert filecmp.cmp(dv / "data/runs/demo/sr-rag/predictions.jsonl", tmp_path / "expected.jsonl", shallow=False)


def test_a_name_with_shell_syntax_stops_snakemake_before_any_command_runs(tmp_path):
    copy_workflow(tmp_path)
    edit_params(tmp_path, lambda d: d["corpus"].update(name="c;touch${IFS}PWNED;#"))
    result = snakemake(tmp_path, "data/corpus/c", check=False)
    assert result.returncode != 0
    assert "error: params.yaml: corpus.name: corpus names may use ASCII letters" in result.stderr
    assert not list(tmp_path.rglob("PWNED")) and not (tmp_path / "logs").exists()


def test_free_text_reaches_a_command_as_one_quoted_argument(tiny_llama_dir, tmp_path):
    """A question id is free text that Snakemake puts on a command line: it arrives as one argument
    (the step then fails on the unknown id), and the shell runs nothing it contains."""
    copy_workflow(tmp_path)
    payload = "x'; touch PWNED; echo '"

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["ablations"]["word-significance"]["question"] = payload
    edit_params(tmp_path, edit)
    result = snakemake(tmp_path, "reports/ablations/word-significance.png", check=False)
    assert result.returncode != 0
    assert not list(tmp_path.rglob("PWNED"))
    log = (tmp_path / "logs/ablations/word-significance.log").read_text()
    assert payload in log and log.startswith("error: ")


def test_a_killed_snakemake_reruns_after_unlock_and_resumes_to_the_same_result(tiny_llama_dir, tmp_path):
    """kill -9 of Snakemake and its jobs (a crash): the rerun stops on Snakemake's lock, `--unlock`
    clears it, and the rerun resumes the generation job to the uninterrupted result."""
    import json
    import os
    import signal
    import subprocess
    import time

    target = "data/runs/demo/wo-rag/predictions.jsonl"
    roots = {}
    for name in ("straight", "killed"):
        roots[name] = copy_workflow(tmp_path / name)
        edit_params(roots[name], tiny_params(tiny_llama_dir))
        edit_params(roots[name], lambda d: d["generation"].update(batch_size=1, chunk_size=1, max_new_tokens=24))
    snakemake(roots["straight"], target)

    root = roots["killed"]
    snakemake(root, "data/splits/demo.jsonl", "data/models/tiny")
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", target], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    progress = root / "data/runs/demo/wo-rag/.progress/rank0.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not progress.exists() or len(progress.read_bytes().splitlines()) < 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake, its shell and the generate job
    proc.wait()
    finished = len(progress.read_bytes().splitlines()) - 1
    assert 1 <= finished < 4, "the job was not killed mid-way"

    locked = snakemake(root, target, check=False)
    assert locked.returncode != 0 and "--unlock" in locked.stderr + locked.stdout
    snakemake(root, "--unlock")
    snakemake(root, target)
    assert (root / target).read_bytes() == (roots["straight"] / target).read_bytes()
    record = json.loads((root / "data/runs/demo/wo-rag/provenance.json").read_text())
    assert record["resumed_batches"] == finished
    log = (root / "logs/generate/demo/wo-rag.log").read_text()  # the step's last line says so too
    assert "4 questions in " in log and f", {finished} of 4 batches resumed from the progress log -> " in log


def test_seakr_calibrates_on_its_own_split_and_its_ablation_variants_share_the_cache(tiny_llama_dir, tmp_path):
    """SeaKR end to end on the tiny Llama: `delta: calibrated` plans the calibrate step on demo-calib before
    the run; the reasoning ablation's variants differ only after the loop, so they hit each other's calls."""
    import json

    copy_workflow(tmp_path)

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["generation"]["cache"] = "data/cache/calls.sqlite"
        data["datasets"]["demo-small"]["sample"]["size"] = 2
        data["datasets"]["demo-calib"]["sample"].update(size=2, skip=2)
        data["methods"]["seakr"].update(k=3, max_new_tokens=None)  # the run's 6 tokens, not SeaKR's own 100
        data["ablations"] = {"seakr-reasoning": data["ablations"]["seakr-reasoning"],
                             "seakr-sweep": {**data["ablations"]["seakr-sweep"], "k_max": 4}}
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "ablation_seakr_reasoning", "ablation_seakr_sweep")
    calibration = json.loads((tmp_path / "data/calibration/demo-calib/seakr-reasoning--select.json").read_text())
    demo_small = {r["id"] for r in read_jsonl(tmp_path / "data/splits/demo-small.jsonl")}
    assert calibration["estimator"] == "eigenscore" and len(calibration["u"]) == 2
    assert not set(calibration["ids"]) & demo_small  # the calibration split is not evaluated
    assert set(calibration["thresholds"]) == {"best-f1", "rate-0.25", "rate-0.5", "rate-0.75"}
    hits = []
    for variant in ("select", "rationale", "knowledge"):
        run_dir = tmp_path / f"data/runs/demo-small/seakr-reasoning--{variant}"
        provenance = json.loads((run_dir / "provenance.json").read_text())
        hits.append(provenance["call_cache"]["sample_set"]["hits"])
        for record in read_jsonl(run_dir / "predictions.jsonl"):
            assert record["counters"]["sampled_sequences"] % 3 == 0 and record["counters"]["llm_calls"] >= 1
    assert sum(hits) > 0  # the loop's calls are the same in every variant
    sweep = (tmp_path / "reports/ablations/seakr-sweep.csv").read_text().splitlines()
    assert sweep[0] == "id,k,layer,u,em,f1" and len(sweep) == 1 + 2 * 3 * 2  # 2 questions, k 2..4, 2 layers
    assert (tmp_path / "reports/ablations/seakr-sweep.png").stat().st_size > 0
    assert (tmp_path / "reports/ablations/seakr-reasoning.md").is_file()
    report, _ = build_html_report(tmp_path, "ablation_seakr_reasoning", "ablation_seakr_sweep")
    assert_report_shows_every_output(tmp_path, report, {"SeaKR": {"seakr-reasoning", "seakr-sweep"}})
    caption = re.sub(r"<[^>]+>", "", report["results"]["reports/ablations/seakr-sweep.png"]["caption"])
    assert "One sampling pass of 4 samples per question" in caption


def test_sugar_calibrates_each_configuration_and_builds_table_three_and_figure_two(tiny_llama_dir, tmp_path):
    """SUGAR end to end on the tiny Llama (`judge: match`, call cache off): `thresholds: calibrated | mean`
    plan one calibration on demo-calib per configuration before its run; Table III's table has Time
    relative to its Single-step row (`sr-rag-qa`, SUGAR's own single-step branch), and Figure 2 is drawn
    from the runs' traces."""
    import json

    copy_workflow(tmp_path)

    def edit(data):
        tiny_params(tiny_llama_dir)(data)  # the call cache off: wall times compare
        data["datasets"]["demo-small"]["sample"]["size"] = 2
        data["datasets"]["demo-calib"]["sample"].update(size=2, skip=2)
        for name in ("sugar", "sugar-mean", "sugar-pe-mean", "sugar-pe-se"):
            data["methods"][name].update(samples=3, max_sample_tokens=4, multi={"max_steps": 2},
                                         calibration_dataset="demo-calib")
        data["methods"]["sugar"].pop("per_dataset", None)  # one split pair here: demo-small, demo-calib
        data["ablations"] = {name: {**data["ablations"][name], "datasets": ["demo-small"]}
                             for name in ("sugar-signal", "sugar-entropy")}
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "ablation_sugar_signal", "ablation_sugar_entropy")

    demo_small = {r["id"] for r in read_jsonl(tmp_path / "data/splits/demo-small.jsonl")}
    calibrations = {name: json.loads((tmp_path / f"data/calibration/demo-calib/{name}.json").read_text())
                    for name in ("sugar", "sugar-signal--sugar-mean", "sugar-signal--sugar-pe-mean",
                                 "sugar-signal--sugar-pe-se")}
    for calibration in calibrations.values():
        assert len(calibration["ids"]) == 2 and not set(calibration["ids"]) & demo_small
        for row in calibration["per_question"]:
            assert (row["none"]["retrievals"], row["single"]["retrievals"]) == (0, 1)
            assert 1 <= row["multi"]["retrievals"] <= 2 and {"em", "f1", "acc"} <= set(row["multi"])
        for signal in ("se", "pe"):
            assert set(calibration["thresholds"][signal]) == {"calibrated", "mean", "mean-single"}
            t1, t2 = calibration["thresholds"][signal]["mean"]  # the mean, the best t2 above it
            assert (t2 is None or t2 >= t1) and calibration["thresholds"][signal]["mean-single"] == [t1, None]
        ses = [row["se"] for row in calibration["per_question"]]
        assert calibration["mean_se"] == pytest.approx(sum(ses) / 2)
    # one sampling, the same numbers: a configuration's signal and rule do not change its calibration
    assert calibrations["sugar"]["per_question"] == calibrations["sugar-signal--sugar-pe-se"]["per_question"]

    pe_at_se = calibrations["sugar-signal--sugar-pe-se"]
    for trace in read_jsonl(tmp_path / "data/runs/demo-small/sugar-signal--sugar-pe-se/trace.jsonl"):
        step = trace["steps"][0]
        assert (step["phase"], step["signal"], step["threshold_rule"], step["threshold_signal"]) == (
            "sugar", "pe", "mean", "se")
        assert step["thresholds"] == pe_at_se["thresholds"]["se"]["mean"] and step["branch"] in ("none", "single", "multi")

    table = (tmp_path / "reports/ablations/sugar-signal.csv").read_text().splitlines()
    header = table[0].split(",")
    assert "time_rel" in header and len(table) == 1 + 5
    time_rel = {row.split(",")[1]: row.split(",")[header.index("time_rel")] for row in table[1:]}
    assert set(time_rel) == {"wo-rag-qa", "sr-rag-qa", "sugar-pe-mean (judge: match)", "sugar-pe-se (judge: match)",
                             "sugar-mean (judge: match)"}
    assert all(time_rel.values())  # every run made all of its calls
    assert float(time_rel["sr-rag-qa"]) == 1.0  # the baseline is a row: its Time is visible
    figure = (tmp_path / "reports/ablations/sugar-entropy.csv").read_text().splitlines()
    assert figure[0].startswith("dataset,method,id,se,pe") and len(figure) == 1 + 2
    assert (tmp_path / "reports/ablations/sugar-entropy.png").read_bytes()[:4] == b"\x89PNG"
    assert "| demo-small" in (tmp_path / "reports/ablations/sugar-entropy.md").read_text()
    report, _ = build_html_report(tmp_path, "ablation_sugar_signal", "ablation_sugar_entropy")
    assert_report_shows_every_output(tmp_path, report, {"SUGAR": {"sugar-signal", "sugar-entropy"}})
    caption = re.sub(r"<[^>]+>", "", report["results"]["reports/ablations/sugar-signal.md"]["caption"])
    assert "an ablation of 5 variants" in caption
    assert "time_rel (mean wall time per question over that of sr-rag-qa (a row of this table: its own reads 1)" in caption
