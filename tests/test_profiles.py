"""The params profiles (demo, shared, paper, scaar, seakr, sugar, dior, self-rag, reference): each is valid and plans the DAG it promises."""

import hashlib
import http.server
import io
import json
import shutil
import sys
import threading
import zipfile

import pytest

from adaptive_rag.config import load_params
from adaptive_rag.dvc_stages import check_current
from adaptive_rag.prompts.fewshot import resolve_exemplars
from conftest import REPO, SHARED_DATA, copy_workflow, edit_params, planned_jobs, run, snakemake


@pytest.mark.parametrize("name", ["demo", "shared", "paper", "scaar", "seakr", "sugar", "dior", "self-rag",
                                  "reference"])
def test_profiles_are_valid(name):
    load_params(REPO / "params" / f"{name}.yaml")


def test_params_yaml_is_the_demo_profile():
    assert (REPO / "params.yaml").read_text() == (REPO / "params" / "demo.yaml").read_text()


@pytest.mark.slow  # runs the `adaptive_rag profile` CLI
def test_profile_command_installs_a_profile_and_rejects_unknown_ones(tmp_path):
    copy_workflow(tmp_path)
    shutil.copytree(REPO / "params", tmp_path / "params")
    cli = [sys.executable, "-m", "adaptive_rag"]
    installed = run([*cli, "profile", "paper"], tmp_path)
    assert (tmp_path / "params.yaml").read_text() == (REPO / "params" / "paper.yaml").read_text()
    assert "dvc.yaml: 54 stages written from params.yaml" in installed.stdout  # the stages follow the profile
    check_current(load_params(tmp_path / "params.yaml"), tmp_path / "dvc.yaml")
    result = run([*cli, "profile", "laptop"], tmp_path, check=False)
    assert result.returncode == 2 and "no profile 'laptop' in params/; available: demo, dior, paper, reference, scaar, seakr, self-rag, shared, sugar" in result.stderr


@pytest.mark.slow  # a Snakemake dry run
def test_paper_profile_plans_downloads_for_every_input(tmp_path):
    copy_workflow(tmp_path)
    shutil.copy(REPO / "params" / "paper.yaml", tmp_path / "params.yaml")
    jobs = planned_jobs(tmp_path)
    downloads = {rule: n for rule, n in jobs.items() if rule.startswith("download_")}
    assert len(downloads) == 8 and set(downloads.values()) == {1}
    assert jobs["split"] == 7 and jobs["generate"] == 42 and jobs["index"] == 1


def test_self_rag_profile_runs_the_self_rag_model_on_the_comparisons_questions():
    """Self-RAG's own model (a params file has one), the reference's README settings, and the very question
    samples of the seakr (and dior) and sugar profiles, so its rows sit beside theirs."""
    p = load_params(REPO / "params" / "self-rag.yaml")
    assert (p.model.source, p.model.backend, p.experiment_methods) == ("selfrag/selfrag_llama2_7b", "hf", ["self-rag"])
    assert p.method("self-rag").settings == {
        "mode": "adaptive", "threshold": 0.2, "retrieve_rule": "reference-logprobs", "top_k": 3, "w_rel": 1.0,
        "w_sup": 1.0, "w_use": 0.5, "use_seqscore": True, "max_new_tokens": 100, "retriever": None}
    seakr, sugar = load_params(REPO / "params" / "seakr.yaml"), load_params(REPO / "params" / "sugar.yaml")
    for name in seakr.experiment_datasets:
        assert p.dataset(name).sample == seakr.dataset(name).sample and p.dataset(name).path == seakr.dataset(name).path
    for name in sugar.experiment_datasets:
        assert p.dataset(f"{name}-sugar").sample == sugar.dataset(name).sample
        assert p.dataset(f"{name}-sugar").path == sugar.dataset(name).path
    assert p.experiment_datasets == seakr.experiment_datasets + [f"{n}-sugar" for n in sugar.experiment_datasets]
    assert p.corpus == seakr.corpus and p.retrieval.type == "bm25"


SEAKR_COMPLEX, SEAKR_SIMPLE = ["2wikimultihopqa", "hotpotqa", "iirc"], ["nq", "triviaqa", "squad"]


