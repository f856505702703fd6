"""dvc.yaml is generated from params.yaml: the committed file is current, every ablation and experiment run
has its stage, no two stages own overlapping paths, and `dvc-record` refuses missing outputs by name.

The end-to-end path (Snakemake build, `adaptive-rag dvc-record`, `dvc repro` a no-op, push, pull into a
clone) is in tests/test_workflow.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from adaptive_rag.config import load_params, parse_params
from adaptive_rag.dvc_record import never_built, record, select
from adaptive_rag.dvc_stages import (ABLATION_SUFFIXES, REPORT_FILES, _Builder, ablation_rule, build_stages,
                                     check_current, check_outs_disjoint, render)
from adaptive_rag.errors import ConfigError, InputError

from conftest import REPO

PROFILES = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))


@pytest.fixture(scope="module")
def committed():
    """The stages of the repository's dvc.yaml as DVC reads them (the file, not a fresh render)."""
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


@pytest.fixture(scope="module")
def params():
    return load_params(REPO / "params.yaml")


def test_committed_dvc_yaml_is_what_params_yaml_generates(params):
    check_current(params, REPO / "dvc.yaml")


def test_every_ablation_has_a_stage_owning_exactly_its_report_files(committed, params):
    ablation_stages = {name for name in committed if name.startswith("ablation_")}
    assert ablation_stages == {ablation_rule(name) for name in params.ablations}
    for name, ablation in params.ablations.items():
        stage = committed[ablation_rule(name)]
        suffixes = ABLATION_SUFFIXES.get(ablation.plot, ("md", "csv", "tex", "png", "html"))
        assert stage["outs"] == [f"reports/ablations/{name}.{s}" for s in suffixes], name
        assert stage["cmd"] == f"snakemake --cores all {ablation_rule(name)}"  # the Snakefile's target
        assert f"ablations.{name}" in stage["params"]
    assert committed["ablation_word_significance"]["outs"] == [
        "reports/ablations/word-significance.csv", "reports/ablations/word-significance.png"]
    # the special kinds read the model on one split with a base configuration, and no run
    assert "methods.scaar" in committed["ablation_word_significance"]["params"]
    assert {"methods.seakr", "datasets.demo-calib"} <= set(committed["ablation_seakr_sweep"]["params"])


def test_experiment_runs_and_report_are_owned_path_by_path(committed, params):
    runs = [(d, m) for d in params.experiment_datasets for m in params.experiment_methods]
    for dataset, method in runs:
        assert committed[f"generate_{dataset}_{method}"]["outs"] == [f"data/runs/{dataset}/{method}"]
    report = committed["report"]
    assert report["outs"] == [f"data/scores/{d}/{m}.json" for d, m in runs] + list(REPORT_FILES)
    assert report["deps"][:len(runs)] == [f"data/runs/{d}/{m}" for d, m in runs]


def test_an_ablation_reading_an_experiment_run_depends_on_it(committed):
    """scaar-theta runs on the experiment's dataset and compares with its wo-rag run: DVC must order it
    after the stages owning that run and score, or its Snakemake target would build them first."""
    deps = committed["ablation_scaar_theta"]["deps"]
    assert "data/runs/demo/wo-rag" in deps and "data/scores/demo/wo-rag.json" in deps
    assert "data/runs/demo/wo-rag" not in committed["ablation_scaar_grid"]["deps"]  # demo-small only


def test_params_dependencies_mirror_what_snakemake_reruns_on(committed, params):
    sr = committed["generate_demo_sr-rag"]["params"]
    assert {"methods.sr-rag", "datasets.demo", "retrieval", "model", "seed", "generation.max_new_tokens"} <= set(sr)
    assert "generation" not in sr and "generation.threads" not in sr  # more threads rerun no run
    # the report shows every resolved setting (reports/params.yaml), so it reruns on them, as Snakemake's rule does
    assert {"seed", "model", "corpus", "retrieval", "generation", "experiment", "report"} <= set(
        committed["report"]["params"])
    assert "retrieval" not in committed["generate_demo_wo-rag"]["params"]  # wo-rag searches nothing
    # a variant's settings live in its ablation's `vary` and its base's entry; SeaKR's calibration split too
    seakr = committed["ablation_seakr_reasoning"]
    assert {"ablations.seakr-reasoning", "methods.seakr", "datasets.demo-calib"} <= set(seakr["params"])
    assert "data/splits/demo-calib.jsonl" in seakr["deps"]
    assert "data/index/demo/dense" in committed["ablation_scaar_retriever"]["deps"]
    for name, stage in committed.items():  # DVC refuses a params key that params.yaml lacks
        for key in stage.get("params", []):
            node = params.raw
            for part in key.split("."):
                assert part in node, f"{name}: {key}"
                node = node[part]


