"""SUGAR's three-way routing and the two ways its thresholds are read off a calibration split.

The paper "used cross-validation to determine the thresholds that yield the best performance in terms
of effectiveness metrics" and prints none of them; its Table III ablation instead sets the thresholds
from a dataset's average entropy. Table III's Step column (1.04 and 1.36 for the PE rows, averaged
over TriviaQA and SQuAD) is above the single-step row's 1.00, which a no-retrieval/single-step split
can never reach: those rows also routed to multi-step retrieval, so the average alone cannot have
been both thresholds. Both rules are here, on the per-question answers of all three branches:

- `search`: every (t1, t2) with t1 <= t2, each at a cut between observed values, scored by the mean
  Acc of the answers it would route to, and the number of retrievals they cost;
- `best`: the highest Acc; ties go to the cheaper routing (fewer retrievals, then the larger t1 and t2,
  which send unseen values to the cheaper branch);
- `mean_rule`: t1 = the mean of the signal (the paper: "we set the single-hop SUGAR thresholds to the
  average values"), t2 found as the paper finds its thresholds, the best Acc on the calibration split
  with t1 held at the mean (so multi-step stays reachable, as Table III's Step column requires);
- `mean_single_rule`: t1 = the mean, t2 = infinity (no multi-step; the other reading, which cannot
  give a Step above 1).

Acc (0 or 1) and retrievals are whole numbers per question, so two routings with equal totals tie
exactly and the tie rule, not rounding noise, decides.
"""

from __future__ import annotations

import math
from typing import Sequence

BRANCHES = ("none", "single", "multi")
GRID_CUTS = 101  # at most this many places per threshold: quantiles of the values when more are distinct
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def route(value: float, t1: float, t2: float) -> str:
    """none up to t1, single up to t2, multi above: a value on a threshold takes the cheaper branch."""
    if value <= t1:
        return "none"
    if value <= t2:
        return "single"
    return "multi"


def cuts(values: Sequence[float], most: int = GRID_CUTS) -> list[float]:
    """Where a threshold can usefully sit: below every value, then at each observed value (a value on
    a cut routes below it); with more distinct values than fit, evenly spaced ranks of them."""
    finite = sorted({float(v) for v in values if math.isfinite(v)})
    if not finite:
        return [0.0]
    if len(finite) > most - 1:
        last = len(finite) - 1
        finite = sorted({finite[round(i * last / (most - 2))] for i in range(most - 1)})
    return [finite[0] - 1.0, *finite]


def search(values: Sequence[float], acc: Sequence[Sequence[float]],
           steps: Sequence[Sequence[float]]) -> list[dict]:
    """One row per (t1, t2): the mean Acc and mean retrievals of routing question i with `values[i]` to
    branch b, whose answer scored `acc[i][b]` after `steps[i][b]` retrievals (b in BRANCHES order).
    t2 also takes infinity (no multi-step), stored as None."""
    places = cuts(values)
    return [row for i, t1 in enumerate(places) for row in _routed(values, acc, steps, t1, places[i:])]


def _routed(values, acc, steps, t1: float, t2s: Sequence[float]) -> list[dict]:
    """The rows of `search` for one t1 and the given t2 places (infinity added)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    a, s = np.asarray(acc, dtype=float), np.asarray(steps, dtype=float)
    n = len(v)
    if n == 0:
        raise ValueError("no calibration values to search thresholds on")
    none = v <= t1
    rows = []
    for t2 in [*t2s, math.inf]:
        single = ~none & (v <= t2)
        branch = np.where(none, 0, np.where(single, 1, 2))
        chosen = np.arange(n), branch
        rows.append({"t1": t1, "t2": None if t2 == math.inf else t2,
                     "acc": float(a[chosen].sum()) / n, "steps": float(s[chosen].sum()) / n,
                     **{name: int((branch == k).sum()) for k, name in enumerate(BRANCHES)}})
    return rows


def best(rows: list[dict]) -> list:
    """[t1, t2] of the highest Acc; ties to fewer retrievals, then the larger t1 and t2."""
    def key(row):
        t2 = math.inf if row["t2"] is None else row["t2"]
        return round(row["acc"], 12), -round(row["steps"], 12), row["t1"], t2

    chosen = max(rows, key=key)
    return [chosen["t1"], chosen["t2"]]


def mean_rule(values: Sequence[float], acc: Sequence[Sequence[float]], steps: Sequence[Sequence[float]]) -> list:
    """[mean of the finite values, t2]: §IV-D's Table III sets "the single-hop SUGAR thresholds to the
    average values", so t1 is the average; the multi-step threshold is found as the paper finds its
    thresholds (§IV-A: the best effectiveness on held-out questions), by `best` over t2 = t1 (everything
    above the mean to multi-step), each cut above it and infinity."""
    t1 = _mean(values)
    return best(_routed(values, acc, steps, t1, [t1, *(c for c in cuts(values) if c > t1)]))


def mean_single_rule(values: Sequence[float], acc=None, steps=None) -> list:
    """[mean of the finite values, None]: t1 at the average, no multi-step branch."""
    return [_mean(values), None]


def _mean(values: Sequence[float]) -> float:
    """Mean of the finite values (an infinite value is a question with no defined entropy,
    `sugar.Assessment`: it has no place in an average)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        raise ValueError("no finite calibration values to average")
    return sum(finite) / len(finite)


def quantiles(values: Sequence[float]) -> dict[str, float]:
    import numpy as np

    finite = [v for v in values if math.isfinite(v)]
    return {str(q): float(np.quantile(finite, q)) for q in QUANTILES} if finite else {}
