"""How sure a reported mean over questions is: a bootstrap interval of one run's mean, and a paired
test of a run against a baseline scored on the same questions.

Why: the demo scores 16-48 questions, so a difference between two methods is often one to three
questions. A point estimate hides that; an interval and a paired test show it. Everything here works
on the `per_question` rows of score files, so nothing is re-run and score files do not change.

- `bootstrap_interval`: the percentile bootstrap. Resample the questions with replacement
  `resamples` times, take each resample's mean, report the (1 - c)/2 and (1 + c)/2 quantiles
  (numpy's default, linearly interpolated) for confidence c.
- `paired_comparison`: per question d_i = run_i - baseline_i. The interval of mean(d) is the same
  bootstrap on d (the pairs are resampled together, so what both runs got right or wrong cancels).
  The p-value is a two-sided sign-flip permutation test of "no difference": under it each d_i is as
  likely to be -d_i, so p = P(|sum s_i d_i| >= |sum d_i|) over random signs s_i. Questions with
  d_i = 0 flip to themselves and drop out, so when at most `EXACT_MAX` questions differ every one of
  the 2^m sign patterns is enumerated and p is exact (all 5 of 5 differing questions favour the run:
  p = 2/32); beyond that p is estimated from `resamples` seeded draws as (1 + hits) / (1 + resamples),
  which is never 0 (Phipson & Smyth 2010).

Every function takes its `seed` and starts its own generator from it, so one run's interval does
not depend on which other runs share the table, and a table is the same for the same params.yaml.
Questions are ordered by id before resampling, so the order of rows in a score file does not matter
either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

EXACT_MAX = 16  # enumerate all 2^m sign patterns when m <= 16 questions differ (65,536 patterns)
CHUNK = 2_000_000  # resampled values held in memory at once (rows of resamples x questions)
RELATIVE_TOLERANCE = 1e-9  # |sum s_i d_i| >= |sum d_i| up to float rounding of the same numbers


@dataclass(frozen=True)
class ReportConfig:
    """The `report:` section of params.yaml (validated by `config`), as the reports pass it here:
    intervals at `confidence`, from `resamples` bootstrap resamples (and Monte Carlo sign flips when
    too many questions differ to enumerate them) drawn from `seed`."""

    confidence: float = 0.95
    resamples: int = 10_000
    seed: int = 0


@dataclass(frozen=True)
class Interval:
    estimate: float  # the mean over questions
    lo: float
    hi: float


@dataclass(frozen=True)
class Comparison:
    difference: float  # mean over questions of run - baseline
    lo: float
    hi: float
    p: float  # two-sided sign-flip permutation p-value of "no difference"
    questions: int
    differing: int  # questions where the two runs' scores differ (the test's effective sample)
    exact: bool  # p enumerated all 2^differing sign patterns (else seeded Monte Carlo)


def question_values(score: dict, metric: str) -> tuple[list[str], np.ndarray]:
    """(ids sorted, the metric in that order) from a score file's `per_question` rows."""
    where = score.get("path", f"{score.get('dataset')}/{score.get('method')}")
    rows = score.get("per_question")
    if not rows:
        raise InputError(f"{where}: no per_question rows to compute intervals from")
    values = {}
    for index, row in enumerate(rows):
        if "id" not in row or metric not in row:
            missing = "id" if "id" not in row else metric
            raise InputError(f"{where}: per_question[{index}] has no {missing!r}")
        if row["id"] in values:
            raise InputError(f"{where}: question {row['id']!r} is scored twice")
        values[row["id"]] = float(row[metric])
    ids = sorted(values)
    return ids, np.array([values[i] for i in ids], dtype=float)


