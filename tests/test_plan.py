"""`adaptive-rag plan`: a profile's jobs, its work per question read off traces, and its projected hours.

The small profile's numbers are worked out by hand below from a hand-written unit table and counts
table; the job list is checked against Snakemake's own dry run for every profile in params/."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from adaptive_rag import cli
from adaptive_rag.calibration import calibrating_types
from adaptive_rag.config import load_params
from adaptive_rag.errors import InputError
from adaptive_rag.planning import counts, units
from adaptive_rag.planning.counts import RunCounts, Work, question_work, shared_prefix
from adaptive_rag.planning.jobs import rule_counts, suite_jobs
from adaptive_rag.planning.plan import (CALIBRATION_WORK, Planner, Source, budget_scaled, build_lines, part,
                                        project)

from conftest import REPO, copy_workflow, planned_jobs

PROFILES = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))

UNITS = {
    "devices": {"hand": {
        "device": "cpu", "hardware": "by hand", "threads": 2, "model": "smollm2-135m-instruct", "dtype": "float32",
        "parameters": 100, "date": "2026-11-28", "commit": "abc1234", "command": "written by hand",
        "torch": "2.13.0", "load_average": [0.5, 0.25],
        "units": {"process_start_s": 5, "light_job_s": 1, "model_load_s": 2, "materialise_s": 20, "call_s": 0.1,
                  "prefill_token_s": 0.01, "decode_step_s": {1: 0.5, 2: 0.8, 4: 1.2}, "decode_extras_ratio": 1.5,
                  "sample_step_s": {10: 1.0}, "ig_point_s": 0.25, "ig_question_tokens": 12, "prefix_tokens": 100,
                  "retriever_open_s": 3, "search_s": {344: 0.2},
                  "index_build": [{"passages": 100, "corpus_s": 1, "index_s": 2},
                                  {"passages": 1000, "corpus_s": 10, "index_s": 20}]}}},
    "models": {"smollm2-135m-instruct": 100, "big": 1000},
}


def hand_counts() -> list[RunCounts]:
    """Two measured questions per method on demo-small: wo-rag's second question makes a second call."""
    wo = (Work(calls=(10,), prefill=20), Work(calls=(30, 5), prefill=50))
    sr = (Work(calls=(20,), prefill=200, retrievals=1), Work(calls=(40,), prefill=300, retrievals=1))
    return [RunCounts("tiny@abc1234", "demo-small", "hotpotqa", "wo-rag", "wo-rag", 100, 8, 32, wo),
            RunCounts("tiny@abc1234", "demo-small", "hotpotqa", "sr-rag", "sr-rag", 100, 8, 32, sr,
                      hits={"generate": [1, 1]})]


