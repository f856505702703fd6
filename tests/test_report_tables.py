"""The main experiment's tables and figures as a reader gets them from `adaptive-rag report`: answer
quality and cost as two tables with a glossary of every column and mark, decimals that fit each column,
one method order (the experiment's) in every table and figure, a y-axis per panel and the panel of
differences from the baseline; and the resolved settings the HTML report's front page prints."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml

from adaptive_rag import cli
from adaptive_rag.config import load_params, parse_params
from adaptive_rag.reports.figures import retrievals_figure, scores_figure
from adaptive_rag.reports.layout import cell
from adaptive_rag.reports.resolved import resolved_settings, settings_digest
from adaptive_rag.reports.tables import collect_scores, retrieval_distribution

from conftest import REPO

# Per dataset and method: EM per question (F1 = EM, acc = EM) and retrievals per question. On `demo` every
# score is at most 0.25, on `demo-single` up to 0.875: a shared 0-1 axis would flatten `demo`.
RUNS = {
    ("demo", "wo-rag"): ([0, 0, 0, 1, 0, 0, 0, 0], [0] * 8),
    ("demo", "flare"): ([0, 1, 0, 1, 0, 0, 0, 0], [1, 2, 2, 1, 3, 1, 1, 2]),
    ("demo", "dragin"): ([0, 0, 0, 1, 0, 0, 0, 0], [0, 1, 0, 1, 1, 0, 0, 1]),
    ("demo-single", "wo-rag"): ([0, 0, 0, 0, 1, 0, 0, 0], [0] * 8),
    ("demo-single", "flare"): ([1, 1, 1, 1, 1, 1, 0, 1], [1, 1, 2, 1, 1, 1, 1, 1]),
    ("demo-single", "dragin"): ([1, 1, 0, 1, 1, 0, 1, 0], [1, 0, 1, 1, 0, 1, 1, 1]),
}
ORDER = [("demo", "wo-rag"), ("demo", "flare"), ("demo", "dragin"),
         ("demo-single", "wo-rag"), ("demo-single", "flare"), ("demo-single", "dragin")]
QUALITY = ["dataset", "method", "questions", "EM", "F1", "Acc", "ΔEM vs wo-rag", "ΔF1 vs wo-rag", "ΔAcc vs wo-rag",
           "answer found"]
COST = ["dataset", "method", "N_R", "S_eff ×100", "Gc", "Hc", "Tc", "Sc", "s/question", "cached calls"]


def write_score(path, dataset, method, ems, retrievals):
    rows = [{"id": f"q{i}", "em": float(e), "f1": float(e), "precision": float(e), "recall": float(e),
             "acc": float(e)} for i, e in enumerate(ems)]
    n_r = round(float(np.mean(retrievals)), 4)
    histogram = {str(k): retrievals.count(k) for k in sorted(set(retrievals))}
    summary = {"em": float(np.mean(ems)), "f1": float(np.mean(ems)), "acc": float(np.mean(ems)), "questions": len(ems),
               "answer_found": 1.0, "N_R": n_r, "Rc": n_r, "Gc": 1.0 + 2 * n_r, "Hc": n_r, "Tc": 40.0 + 41.25 * n_r,
               "Sc": 3.0 + n_r, "retrievals_histogram": histogram, "wall_time_s_mean": 0.2 + 0.7 * n_r,
               "cache_hits": 0}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"dataset": dataset, "method": method, "summary": summary, "per_question": rows}))
    return path


@pytest.fixture
def params_file(tmp_path):
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["report"]["resamples"] = 500
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def scores(tmp_path):
    """The score files, given to the report in an order unlike the experiment's."""
    scrambled = [ORDER[i] for i in (4, 0, 5, 2, 3, 1)]
    return [write_score(tmp_path / "scores" / d / f"{m}.json", d, m, *RUNS[(d, m)]) for d, m in scrambled]