def test_seakr_profile_has_the_papers_settings():
    """SeaKR §4.1: Llama-2-7B-chat white-box, k = 20, delta = -6, l = L/2, N = 3, the reference code's 7 steps
    and 5 passages; simple QA with one search; Table 3 on 500-question prefixes; calibration disjoint."""
    p = load_params(REPO / "params" / "seakr.yaml")
    assert (p.model.source, p.model.backend, p.model.dtype, p.model.prompt_format) == (
        "meta-llama/Llama-2-7b-chat-hf", "hf", "bfloat16", "raw")
    seakr = p.method("seakr")
    assert seakr.type == "seakr"
    assert {k: seakr.settings[k] for k in ("variant", "estimator", "k", "delta", "layer", "hidden_source", "top_k",
                                            "max_steps", "max_docs")} == {
        "variant": "multihop", "estimator": "eigenscore", "k": 20, "delta": -6.0, "layer": None,
        "hidden_source": "mlp", "top_k": 3, "max_steps": 7, "max_docs": 5}
    assert {d: seakr.settings_for(d)["variant"] for d in SEAKR_COMPLEX + SEAKR_SIMPLE} == {
        **dict.fromkeys(SEAKR_COMPLEX, "multihop"), **dict.fromkeys(SEAKR_SIMPLE, "simple")}
    simple = p.method("seakr-simple")
    assert (simple.type, simple.settings["variant"], simple.settings["k"], simple.settings["delta"],
            simple.settings["top_k"]) == ("seakr", "simple", 20, -6.0, 3)
    ircot = p.method("ircot")
    assert (ircot.type, ircot.settings["accumulate"], ircot.settings["top_k"], ircot.settings["max_passages"]) == (
        "fs-rag", True, 3, 15)
    for name in ("ircot", "flare", "dragin"):  # §4.1.3: one search on simple QA, for the baselines too
        assert [p.method(name).settings_for(d)["max_retrievals"] for d in SEAKR_SIMPLE] == [1, 1, 1]
    assert p.experiment_datasets == SEAKR_COMPLEX + SEAKR_SIMPLE
    assert p.experiment_methods == ["wo-rag", "ircot", "flare", "dragin", "seakr"]

    for name in SEAKR_COMPLEX + SEAKR_SIMPLE:
        ds, small = p.dataset(name), p.dataset(f"{name}-500")
        assert ds.num_exemplars == min(10, len(json.loads(resolve_exemplars(ds.exemplars).read_text())))
        assert (small.path, small.sample.mode, small.sample.seed, small.sample.size) == (
            ds.path, ds.sample.mode, ds.sample.seed, 500)  # a prefix of the evaluation sample
    nq, calib = p.dataset("nq"), p.dataset("nq-calib")
    assert (calib.path, calib.sample.mode, calib.sample.seed) == (nq.path, nq.sample.mode, nq.sample.seed)
    assert calib.sample.skip == nq.sample.size  # no evaluated NQ question is calibrated on
    for name in ("seakr-calibrated", "seakr-simple-calibrated"):
        settings = p.method(name).settings
        assert (settings["delta"], settings["calibration_dataset"], settings["k"]) == ("calibrated", "nq-calib", 20)

    ablations = p.ablations
    assert ablations["seakr-table1"].datasets == SEAKR_COMPLEX
    assert ablations["seakr-table2"].datasets == SEAKR_SIMPLE
    assert ablations["seakr-table2"].vary["method"] == ["wo-rag", "flare", "dragin", "seakr-simple"]
    for name in ("seakr-estimator", "seakr-retrieval", "seakr-rerank", "seakr-reasoning"):
        assert ablations[name].datasets == [f"{d}-500" for d in SEAKR_COMPLEX]
    for name, base in (("seakr-estimator-simple", "seakr-simple-calibrated"), ("seakr-retrieval-simple", "seakr-simple"),
                       ("seakr-rerank-simple", "seakr-simple")):
        assert ablations[name].datasets == [f"{d}-500" for d in SEAKR_SIMPLE]
        assert {v.base for v in ablations[name].variants} == {base}
    assert ablations["seakr-recall"].vary == {"top_k": [1, 3, 5, 7, 10]}
    sweep = ablations["seakr-sweep"]
    assert (sweep.plot, sweep.datasets, sweep.base, sweep.k_max) == ("uncertainty-sweep", ["nq-calib"], "seakr", 30)