def test_a_run_depends_on_the_files_its_method_declares(committed, params):
    """DioR reads its trained detectors: its stages wait for the detector stages and rerun when the
    weights change; w/o ED reads no early detector. SeaKR's calibration file is made inside its own
    Snakemake target, so it is no dependency (DVC would refuse a stage whose dependency is missing)."""
    detectors = ["data/detectors/early.safetensors", "data/detectors/realtime.safetensors"]
    assert set(detectors) <= set(committed["ablation_dior_table3"]["deps"])
    assert committed["train_early_detector"]["outs"][0] == detectors[0]
    assert _Builder(params).declared_inputs("demo-small", "dior-wo-ed") == detectors[1:]
    assert not set(detectors) & set(committed["ablation_sugar_table2"]["deps"])
    seakr = committed["ablation_seakr_reasoning"]["deps"]
    assert not [d for d in seakr if d.startswith("data/calibration")]
    # Adaptive Retrieval's corpus-frequency popularity is made inside the target too, from the split and
    # the corpus behind the index, both dependencies already
    table1 = committed["ablation_sugar_table1"]["deps"]
    assert not [d for d in table1 if d.startswith("data/popularity")]
    assert {"data/splits/demo-single-small.jsonl", "data/splits/demo-single-calib.jsonl", "data/index/demo/bm25"} <= set(
        table1)
    assert _Builder(params).declared_inputs("demo-single-small", "sugar-table1--adaptive-retrieval") == []


def test_no_two_stages_own_overlapping_paths(committed):
    check_outs_disjoint(committed)
    outs = [out for stage in committed.values() for out in stage["outs"]]
    assert len(outs) == len(set(outs))


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_renders_disjoint_stages(profile):
    params = load_params(REPO / "params" / f"{profile}.yaml")
    stages = build_stages(params)
    check_outs_disjoint(stages)
    assert {n for n in stages if n.startswith("ablation_")} == {ablation_rule(n) for n in params.ablations}
    assert yaml.safe_load(render(params))["stages"] == stages


def test_the_overlap_check_names_both_stages():
    stages = {"generate": {"outs": ["data/runs"]}, "ablation_x": {"outs": ["data/runs/demo/x--1"]}}
    with pytest.raises(ConfigError, match="'generate' and 'ablation_x' both own data/runs/demo/x--1"):
        check_outs_disjoint(stages)


def test_a_new_ablation_makes_the_committed_file_stale(tmp_path):
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["ablations"]["sr-topk"] = {"datasets": ["demo-small"], "method": "sr-rag", "vary": {"top_k": [1, 2]}}
    with pytest.raises(ConfigError, match=r"dvc.yaml is out of date with params.yaml \(missing stages: "
                                          r"ablation_sr_topk\); run `adaptive-rag dvc-yaml`"):
        check_current(parse_params(data), REPO / "dvc.yaml")


def test_stage_selection_takes_names_and_groups(committed):
    assert select(committed, ["report"]) == ["report"]
    assert select(committed, ["split"]) == [f"split_{d}" for d in ("demo", "demo-single", "demo-single-small",
                                                                   "demo-single-calib", "demo-small", "demo-calib",
                                                                   "demo-early")]
    assert select(committed, ["ablation_seakr_sweep", "ablation"])[0] == "ablation_seakr_sweep"
    assert len(select(committed, [])) == len(committed)
    with pytest.raises(InputError, match="no DVC stage 'reprot' in dvc.yaml"):
        select(committed, ["reprot"])