@pytest.fixture
def reported(tmp_path, params_file, scores):
    """`adaptive-rag report` writing every output into tmp_path/out."""
    out = tmp_path / "out"
    code = cli.main(["--params", str(params_file), "report", "--scores", *map(str, scores),
                     "--quality", str(out / "quality"), "--cost", str(out / "cost"), "--table-csv",
                     str(out / "scores.csv"), "--figure", str(out / "scores.png"), "--retrievals",
                     str(out / "retrievals"), "--retrievals-figure", str(out / "retrievals.png"),
                     "--params-yaml", str(out / "params.yaml")])
    assert code == 0
    return out


def table(path):
    """(headers, rows) of the one markdown table in `path`, and the glossary terms under it."""
    lines = path.read_text().splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    terms = [line[4:line.index("**:")] for line in lines if line.startswith("- **")]
    return cells[0], cells[2:], terms


def test_quality_and_cost_are_two_tables_each_with_a_glossary_of_every_column(reported):
    headers, rows, terms = table(reported / "quality.md")
    assert headers == QUALITY and len(rows) == 6
    assert terms == ["dataset", "method", "questions", "EM", "F1", "Acc", "answer found", "value [lo, hi]",
                     "Δ… vs wo-rag", "p", "–"]  # every column (the Δ ones by one entry) and every mark
    headers, rows, terms = table(reported / "cost.md")
    assert headers == COST and "Rc" not in headers  # Rc is N_R by definition: shown once
    assert terms == [h for h in COST] + ["–"]
    text = (reported / "cost.md").read_text()
    assert "DioR's Rc counts the same retrievals, so it is shown once here and kept as `Rc` in the CSV" in text
    assert "Rows follow `experiment.datasets`, then `experiment.methods`" in text
    with (reported / "scores.csv").open() as handle:
        records = list(csv.DictReader(handle))
    assert all(r["Rc"] == r["N_R"] for r in records)  # the CSV keeps every column
    assert {"em_lo", "d_f1", "p_acc", "Rc", "S_eff ×100", "answer_found", "wall_time_s_mean", "cache_hits"} <= set(
        records[0])
    # HTML (what the HTML report shows inline) and LaTeX show the same tables and glossaries
    page = (reported / "cost.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<tr>") == 1 + 6
    assert all(f"<dt>{term}</dt>" in page for term in COST)
    assert '<th class="num">N_R</th>' in page and "<th>method</th>" in page  # numbers right-aligned
    latex = (reported / "quality.tex").read_text()
    assert r"\begin{tabular}{llrrrrrrrr}" in latex and "% p: two-sided sign-flip permutation p" in latex
    assert "& -- &" in latex  # the baseline's own difference


def test_each_column_has_the_decimals_that_fit_it(reported):
    _, rows, _ = table(reported / "cost.md")
    flare = dict(zip(COST, rows[1]))
    # flare on demo: N_R = 13 / 8 = 1.625 (stored 1.625), Tc = 40 + 41.25 N_R, S_eff = 100 (2/8 - 1/8) / 1.625
    assert (flare["N_R"], flare["Gc"], flare["Tc"], flare["S_eff ×100"]) == ("1.62", "4.25", "107.0", "7.69")
    assert (flare["s/question"], flare["cached calls"]) == ("1.34", "0")
    _, rows, _ = table(reported / "quality.md")
    quality = dict(zip(QUALITY, rows[1]))
    assert quality["questions"] == "8" and quality["answer found"] == "1.000"
    assert quality["EM"].startswith("0.250 [") and quality["ΔEM vs wo-rag"].startswith("+0.125 [")
    assert dict(zip(QUALITY, rows[0]))["ΔEM vs wo-rag"] == "–"  # the baseline itself
    with (reported / "scores.csv").open() as handle:
        assert next(csv.DictReader(handle))["N_R"] == "0.0000"  # tools get 4 decimals
    _, rows, _ = table(reported / "retrievals.md")
    assert rows[1][2:] == ["0", "4", "3", "1"]  # counts: no decimals
    assert [cell(v, 2) for v in (-0.001, None, 3, 2.5, "x")] == ["0.00", "–", "3", "2.50", "x"]