def paired_values(score: dict, baseline: dict, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The metric of both runs on the same questions, aligned by id; refuses two different question sets
    (a paired test of different questions means nothing)."""
    ids, mine = question_values(score, metric)
    base_ids, base = question_values(baseline, metric)
    if ids != base_ids:
        only_mine, only_base = sorted(set(ids) - set(base_ids)), sorted(set(base_ids) - set(ids))
        raise InputError(
            f"{score.get('path')} and {baseline.get('path')} score different questions "
            f"({len(ids)} vs {len(base_ids)}; only in the first: {_few(only_mine)}; only in the second: "
            f"{_few(only_base)}): a paired comparison needs runs on the same split")
    return mine, base


def _few(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "") if ids else "none"


def _check(confidence: float, resamples: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The means of `resamples` resamples (with replacement) of `values`, drawn in chunks so that a
    1000-question split with 10,000 resamples never holds 10^7 indices at once."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK // max(n, 1))
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(start + rows, resamples)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def bootstrap_interval(values, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the mean of `values` (one run's per-question metric)."""
    _check(confidence, resamples)
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("no values to bootstrap")
    means = bootstrap_means(values, resamples, seed)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(float(values.mean()), float(lo), float(hi))


def sign_flip_p(differences, resamples: int = 10_000, seed: int = 0) -> tuple[float, bool]:
    """Two-sided sign-flip permutation p-value of mean(differences) = 0, and whether it is exact."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    m = len(d)
    observed = abs(d.sum())
    threshold = observed - RELATIVE_TOLERANCE * max(np.abs(d).sum(), 1.0)
    if m <= EXACT_MAX:
        patterns = 1 << m  # m = 0 (all ties): the one empty pattern, sum 0 >= 0, p = 1
        hits = 0
        for start in range(0, patterns, 1 << 14):
            codes = np.arange(start, min(start + (1 << 14), patterns))
            signs = ((codes[:, None] >> np.arange(m)) & 1) * 2 - 1
            hits += int((np.abs(signs @ d) >= threshold).sum())
        return hits / patterns, True
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK // m)
    hits = 0
    for start in range(0, resamples, rows):
        signs = rng.integers(0, 2, size=(min(rows, resamples - start), m)) * 2 - 1
        hits += int((np.abs(signs @ d) >= threshold).sum())
    return (1 + hits) / (1 + resamples), False


def paired_comparison(values, baseline_values, confidence: float = 0.95, resamples: int = 10_000,
                      seed: int = 0) -> Comparison:
    """A run against a baseline on the same questions (aligned arrays, e.g. from `paired_values`)."""
    _check(confidence, resamples)
    a, b = np.asarray(values, dtype=float), np.asarray(baseline_values, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired values need two equal-length non-empty vectors, got {a.shape} and {b.shape}")
    d = a - b
    interval = bootstrap_interval(d, confidence, resamples, seed)
    p, exact = sign_flip_p(d, resamples, seed)
    return Comparison(interval.estimate, interval.lo, interval.hi, p, len(d), int((d != 0).sum()), exact)


WIN, TIE = "win", "tie"


def best_of(candidates: dict[str, np.ndarray], confidence: float = 0.95, resamples: int = 10_000,
            seed: int = 0) -> dict[str, str]:
    """Which of several runs on the same questions is best: "win" for a run whose mean is higher than
    every other's with p < 1 - confidence against each (paired test); otherwise "tie" for the run(s)
    with the highest mean and every run not significantly below all of them; "" for the rest. One
    candidate alone has nothing to beat and gets "". Why not just the highest mean: on 16 questions
    the highest mean is often one question ahead, which is no evidence that the setting is better."""
    names = list(candidates)
    out = dict.fromkeys(names, "")
    if len(names) < 2:
        return out
    alpha = 1 - confidence
    means = {n: float(np.mean(candidates[n])) for n in names}
    top = max(means.values())
    leaders = [n for n in names if means[n] == top]

    def p(x, y):
        return sign_flip_p(np.asarray(candidates[x], float) - np.asarray(candidates[y], float), resamples, seed)[0]

    if len(leaders) == 1:
        leader = leaders[0]
        if all(p(leader, o) < alpha for o in names if o != leader):  # its mean is strictly the highest
            out[leader] = WIN
            return out
    for name in names:
        if name in leaders or all(p(leader, name) >= alpha for leader in leaders):
            out[name] = TIE
    return out