@pytest.mark.slow  # Snakemake dry runs
def test_seakr_profile_plans_tables_calibration_and_sweep(tmp_path):
    copy_workflow(tmp_path)
    shutil.copy(REPO / "params" / "seakr.yaml", tmp_path / "params.yaml")
    jobs = planned_jobs(tmp_path)
    assert len([rule for rule in jobs if rule.startswith("download_")]) == 7
    assert jobs["split"] == 6 and jobs["generate"] == 30 and "calibrate" not in jobs
    out = snakemake(tmp_path, "-n", "--quiet", "rules", "--", "ablations").stdout
    jobs = {parts[0]: int(parts[1]) for parts in map(str.split, out.splitlines())
            if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job")}
    # 13 splits; one calibration per estimator and variant (6 x 2); Table 3 and Figure 3a runs with their
    # wo-RAG baselines, Tables 1-2 as ablations: 108 runs; the sweep on nq-calib
    assert jobs["split"] == 13 and jobs["calibrate"] == 12 and jobs["generate"] == 108
    assert jobs["uncertainty_sweep"] == 1 and jobs["ablation"] == 10


SUGAR_SINGLE, SUGAR_MULTI = ["squad", "nq", "triviaqa"], ["hotpotqa", "2wikimultihopqa"]


def test_sugar_profile_has_the_papers_settings():
    """SUGAR §III: Llama-2-chat 7B, Contriever-MS MARCO, one-shot Q/A, 10 samples at a high temperature,
    NLI entailment; thresholds calibrated per dataset on splits disjoint from the evaluation; Tables I-III
    and Figure 2 as targets; the call cache off so Time compares."""
    p = load_params(REPO / "params" / "sugar.yaml")
    assert (p.model.source, p.model.backend, p.model.prompt_format) == ("meta-llama/Llama-2-7b-chat-hf", "hf", "raw")
    assert (p.retrieval.type, p.retrieval.dense.encoder) == ("dense", "facebook/contriever-msmarco")
    assert p.generation.cache is None
    sugar = p.method("sugar").settings
    assert {k: sugar[k] for k in ("samples", "temperature", "top_k", "top_p", "judge", "strict", "prompt_style",
                                  "thresholds", "signal", "estimator")} == {
        "samples": 10, "temperature": 1.0, "top_k": None, "top_p": None, "judge": "nli:microsoft/deberta-large-mnli",
        "strict": True, "prompt_style": "qa-oneshot", "thresholds": "calibrated", "signal": "se", "estimator": "rao"}
    assert sugar["multi"] == {"top_k": 3, "max_steps": 8, "max_passages": 15}
    ircot = p.method("ircot").settings
    assert (ircot["accumulate"], ircot["max_retrievals"], ircot["max_passages"]) == (True, 8, 15)
    for name in SUGAR_SINGLE + SUGAR_MULTI:
        ds, calib = p.dataset(name), p.dataset(f"{name}-calib")
        assert (calib.path, calib.sample.mode, calib.sample.seed) == (ds.path, ds.sample.mode, ds.sample.seed)
        assert calib.sample.skip == ds.sample.size == 500  # no evaluated question is calibrated on
        assert p.method("sugar").settings_for(name)["calibration_dataset"] == "{dataset}-calib"
    ablations = p.ablations
    assert ablations["sugar-table1"].datasets == SUGAR_SINGLE and ablations["sugar-table2"].datasets == SUGAR_MULTI
    # the Single-step row is SUGAR's own single step (its one-shot prompt): the Time baseline, a row of the table
    assert ablations["sugar-table1"].time_baseline == "sugar-table1--sr-rag-qa"
    assert ablations["sugar-signal"].datasets == ["triviaqa", "squad"]
    signal = {v.base: p.method(v.method).settings for v in ablations["sugar-signal"].variants
              if v.base.startswith("sugar")}
    assert {n: (s["signal"], s["thresholds"], s["threshold_signal"]) for n, s in signal.items()} == {
        "sugar-pe-mean": ("pe", "mean", "pe"), "sugar-pe-se": ("pe", "mean", "se"), "sugar-mean": ("se", "mean", "se")}
    assert (ablations["sugar-entropy"].plot, ablations["sugar-entropy"].datasets) == (
        "sugar-entropy", SUGAR_SINGLE + SUGAR_MULTI)
    # Table I's Adaptive Retrieval row: the corpus-frequency popularity (no page views offline), its cut
    # calibrated per dataset
    retrieval = p.method("adaptive-retrieval").settings
    assert (retrieval["popularity_proxy"], retrieval["threshold"], retrieval["calibration_dataset"]) == (
        "corpus-frequency", "calibrated", "{dataset}-calib")
    assert "adaptive-retrieval" in ablations["sugar-table1"].vary["method"]


@pytest.mark.slow  # Snakemake dry runs
def test_sugar_profile_plans_calibrations_tables_and_figure(tmp_path):
    copy_workflow(tmp_path)
    shutil.copy(REPO / "params" / "sugar.yaml", tmp_path / "params.yaml")
    out = snakemake(tmp_path, "-n", "--quiet", "rules", "--", "ablations").stdout
    jobs = {parts[0]: int(parts[1]) for parts in map(str.split, out.splitlines())
            if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job")}
    # 10 splits (5 evaluated, 5 calibration); one calibration per SUGAR configuration and dataset (Tables I
    # 3, II 2, III 3 x 2, Figure 2's runs 5) and per dataset of Table I's Adaptive Retrieval row (3); 35 runs
    # (the Time baseline sr-rag-qa is one of their rows), Table I's Adaptive-RAG and Adaptive Retrieval rows
    # on its 3 datasets and the 15 runs the labels read (3 strategies x 5 calibration splits); the
    # corpus-frequency popularity of Table I's 3 datasets and their calibration splits; three tables and the
    # figure; the labels and the classifier
    assert jobs["split"] == 10 and jobs["calibrate"] == 16 + 3 and jobs["generate"] == 35 + 3 + 3 + 15
    assert jobs["popularity"] == 6
    assert jobs["dense_index"] == 1 and jobs["ablation"] == 3 and jobs["sugar_entropy_levels"] == 1
    assert jobs["complexity_labels"] == 1 and jobs["train_complexity_classifier"] == 1


@pytest.mark.slow  # a Snakemake dry run
def test_shared_profile_plans_four_datasets(tmp_path):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    dest = tmp_path / "repo"
    copy_workflow(dest)
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # the profile reads ../shared/data
    shutil.copy(REPO / "params" / "shared.yaml", dest / "params.yaml")
    assert planned_jobs(dest) == {"model": 1, "corpus": 1, "index": 1, "split": 4, "generate": 24, "score": 24,
                                  "report": 1, "explorer_page": 4, "all": 1}


class _ArchiveHandler(http.server.BaseHTTPRequestHandler):
    payload = b""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.mark.slow  # runs Snakemake
def test_download_rule_fetches_verifies_and_extracts(tmp_path):
    """A `downloads:` entry becomes a Snakemake rule whose outputs feed the split step."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("bundle/dev.json", (REPO / "data/demo/hotpot_demo.json").read_text())
    _ArchiveHandler.payload = buffer.getvalue()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ArchiveHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        copy_workflow(tmp_path)
        url = f"http://127.0.0.1:{server.server_port}/bundle.zip"

        def edit(data):
            data["downloads"] = {"demo-archive": {"url": url, "sha256": hashlib.sha256(_ArchiveHandler.payload).hexdigest(),
                                                  "extract": ["bundle/dev.json"]}}
            data["datasets"]["demo"]["path"] = "data/raw/demo-archive/dev.json"

        edit_params(tmp_path, edit)
        snakemake(tmp_path, "splits")
        log = (tmp_path / "logs/download/demo-archive.log").read_text()
        assert "verified" in log and "NOT verified" not in log
        assert (tmp_path / "data/raw/demo-archive/dev.json").read_text() == (REPO / "data/demo/hotpot_demo.json").read_text()
        assert len((tmp_path / "data/splits/demo.jsonl").read_text().splitlines()) == 48

        edit_params(tmp_path, lambda d: d["downloads"]["demo-archive"].update(sha256="0" * 64))
        shutil.rmtree(tmp_path / "data/raw")
        result = snakemake(tmp_path, "splits", check=False)
        assert result.returncode != 0
        log = (tmp_path / "logs/download/demo-archive.log").read_text()
        assert "error:" in log and url in log and "0" * 64 in log
    finally:
        server.shutdown()


DIOR_MULTI = ["2wikimultihopqa", "hotpotqa", "iirc", "strategyqa"]


def test_dior_profile_has_the_papers_settings():
    """DioR §4.1 and App. B.3 with its released configs: Llama-2-7B-chat, raw prompts, BM25 with
    Elasticsearch's k1/b plus SBERT and SGPT as named dense retrievers, top-k 3, at most 5 retrievals,
    25 keywords on 2Wiki and 35 elsewhere, the configs' budgets and RIND thresholds; the detectors
    trained on data no evaluated split shares; Tables 1-3 and 5 as targets; RaDIO's rows with its released
    configs' settings (docs/radio.md)."""
    p = load_params(REPO / "params" / "dior.yaml")
    assert (p.model.source, p.model.prompt_format) == ("meta-llama/Llama-2-7b-chat-hf", "raw")
    assert (p.retrieval.k1, p.retrieval.b, sorted(p.retrieval.encoders)) == (1.2, 0.75, ["sbert", "sgpt"])
    assert p.retrieval.encoders["sgpt"].type == "sgpt-be"
    assert [p.dataset(d).max_new_tokens for d in DIOR_MULTI] == [256, 128, 256, 100]
    assert [p.dataset(d).num_exemplars for d in DIOR_MULTI] == [6, 8, 8, 6]
    dior = {d: p.method("dior").settings_for(d) for d in DIOR_MULTI}
    assert {d: (s["top_k"], s["max_retrievals"], s["top_n"], s["theta"]) for d, s in dior.items()} == {
        "2wikimultihopqa": (3, 5, 25, 1.0), "hotpotqa": (3, 5, 35, 1.4), "iirc": (3, 5, 35, 1.4),
        "strategyqa": (3, 5, 35, 0.75)}
    assert {s["early"] for s in dior.values()} == {"on"} and {s["realtime"] for s in dior.values()} == {"mlp-hidden"}
    table1 = p.ablations["dior-table1"]
    assert {(p.method(v.method).type, p.retriever_kind("hotpotqa", v.method)) for v in table1.variants} == {
        (t, r) for t in ("dragin", "dior", "radio") for r in ("bm25", "dense:sbert", "dense:sgpt")}
    radio = {d: p.method("radio").settings_for(d) for d in DIOR_MULTI}  # config/Llama2-7b-chat/*/RaDIO.json
    assert {d: (s["top_k"], s["top_n"], s["theta"]) for d, s in radio.items()} == {
        "2wikimultihopqa": (1, 25, 1.0), "hotpotqa": (1, 35, 1.4), "iirc": (1, 35, 1.4), "strategyqa": (1, 35, 0.75)}
    assert p.retriever_kind("hotpotqa", "radio") == "dense:sbert"
    assert [sum(p.method(v.method).type == "radio" for v in p.ablations[name].variants)
            for name in ("dior-table2", "dior-table5")] == [1, 1]
    assert p.detectors.radio.max_passages == 8304
    table3 = {p.method(v.method).settings_for("iirc")[k] for v in p.ablations["dior-table3"].variants
              for k in ("early", "realtime", "pre", "post")}
    assert table3 == {"on", "off", "mlp-hidden", "prob", "scored", "sequential", "stepwise", "single"}
    assert list(p.detectors.early.datasets) == ["nq-early"] and p.dataset("nq-early").sample.size == 5201
    assert p.detectors.realtime.max_passages == 8304


def test_reference_profile_sets_every_dragin_code_rule():
    """params/reference.yaml: the DRAGIN reference code's decisions (docs/reproducing-papers.md#the-reference-profile)."""
    params = load_params(REPO / "params" / "reference.yaml")
    assert (params.retrieval.k1, params.retrieval.b, params.retrieval.query_max_tokens) == (1.2, 0.75, 64)
    assert (params.model.prompt_format, params.model.dtype, params.generation.answer_fallback_tokens) == ("raw", "float32", 20)
    for name in ("wo-rag", "sr-rag", "flare", "dragin"):
        settings = params.method(name).settings
        assert (settings["answer_extraction"], settings["stop"]) == ("dragin-code", [])
    flare, dragin = params.method("flare").settings, params.method("dragin").settings
    assert (flare["theta"], flare["keep"], flare["score_range"], flare["masking"], flare["end_of_turn"]) == (
        0.08, "all", "dragin-code", "dragin-code", "continue")
    assert flare["template"] == "builtin:dragin-hotpotqa-flare"
    assert (dragin["theta"], dragin["query_words"], dragin["end_of_turn"], dragin["keep"]) == (
        0.8, "dragin-code", "continue", "first-sentence")
    assert (dragin["sentence_words"], dragin["filter_order"]) == ("dragin-code", "after-firing")
    assert flare["empty_query"] == dragin["empty_query"] == "search"