def tiny_params(tmp_path: Path) -> Path:
    """The demo profile cut to wo-rag and SR-RAG on 4 demo-small questions, 2 rows, chunks of 4."""
    data = yaml.safe_load((REPO / "params" / "demo.yaml").read_text())
    for key in ("ablations", "detectors", "complexity_classifier"):
        data.pop(key)
    data["datasets"]["demo-small"]["sample"]["size"] = 4
    data["generation"].update(batch_size=2, chunk_size=4)
    data["experiment"].update(datasets=["demo-small"], methods=["wo-rag", "sr-rag"])
    for name in ("exemplars", "path"):
        for ds in data["datasets"].values():
            ds[name] = str(REPO / ds[name]) if not ds[name].startswith("builtin:") else ds[name]
    data["corpus"]["passages"] = str(REPO / data["corpus"]["passages"])
    path = tmp_path / "tiny.yaml"  # a file of no profile: its stem names the builds measured with it
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_small_profile_projects_to_the_hand_computed_cost(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no built split here: the sample's size counts
    params = load_params(tiny_params(tmp_path))
    table = units.units_for(UNITS, None, "smollm2-135m-instruct", "cpu")
    got = project(params, hand_counts(), table, "tiny")
    # Questions 1, 2, 1, 2 in one chunk of 4, 2 rows. Each model job: process 5 + load 2 + prefix 100 x 0.01 = 8.
    # wo-rag: call 1 rows' tokens 10, 30, 10, 30: max(80 / 2, 30) = 40 steps x 0.8 + 4 prompts x 0.1;
    # call 2 (questions 2, 4): 5, 5: max(10 / 2, 5) = 5 steps x 0.8 + 2 x 0.1; prefill 140 x 0.01.
    wo = 8 + 40 * 0.8 + 0.4 + 5 * 0.8 + 0.2 + 1.4
    # sr-rag: + retriever 3; tokens 20, 40, 20, 40: max(60, 40) = 60 steps x 0.8 + 0.4; prefill 1000 x 0.01; the
    # build's measured cache share (1 hit in 2 calls, and this profile runs its methods) halves the work;
    # 4 searches of 0.2 s on the 344-passage index.
    sr = 8 + 3 + (60 * 0.8 + 0.4 + 10) * 0.5 + 4 * 0.2
    # 2 scores, 1 split, the report and the trace explorer's page at 1 s each; the bundled model 20 s; corpus
    # and index of 344 passages, linear between the builds of 100 and 1000: 1 + 9 x 244 / 900 = 3.44 and
    # 2 + 18 x 244 / 900 = 6.88.
    other = 5 * 1 + 20 + (1 + 9 * 244 / 900) + (2 + 18 * 244 / 900)
    assert got.groups[("main experiment", "wo-rag")].seconds == pytest.approx(wo + 1)  # + its score job
    assert got.groups[("main experiment", "sr-rag")].seconds == pytest.approx(sr + 1)
    # wo 8 + 32 + 0.4 + 4 + 0.2 + 1.4 = 46; sr 8 + 3 + 58.4 x 0.5 + 0.8 = 41; other 5 + 20 + 3.44 + 6.88 = 35.32
    assert got.total.seconds == pytest.approx(wo + sr + other) == pytest.approx(122.32)
    assert got.total.jobs == 10 and got.default.seconds == pytest.approx(got.total.seconds)
    main = got.groups[("main experiment", "sr-rag")]
    assert (main.questions, main.prefill, main.decode, main.retrievals, main.cached) == (4, 1000, 120, 4, 2)
    assert got.groups[("main experiment", "wo-rag")].decode == 90 and got.unpriced == []

    units_file, counts_file = tmp_path / "units.yaml", tmp_path / "counts.jsonl"
    units_file.write_text(yaml.safe_dump(UNITS))
    counts.write_table(hand_counts(), counts_file)
    assert cli.main(["plan", "--params", "tiny.yaml", "--units", str(units_file), "--counts", str(counts_file)]) == 0
    out = capsys.readouterr().out
    assert "| sr-rag | 2 | 4 | 1.0k | 120 | 0 | 0 | 4 | 50 % | 0.0117 | 1, 2 |" in out
    assert "**`snakemake --cores all`: 10 jobs, 0.034 hours (122 s).**" in out
    assert "1. measured (tiny@abc1234)" in out and "Units: devices.hand of the unit-cost table: cpu, by hand" in out
    assert "## Each job" not in out
    assert cli.main(["plan", "--params", "tiny.yaml", "--units", str(units_file), "--counts", str(counts_file),
                     "--jobs"]) == 0
    out = capsys.readouterr().out
    assert "| generate demo-small/sr-rag | 41.0 | measured (tiny@abc1234) |" in out  # sr above
    assert "| explorer_page demo-small | 1.0 | measured floor of a job loading no model |" in out


def test_a_larger_model_and_budget_scale_what_stopped_at_the_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tiny_params(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["model"]["name"] = "big"
    data["datasets"]["demo-small"]["max_new_tokens"] = 200
    data["experiment"]["methods"] = ["wo-rag"]
    path.write_text(yaml.safe_dump(data))
    cut = RunCounts("other@abc1234", "demo-small", "hotpotqa", "wo-rag", "wo-rag", 100, 8, 32,
                    (Work(calls=(100,), cut=(0,), prefill=10), Work(calls=(40,), prefill=10)))
    table = units.units_for(UNITS, "hand", "big", "cuda")
    got = project(load_params(path), [cut], table, "tiny")
    # The call cut at budget 100 runs 200 tokens under budget 200; the other keeps its 40. Every per-token
    # cost is 10 x (1000 / 100 parameters): model load 20, prefix 100 x 0.1, steps x 8 at 2 rows.
    steps = max(-(-(200 + 40 + 200 + 40) // 2), 200)
    work = steps * 8 + 4 * 0.1 + 40 * 0.1
    assert got.groups[("main experiment", "wo-rag")].seconds == pytest.approx(5 + 20 + 10 + work + 1)
    assert table.scaled and table.scale == 10


def test_a_sampling_methods_question_costs_its_samples_times_the_sample_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Two measured SUGAR questions: 10 sampled answers each (the longest 8, then 12 tokens), then the branch it
    # chose: no retrieval and a 6-token answer, or single-step retrieval (1 search) and a 4-token answer.
    sugar = RunCounts("tiny@abc1234", "demo-small", "hotpotqa", "sugar", "sugar", 100, 8, 32,
                      (Work(calls=(6,), sets=((10, 8),), sampled=50, prefill=30),
                       Work(calls=(4,), sets=((10, 12),), sampled=90, prefill=230, retrievals=1)),
                      model="smollm2-135m-instruct", questions_file="data/demo/hotpot_demo.json")
    planner = Planner(load_params(tiny_params(tmp_path)), [sugar],
                      units.units_for(UNITS, None, "smollm2-135m-instruct", "cpu"), "tiny")
    got = planner.generate("demo-small", "sugar")
    # 4 questions: 1, 2, 1, 2. Fixed: process 5 + load 2 + prefix 100 x 0.01 + retriever 3 = 11.
    # Greedy call: 6, 4, 6, 4 tokens at 2 rows: max(20 / 2, 6) = 10 steps x 0.8 + 4 prompts x 0.1 = 8.4.
    # Samples: each question's 10 rows decode together for its longest row's steps at 1.0 s a step (k = 10),
    # plus a prompt: 2 x (8 x 1.0 + 0.1) + 2 x (12 x 1.0 + 0.1) = 40.4.
    # Prefill (30 + 230) x 2 x 0.01 = 5.2; 2 searches x 0.2 = 0.4. 11 + 8.4 + 40.4 + 5.2 + 0.4 = 65.4.
    assert got.seconds == pytest.approx(65.4)
    assert (got.questions, got.samples, got.decode, got.retrievals) == (4, 40, 20, 2)
    assert got.basis == {"measured (tiny@abc1234)"} and planner.used == {"tiny@abc1234": {"sugar"}}
    demo = replace(sugar, source="demo@def5678")
    lines = build_lines("shared", {"demo@def5678": ([demo], {"sugar"})})
    assert lines[2] == ("- demo@def5678: the `demo` profile's build, 1 run of smollm2-135m-instruct on "
                        "data/demo/hotpot_demo.json; priced from it: sugar.")
    assert "a demo question is not a shared one" in lines[3]
    assert len(build_lines("demo", {"demo@def5678": ([demo], {"sugar"})})) == 3  # its own build: no caveat


def test_the_cache_credits_at_most_one_first_step_per_question(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wo, sr = hand_counts()
    sr = replace(sr, hits={"generate": [5, 1]})
    planner = Planner(load_params(tiny_params(tmp_path)), [wo, sr],
                      units.units_for(UNITS, None, "smollm2-135m-instruct", "cpu"), "tiny")
    # 5 hits in 6 calls of 2 questions: 2 can be another method's first step; the other 3 were served by an
    # earlier attempt of that build, which a fresh build does not have: 2 / 6
    assert planner.cache_share("demo-small", Source((sr,), "measured")) == pytest.approx(2 / 6)


def test_counts_are_read_off_a_trace():
    def count(text: str) -> int:
        return len(text.split())

    trace = {"output": "one two three four", "passages": [{"id": "1"}, {"id": "2"}],
             "counters": {"generated_tokens": 3 + 2 + 5 + 8 + 4, "retrievals": 1},
             "steps": [{"phase": "early-detection", "tokens": ["Who", "is"], "fire": True},
                       {"phase": "look-ahead", "tokens": [["a", 0.9], ["b", 0.8], ["c", 0.1]], "finish": "length",
                        "retrieved": ["1", "2"]},
                       {"phase": "regenerate", "tokens": [["d", 0.9], ["e", 0.9]], "finish": "eos"},
                       {"phase": "step", "text": "five words of greedy text", "finish": "stop",
                        "samples": ["two words", "four words in all", "x y"]}]}
    work = question_work(trace, count, own_prompt=7, passage_tokens=10.0, ig_steps=64)
    # calls: 3 (cut at the budget), 2, 5 re-tokenized, and 4 = 22 - 10 - 8 tokens no step itemises; one
    # sampling call of 3 rows whose longest has 4 tokens; prefill: 5 calls x 7 + 2 passages x 10 + 4 later
    # calls x 4 output tokens / 2
    assert work == Work((3, 2, 5, 4), (0,), ((3, 4),), 8, 5 * 7 + 20 + 8, 1, 64)
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2 and shared_prefix([[1, 2]]) == 0


def test_a_sugar_trace_counts_its_samples_and_its_branch():
    def count(text: str) -> int:
        return len(text.split())

    trace = {"output": "Morrow gate", "passages": [{"id": "1"}],
             "counters": {"generated_tokens": 3 + 1 + 2 + 4 + 2, "retrievals": 1},
             "steps": [{"phase": "sugar", "branch": "single", "samples": ["a b c", "d", "e f", "g h i j"]},
                       {"phase": "generate", "tokens": [["Morrow", 0.4], ["gate", 0.8]], "finish": "eos"}]}
    work = question_work(trace, count, own_prompt=9, passage_tokens=20.0, ig_steps=64)
    # one sampling call of 4 rows (longest 4 tokens, 3 + 1 + 2 + 4 = 10 in all) and the branch's one 2-token call;
    # prefill: 2 prompts x 9 + the 1 passage shown x 20 + 1 later prompt x 2 output tokens / 2 = 39
    assert work == Work((2,), (), ((4, 4),), 10, 39, 1, 0)


def test_parts_of_a_questions_work():
    work = Work((10, 20), (1,), ((10, 8), (10, 6)), 140, 400, 2, 0)
    assert part(work, "first") == Work((10,), (), ((10, 8),), 70, 200, 0, 0)
    assert part(work, "samples") == Work((), (), ((10, 8), (10, 6)), 140, 200, 0, 0)
    assert budget_scaled(work, 100, 50) == Work((10, 10), (1,), work.sets, 140, 400, 2, 0)


def test_every_calibrating_type_says_what_its_calibration_runs():
    assert set(calibrating_types()) <= set(CALIBRATION_WORK)


def test_units_refuse_an_unknown_device_or_model():
    with pytest.raises(InputError, match="--device 'gpu': units.yaml measures hand$"):
        units.units_for(UNITS, "gpu", "big", "cpu", Path("units.yaml"))
    with pytest.raises(InputError, match="model.name 'llama': its parameter count is not under models: of units.yaml"):
        units.units_for(UNITS, None, "llama", "cpu", Path("units.yaml"))
    assert units.interpolate({1: 0.5, 2: 0.8, 4: 1.2}, 3) == pytest.approx(1.0)
    assert units.interpolate({1: 0.5, 2: 0.8, 4: 1.2}, 8) == pytest.approx(2.0)  # the last segment's line


def test_plan_fails_with_one_line_naming_the_key_or_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tiny_params(tmp_path)
    good, counts_file = tmp_path / "units.yaml", tmp_path / "counts.jsonl"
    good.write_text(yaml.safe_dump(UNITS))
    counts.write_table(hand_counts(), counts_file)
    no_torch, no_steps = yaml.safe_load(good.read_text()), yaml.safe_load(good.read_text())
    del no_torch["devices"]["hand"]["torch"]
    del no_steps["devices"]["hand"]["units"]["decode_step_s"]
    (tmp_path / "no-torch.yaml").write_text(yaml.safe_dump(no_torch))
    (tmp_path / "no-steps.yaml").write_text(yaml.safe_dump(no_steps))
    big = tmp_path / "big.yaml"
    big.write_text((tmp_path / "tiny.yaml").read_text().replace("name: smollm2-135m-instruct", "name: mystery-7b"))
    cases = [(["--device", "gpu"], f"--device 'gpu': {good} measures hand"),
             (["--units", "no-torch.yaml"], "no-torch.yaml: devices.hand has no torch; `python benchmarks/"),
             (["--units", "no-steps.yaml"], "no-steps.yaml: devices.hand.units has no decode_step_s; rerun "),
             (["--counts", "absent.jsonl"], "absent.jsonl: missing; `python benchmarks/question_counts.py` writes"),
             (["--params", "big.yaml"], f"model.name 'mystery-7b': its parameter count is not under models: of {good}"),
             (["--profile", "nope"], "no profile 'nope' in params/; available: none")]
    for extra, message in cases:
        argv = ["plan", "--params", "tiny.yaml", "--units", str(good), "--counts", str(counts_file), *extra]
        assert cli.main(argv) == 2, extra
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"error: {message}") and err.count("\n") == 1, (extra, err)


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_plans_with_the_committed_tables(name, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert cli.main(["plan", "--profile", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# Plan: params/{name}.yaml\n") and "**Suite (`all` and `ablations`): " in out
    jobs = len(suite_jobs(load_params(REPO / "params" / f"{name}.yaml")))
    assert f"{jobs} jobs, " in out.split("**Suite")[1]
    if name == "self-rag":  # its own method stays unpriced, saying why
        assert "- no run can measure it offline (no model here has Self-RAG's reflection tokens): 11 jobs" in out


def test_the_committed_tables_load():
    table = units.load_table()
    assert all({"hardware", "date", "commit", "command", "units"} <= set(e) for e in table["devices"].values())
    runs = counts.load_table()
    assert {r.type for r in runs} >= {"wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin", "sugar",
                                      "scaar", "adaptive-rag", "adaptive-retrieval"}
    assert {r.profile for r in runs} == {"demo", "shared"} and all(r.model and r.questions_file for r in runs)
    assert all(len(r.questions) > 0 and "@" in r.source for r in runs)


@pytest.mark.slow  # a Snakemake dry run per profile
@pytest.mark.parametrize("name", PROFILES)
def test_the_plans_jobs_are_snakemakes(name, tmp_path):
    work = tmp_path / "work"
    copy_workflow(work)
    shutil.copy(REPO / "params" / f"{name}.yaml", work / "params.yaml")
    params = load_params(work / "params.yaml")
    if any(ds.path.startswith("../shared/") for ds in params.datasets.values()):
        if not (REPO.parent / "shared").is_dir():
            pytest.skip("../shared/data is not beside this checkout")
        (tmp_path / "shared").symlink_to(REPO.parent / "shared")
    for ds in params.datasets.values():  # exemplars the user writes (the reference profile's)
        if not ds.exemplars.startswith("builtin:") and not (work / ds.exemplars).exists():
            (work / ds.exemplars).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / "data/demo/exemplars.json", work / ds.exemplars)
    assert rule_counts(suite_jobs(params)) == planned_jobs(work, "all", "ablations")
