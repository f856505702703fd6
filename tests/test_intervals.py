"""Uncertainty of reported means: bootstrap intervals and the paired sign-flip test on cases whose answer
is known by hand, the refusal to pair different questions, the tables' new columns, and the ablation
grid's win/tie rule."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pandas as pd
import pytest
import yaml

from adaptive_rag.config import ReportConfig, parse_params
from adaptive_rag.errors import InputError
from adaptive_rag.evaluation.intervals import (EXACT_MAX, best_of, bootstrap_interval, bootstrap_means,
                                               paired_comparison, paired_values, question_values, sign_flip_p)
from adaptive_rag.reports.ablations import ablation_frame, win_counts, write_ablation
from adaptive_rag.reports.compare import compact
from adaptive_rag.reports.tables import collect_scores, score_tables, write_csv, write_tables

from conftest import REPO


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_a_constant_difference_has_a_zero_width_interval():
    baseline = np.array([0.0, 0.5, 0.25, 1.0, 0.0, 0.5])
    c = paired_comparison(baseline + 0.25, baseline, resamples=2000, seed=3)
    assert (c.difference, c.lo, c.hi) == pytest.approx((0.25, 0.25, 0.25))
    assert (c.questions, c.differing, c.exact) == (6, 6, True)
    assert c.p == pytest.approx(2 / 2 ** 6)  # every question favours the run: only all-+ and all-- reach it


def test_identical_runs_differ_by_zero_with_p_1():
    values = np.array([1.0, 0.0, 0.4, 0.0, 1.0])
    c = paired_comparison(values, values.copy(), resamples=500)
    assert (c.difference, c.lo, c.hi, c.p, c.differing, c.exact) == (0.0, 0.0, 0.0, 1.0, 0, True)


def test_exact_sign_flip_p_values_by_hand():
    # five differing questions, all for the run (any sizes): 2 of the 32 sign patterns are as extreme
    assert sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5]) == (pytest.approx(2 / 32), True)
    # +1 +1 +1 -1: |sum| >= 2 unless exactly two signs are +, i.e. 16 - C(4, 2) = 10 of 16 patterns
    assert sign_flip_p([1, 1, 1, -1, 0, 0]) == (pytest.approx(10 / 16), True)  # ties drop out
    assert sign_flip_p([1.0, -1.0]) == (1.0, True)
    assert sign_flip_p([0.5]) == (1.0, True)  # one differing question can never be significant


def test_many_differing_questions_use_seeded_monte_carlo():
    d = np.full(EXACT_MAX + 4, 0.5)  # 20 questions all for the run: 2 of 2^20 patterns reach the sum
    p, exact = sign_flip_p(d, resamples=999, seed=1)
    assert not exact and p == pytest.approx(1 / 1000)  # (1 + hits) / (1 + resamples), never 0
    assert sign_flip_p(d, resamples=999, seed=1) == (p, exact)
    mixed = np.where(np.arange(30) % 3 == 0, -1.0, 1.0)
    assert sign_flip_p(mixed, resamples=4000, seed=2) == sign_flip_p(mixed, resamples=4000, seed=2)
    # 20 +1 and 10 -1 of 30: P(|2K - 30| >= 10), K ~ Binomial(30, 1/2)
    exact_p = sum(comb(30, k) for k in range(31) if abs(2 * k - 30) >= 10) / 2 ** 30
    assert sign_flip_p(mixed, resamples=20000, seed=2)[0] == pytest.approx(exact_p, abs=0.01)


def test_bootstrap_of_a_0_1_metric_is_binomial():
    """Five of ten questions right: a resample's mean is K/10 with K ~ Binomial(10, 0.5), whose 2.5 % and
    97.5 % quantiles are 2 and 8 (CDF(1) = 11/1024 < 0.025 <= CDF(2) = 56/1024, CDF(7) = 968/1024 < 0.975
    <= CDF(8) = 1013/1024)."""
    values = np.array([1, 0] * 5, dtype=float)
    cdf = np.cumsum([comb(10, k) for k in range(11)]) / 2 ** 10
    lo_k, hi_k = int(np.searchsorted(cdf, 0.025)), int(np.searchsorted(cdf, 0.975))
    assert (lo_k, hi_k) == (2, 8)
    interval = bootstrap_interval(values, 0.95, 10_000, seed=0)
    assert (interval.estimate, interval.lo, interval.hi) == (0.5, lo_k / 10, hi_k / 10)
    observed = np.bincount(np.rint(bootstrap_means(values, 10_000, 0) * 10).astype(int), minlength=11) / 10_000
    assert np.abs(observed - np.array([comb(10, k) for k in range(11)]) / 2 ** 10).max() < 0.01


def test_intervals_are_deterministic_for_a_seed_and_ignore_row_order():
    rng = np.random.default_rng(0)
    values = rng.random(40)
    assert bootstrap_interval(values, seed=7) == bootstrap_interval(values, seed=7)
    assert bootstrap_interval(values, seed=7) != bootstrap_interval(values, seed=8)
    rows = [{"id": f"q{i:02d}", "f1": float(v)} for i, v in enumerate(values)]
    ids, ordered = question_values({"per_question": rows}, "f1")
    _, shuffled = question_values({"per_question": rows[::-1]}, "f1")
    assert ids[0] == "q00" and np.array_equal(ordered, shuffled)


def test_different_question_sets_are_refused_naming_both_files():
    a = {"path": "data/scores/demo/flare.json", "per_question": [{"id": "q1", "f1": 1.0}, {"id": "q2", "f1": 0.0}]}
    b = {"path": "data/scores/demo-small/wo-rag.json", "per_question": [{"id": "q1", "f1": 0.0}, {"id": "q3", "f1": 1}]}
    with pytest.raises(InputError, match=r"data/scores/demo/flare.json and data/scores/demo-small/wo-rag.json "
                                         r"score different questions .*only in the first: q2; only in the second: q3"):
        paired_values(a, b, "f1")
    twice = {"path": "x.json", "per_question": [{"id": "q1", "f1": 1.0}, {"id": "q1", "f1": 0.0}]}
    with pytest.raises(InputError, match="x.json: question 'q1' is scored twice"):
        question_values(twice, "f1")


def score_file(path, dataset, method, f1s, ems=None, ids=None):
    ems = f1s if ems is None else ems
    ids = ids or [f"q{i:02d}" for i in range(len(f1s))]
    rows = [{"id": q, "em": e, "f1": f, "precision": f, "recall": f, "acc": e} for q, f, e in zip(ids, f1s, ems)]
    summary = {"em": float(np.mean(ems)), "f1": float(np.mean(f1s)), "acc": float(np.mean(ems)), "N_R": 1.0,
               "Rc": 1.0, "Gc": 2.0, "Hc": 1.0, "Tc": 50.0, "Sc": 3.0, "questions": len(f1s), "answer_found": 1.0}
    path.write_text(json.dumps({"dataset": dataset, "method": method, "summary": summary, "per_question": rows}))
    return path


def test_the_report_tables_carry_intervals_and_the_paired_difference(base, tmp_path):
    params = parse_params(base)
    assert params.experiment_baseline == "wo-rag" and params.report == ReportConfig(0.95, 10_000, 0)
    wo = [0.0] * 6 + [1.0, 0.0]
    paths = [score_file(tmp_path / "wo.json", "demo", "wo-rag", wo),
             score_file(tmp_path / "flare.json", "demo", "flare", [1.0] * 5 + [0.0, 1.0, 0.0])]
    frame = collect_scores(paths, params).set_index("method")
    flare = frame.loc["flare"]
    assert flare["baseline"] == "wo-rag" and flare["d_f1"] == pytest.approx(5 / 8)
    assert flare["p_f1"] == pytest.approx(2 / 32)  # five questions differ, all for flare
    assert flare["d_f1_lo"] > 0 and flare["f1_lo"] <= flare["f1"] <= flare["f1_hi"]
    assert pd.isna(frame.loc["wo-rag", "d_f1"])
    frame = frame.reset_index()
    write_csv(frame, tmp_path / "t.csv")
    quality, _ = score_tables(frame, params.report)
    write_tables([quality], tmp_path / "quality", "Answer quality")
    header = (tmp_path / "t.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["method", "dataset", "questions"]
    for column in ("em_lo", "em_hi", "f1_lo", "f1_hi", "acc_lo", "acc_hi", "baseline", "d_f1", "d_f1_lo", "d_f1_hi",
                   "p_f1", "d_em", "p_em", "d_acc_hi", "p_acc"):
        assert column in header, column
    markdown = (tmp_path / "quality.md").read_text().splitlines()
    table_header = next(line for line in markdown if line.startswith("| "))
    assert "ΔF1 vs wo-rag" in table_header and "f1_lo" not in table_header
    row = next(line for line in markdown if "| flare " in line)
    f1 = frame.set_index("method").loc["flare"]
    assert f"{f1['f1']:.3f} [{f1['f1_lo']:.3f}, {f1['f1_hi']:.3f}]" in row
    assert f"+0.625 [{f1['d_f1_lo']:+.3f}, {f1['d_f1_hi']:+.3f}] p=0.062" in row
    brackets = next(line for line in markdown if line.startswith("- **value [lo, hi]**"))
    assert "95% percentile bootstrap interval" in brackets and "10,000 resamples" in brackets
    assert any("interval that contains 0 is not distinguishable from wo-rag" in line for line in markdown)
    latex = (tmp_path / "quality.tex").read_text()
    assert latex.startswith("% Answer quality") and r"$\Delta$F1 vs wo-rag" in latex
    assert "% value [lo, hi]: the mean over questions and its 95% percentile bootstrap interval" in latex


def test_the_report_refuses_a_baseline_on_other_questions_or_missing(base, tmp_path):
    params = parse_params(base)
    paths = [score_file(tmp_path / "wo.json", "demo", "wo-rag", [0.0, 1.0], ids=["a", "b"]),
             score_file(tmp_path / "flare.json", "demo", "flare", [1.0, 1.0], ids=["a", "c"])]
    with pytest.raises(InputError, match=f"{tmp_path / 'flare.json'} and {tmp_path / 'wo.json'} score different"):
        collect_scores(paths, params)
    with pytest.raises(InputError, match="no score file for demo/wo-rag among the inputs: .*experiment.baseline"):
        collect_scores(paths[1:], params)
    base["experiment"]["baseline"] = None
    frame = collect_scores(paths[1:], parse_params(base))
    assert "d_f1" not in frame and "f1_lo" in frame and list(compact(frame).columns)[3:6] == ["em", "f1", "acc"]


def test_best_of_counts_a_win_only_when_significant():
    n = 20
    clear = {"a": np.ones(n), "b": np.zeros(n), "c": np.r_[np.ones(2), np.zeros(n - 2)]}
    assert best_of(clear, resamples=2000) == {"a": "win", "b": "", "c": ""}
    # a leads b by one question (p = 1): both tie for best; c is 10 questions below a (p = 2/1024)
    close = {"a": np.r_[np.ones(10), np.zeros(10)], "b": np.r_[np.ones(9), np.zeros(11)], "c": np.zeros(n)}
    assert best_of(close, resamples=2000) == {"a": "tie", "b": "tie", "c": ""}
    assert best_of({"a": np.ones(3), "b": np.ones(3)}) == {"a": "tie", "b": "tie"}
    assert best_of({"alone": np.ones(3)}) == {"alone": ""}  # nothing to beat


def test_grid_wins_and_ties_use_the_paired_test(base, tmp_path):
    """scaar-grid: scw answers every question, origin and attn none. In each (query, theta) group scw
    wins outright; within a weighting the three queries score the same, so every query ties."""
    base["report"]["resamples"] = 500
    params = parse_params(base)
    ablation = params.ablations["scaar-grid"]
    assert ablation.compare_to == "wo-rag"
    paths = [score_file(tmp_path / "wo.json", "demo-small", "wo-rag", [0.0] * 20)]
    for k, variant in enumerate(ablation.variants):
        f1 = 1.0 if variant.values["weighting"] == "scw" else 0.0
        paths.append(score_file(tmp_path / f"{k}.json", "demo-small", variant.method, [f1] * 20))
    frame = ablation_frame(ablation, paths, params)
    assert set(frame.loc[frame["weighting"] == "scw", "weighting_best"]) == {"win"}
    assert set(frame.loc[frame["weighting"] != "scw", "weighting_best"]) == {""}
    assert set(frame["query_best"]) == {"tie"}
    weighting = win_counts(frame, "weighting", ["origin", "attn", "scw"])
    assert weighting.to_dict("index") == {"origin": {"significant win": 0, "tie for best": 0},
                                          "attn": {"significant win": 0, "tie for best": 0},
                                          "scw": {"significant win": 9, "tie for best": 0}}
    assert win_counts(frame, "query", ["curr-sent", "real-words", "pfq"])["tie for best"].tolist() == [9, 9, 9]
    written = write_ablation(ablation, frame, tmp_path / "out" / "scaar-grid", params.report)
    header = written[1].read_text().splitlines()[0].split(",")
    assert {"weighting_best", "query_best", "f1_lo", "d_f1", "p_f1"} <= set(header) and header[-1] == "run"
    assert written[3].read_bytes()[:4] == b"\x89PNG"


def test_ablations_without_a_declared_baseline_compare_with_their_wo_rag_row(base, tmp_path):
    base["report"]["resamples"] = 500
    params = parse_params(base)
    ablation = params.ablations["seakr-table1"]
    assert ablation.baseline is None and ablation.compare_to == "seakr-table1--wo-rag"
    # SUGAR's table compares with its own no-retrieval row, under SUGAR's prompt
    assert params.ablations["sugar-table1"].compare_to == "sugar-table1--wo-rag-qa"
    assert params.ablations["word-significance"].compare_to is None
    paths = [score_file(tmp_path / f"{k}.json", "demo-small", v.method, [float(k % 2)] * 4)
             for k, v in enumerate(ablation.variants)]
    frame = ablation_frame(ablation, paths, params)
    rows = frame.set_index("method")
    assert set(rows["baseline"]) == {"wo-rag"} and pd.isna(rows.loc["wo-rag", "d_f1"])
    assert rows.loc["ircot", "d_f1"] == 1.0 and rows.loc["ircot", "p_f1"] == pytest.approx(2 / 16)
    written = write_ablation(ablation, frame, tmp_path / "out" / "seakr-table1", params.report)
    assert "ΔF1 vs wo-rag" in written[0].read_text() and "ΔF1 vs wo-rag" in written[4].read_text()