def test_record_refuses_missing_outputs_naming_stage_and_path(tmp_path, monkeypatch, params):
    """Nothing built: the first missing file is named with its stage, before DVC is even started."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text(render(params))
    for path in ("data/models/smollm2-135m-instruct", "data/corpus/demo"):
        (tmp_path / path).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        record(params, ["model", "corpus", "index_bm25"])
    message = str(err.value)
    assert message.startswith("nothing recorded: these stages' files are missing")
    assert "  stage index_bm25: output data/index/demo/bm25 does not exist" in message
    assert "stage corpus: dependency data/demo/psgs_demo.tsv does not exist" in message
    assert "stage model" not in message  # built: nothing missing
    assert "build them first with `snakemake --cores all data/corpus/demo data/index/demo/bm25`" in message


def test_record_without_names_leaves_out_what_was_never_built(tmp_path, monkeypatch, params):
    """Nothing built at all is refused; a stage with one output built and a file missing is an incomplete
    build, refused by name, while the stages with no output built are left out, not reported missing."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text(render(params))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^nothing recorded: no stage of dvc.yaml has been built yet; build with "
                                         r"`snakemake --cores all` first$"):
        record(params, [])
    (tmp_path / "data/models/smollm2-135m-instruct").mkdir(parents=True)
    (tmp_path / "data/splits").mkdir(parents=True)
    (tmp_path / "data/splits/demo.jsonl").write_text("{}\n")  # its .meta.json is missing
    with pytest.raises(InputError) as err:
        record(params, [])
    lines = str(err.value).splitlines()
    assert lines[1:3] == ["  stage split_demo: output data/splits/demo.meta.json does not exist",
                          "  stage split_demo: dependency data/demo/hotpot_demo.json does not exist"]
    assert {line.split(":")[0] for line in lines[1:]} == {"  stage split_demo"}  # model: complete; others: unbuilt
    assert never_built(build_stages(params), ["model", "split_demo", "corpus"]) == ["corpus"]


def test_record_refuses_a_stale_dvc_yaml(tmp_path, monkeypatch, params):
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text(render(params).replace("ablation_sugar_entropy", "ablation_gone"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"dvc.yaml is out of date with \S*params.yaml \(missing stages: "
                                          r"ablation_sugar_entropy; stages no longer in params: ablation_gone\)"):
        record(params, [])
    Path(".dvc").rmdir()
    with pytest.raises(InputError, match="is not a DVC repository"):
        record(params, [])


def test_record_refuses_outputs_a_build_is_still_writing_before_writing_dvc_lock(tmp_path, monkeypatch, params):
    """With or without the dry run: a Snakemake lock or incomplete marker naming a stage's output, or a run
    directory holding its progress log (a generation writing, or killed), is refused by stage and path,
    and dvc.lock is not written."""
    import base64

    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text(render(params))
    model = tmp_path / "data/models/smollm2-135m-instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    incomplete = tmp_path / ".snakemake/incomplete"
    incomplete.mkdir(parents=True)
    (incomplete / base64.urlsafe_b64encode(b"data/models/smollm2-135m-instruct").decode()).write_text("{}")
    with pytest.raises(InputError) as err:
        record(params, ["model"], check_snakemake=False)
    assert str(err.value).splitlines() == [
        "nothing recorded: these stages' outputs are still being written; wait for the build to finish, or if it "
        "was killed, finish it with `snakemake --cores all model`:",
        "  stage model: data/models/smollm2-135m-instruct: marked incomplete by Snakemake (its job runs, or was "
        "killed)"]
    shutil.rmtree(incomplete)
    locks = tmp_path / ".snakemake/locks"
    locks.mkdir()
    (locks / "0.output.lock").write_text(f"{model / 'config.json'}\ndata/other.txt\n")  # Snakemake may write either form
    with pytest.raises(InputError, match=r"stage model: \S+/config.json: an output of the Snakemake build running "
                                         r"here \(.snakemake/locks/0.output.lock; if none runs, a killed one left "
                                         r"it: `snakemake --unlock`\)$"):
        record(params, ["model"], check_snakemake=False)
    shutil.rmtree(locks)
    run = tmp_path / "data/runs/demo/wo-rag"
    (run / ".progress").mkdir(parents=True)  # a generation job: the run's outputs are written when it ends
    with pytest.raises(InputError, match=r"stage generate_demo_wo-rag: data/runs/demo/wo-rag/.progress: a writer's "
                                         r"unfinished file \(it runs, or was killed\)$"):
        record(params, ["generate_demo_wo-rag"], check_snakemake=False)
    assert not (tmp_path / "dvc.lock").exists()