def test_every_table_and_figure_lists_the_methods_in_the_experiments_order(reported, params_file, scores):
    for name in ("quality.md", "cost.md", "retrievals.md"):
        _, rows, _ = table(reported / name)
        assert [tuple(row[:2]) for row in rows] == ORDER, name
    for name in ("scores.csv", "retrievals.csv"):
        with (reported / name).open() as handle:
            assert [(r["dataset"], r["method"]) for r in csv.DictReader(handle)] == ORDER, name
    params = load_params(params_file)
    figure = scores_figure(collect_scores(scores, params))
    for ax in figure.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["wo-rag", "flare", "dragin"]
    figure = retrievals_figure(retrieval_distribution(scores, params))
    assert [ax.get_title() for ax in figure.axes] == ["dataset: demo", "dataset: demo-single"]
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["wo-rag", "flare", "dragin"]


def test_the_scores_figure_scales_each_panel_and_draws_the_difference_from_the_baseline(params_file, scores):
    frame = collect_scores(scores, load_params(params_file))
    figure = scores_figure(frame)
    assert len(figure.axes) == 4  # datasets side by side; scores above, differences below
    (demo, single), (demo_d, single_d) = np.array(figure.axes).reshape(2, 2)
    assert demo.get_ylim()[0] == 0 and single.get_ylim()[0] == 0  # zero included
    for ax, dataset in ((demo, "demo"), (single, "demo-single")):  # each panel on its own values, room above
        highest = frame.loc[frame["dataset"] == dataset, ["em_hi", "f1_hi"]].to_numpy().max()
        assert ax.get_ylim()[1] == pytest.approx(1.15 * highest)
    assert demo.get_ylim()[1] < single.get_ylim()[1]
    assert demo_d.get_title() == "demo: difference from wo-rag"
    for ax, dataset in ((demo_d, "demo"), (single_d, "demo-single")):
        part = frame[frame["dataset"] == dataset]
        low, high = ax.get_ylim()
        assert low <= min(0, part["d_em_lo"].min()) and high >= part["d_f1_hi"].max()
        heights = sorted(round(p.get_height(), 6) for p in ax.patches if not np.isnan(p.get_height()))
        assert heights == sorted(round(v, 6) for v in part[["d_em", "d_f1"]].to_numpy().ravel() if not np.isnan(v))
        assert any(line.get_ydata()[0] == 0 for line in ax.get_lines())  # the zero line
        assert "baseline" in [t.get_text() for t in ax.texts]  # wo-rag's own slot says why it is empty
        assert ax.get_xlim() == (-0.5, 2.5)  # and keeps its place, under wo-rag's scores
    without = scores_figure(frame.drop(columns=[c for c in frame if c == "baseline" or c[:2] in ("d_", "p_")]))
    assert len(without.axes) == 2  # no comparison (experiment.baseline: null): scores only


def test_the_resolved_settings_fill_every_default_and_rerun_the_report(reported, params_file):
    params = load_params(params_file)
    written = yaml.safe_load((reported / "params.yaml").read_text())
    assert written == resolved_settings(params)
    assert list(written) == ["experiment", "report", "seed", "model", "corpus", "retrieval", "generation", "datasets",
                             "methods"]
    assert written["experiment"] == {"datasets": ["demo", "demo-single"], "baseline": "wo-rag",
                                     "methods": ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin"]}
    assert written["report"] == {"confidence": 0.95, "resamples": 500, "seed": 0}
    assert written["methods"]["dragin"]["settings"]["attention_scope"] == "full"  # a default params.yaml omits
    assert written["generation"]["chunk_size"] == 32 and set(written["datasets"]) == {"demo", "demo-single"}
    paper = resolved_settings(load_params(REPO / "params" / "paper.yaml"))["methods"]["dragin"]
    assert paper["settings"]["theta"] == 0.8 and set(paper["per_dataset"]) == {"2wikimultihopqa", "iirc",
                                                                                "strategyqa"}
    assert paper["per_dataset"]["2wikimultihopqa"]["top_n"] == 25  # presets that differ, per dataset
    data = yaml.safe_load(params_file.read_text())
    digest = settings_digest(parse_params(data))
    data["ablations"]["scaar-grid"]["vary"]["theta"] = [0.5]
    assert settings_digest(parse_params(data)) == digest  # an ablation is not the main experiment's setting
    data["generation"]["threads"] = 7
    assert settings_digest(parse_params(data)) != digest
