"""Interval and vs-baseline columns of a report table, and how the tables show them.

A table frame keeps plain numbers, so the CSV has each in its own column: `f1`, `f1_lo`, `f1_hi` (the
bootstrap interval of the mean), and against the baseline `d_f1`, `d_f1_lo`, `d_f1_hi`, `p_f1` (mean
paired difference, its interval, the sign-flip p), the same for `em` and `acc`, and `baseline` (what
was compared with). Markdown, HTML and LaTeX get compact cells instead, `0.083 [0.000, 0.167]` and
`+0.021 [-0.010, +0.052] p=0.375`, and glossary entries under the table saying what they are
(`marks`): the reader of a 16-question table should see at a glance that one question is 0.0625 of F1.
The statistics are `evaluation.intervals`; this module only lays them out.
"""

from __future__ import annotations

import math

from ..evaluation.intervals import EXACT_MAX, bootstrap_interval, paired_comparison, paired_values, question_values

METRICS = ("em", "f1", "acc")
LABELS = {"em": "EM", "f1": "F1", "acc": "Acc"}
INTERVAL_COLUMNS = [f"{m}_{end}" for m in METRICS for end in ("lo", "hi")]
COMPARISON_COLUMNS = ["baseline"] + [c for m in METRICS for c in (f"d_{m}", f"d_{m}_lo", f"d_{m}_hi", f"p_{m}")]
NAN = float("nan")


def interval_columns(score: dict, settings) -> dict:
    """`<metric>_lo`, `<metric>_hi` of one run (a score file's data)."""
    out = {}
    for metric in METRICS:
        _, values = question_values(score, metric)
        interval = bootstrap_interval(values, settings.confidence, settings.resamples, settings.seed)
        out[f"{metric}_lo"], out[f"{metric}_hi"] = interval.lo, interval.hi
    return out


def comparison_columns(score: dict, baseline: dict, label: str, settings) -> dict:
    """`baseline` and `d_`/`p_` columns of one run against `baseline` (empty for the baseline itself)."""
    out = {"baseline": label}
    for metric in METRICS:
        if score is baseline:
            out.update({f"d_{metric}": NAN, f"d_{metric}_lo": NAN, f"d_{metric}_hi": NAN, f"p_{metric}": NAN})
            continue
        mine, base = paired_values(score, baseline, metric)
        c = paired_comparison(mine, base, settings.confidence, settings.resamples, settings.seed)
        out.update({f"d_{metric}": c.difference, f"d_{metric}_lo": c.lo, f"d_{metric}_hi": c.hi, f"p_{metric}": c.p})
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _clean(value: float) -> float:
    return round(float(value), 12) + 0.0  # no "-0.000" for a difference that is 0 up to rounding


def interval_cell(value, lo, hi) -> str | None:
    if _missing(value):
        return None
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def difference_cell(d, lo, hi, p) -> str | None:
    if _missing(d):
        return None
    return f"{_clean(d):+.3f} [{_clean(lo):+.3f}, {_clean(hi):+.3f}] {p_text(p)}"


def baseline_label(frame) -> str | None:
    if "baseline" not in frame:
        return None
    labels = list(dict.fromkeys(frame["baseline"].dropna()))
    return labels[0] if len(labels) == 1 else "baseline"


def compact(frame):
    """The frame as markdown and LaTeX show it: one cell per metric with its interval, one `Δ<metric>
    vs <baseline>` cell per metric after them; frames without interval columns pass unchanged."""
    if not any(c in frame for c in INTERVAL_COLUMNS):
        return frame
    shown = frame.copy()
    for metric in METRICS:
        if f"{metric}_lo" in shown:
            shown[metric] = [interval_cell(v, lo, hi) for v, lo, hi in
                             zip(shown[metric], shown[f"{metric}_lo"], shown[f"{metric}_hi"])]
    label = baseline_label(shown)
    if label is not None:
        at = max(list(shown.columns).index(m) for m in METRICS if m in shown) + 1
        for metric in METRICS:
            cells = [difference_cell(*row) for row in zip(shown[f"d_{metric}"], shown[f"d_{metric}_lo"],
                                                          shown[f"d_{metric}_hi"], shown[f"p_{metric}"])]
            shown.insert(at, f"Δ{LABELS[metric]} vs {label}", cells)
            at += 1
    return shown.drop(columns=[c for c in INTERVAL_COLUMNS + COMPARISON_COLUMNS if c in shown])


def marks(frame, settings) -> list[tuple[str, str]]:
    """The glossary entries of the compact cells: what the brackets, Δ and p are (none without
    intervals)."""
    if not any(c in frame for c in INTERVAL_COLUMNS):
        return []
    out = [("value [lo, hi]", f"the mean over questions and its {settings.confidence:.0%} percentile bootstrap "
                              f"interval ({settings.resamples:,} resamples of the questions, seed {settings.seed})")]
    label = baseline_label(frame)
    if label is not None:
        out += [(f"Δ… vs {label}", f"mean per-question difference from {label} on the same questions, and in "
                                  f"brackets its {settings.confidence:.0%} paired bootstrap interval; an interval "
                                  f"that contains 0 is not distinguishable from {label} on these questions"),
                ("p", f"two-sided sign-flip permutation p of that difference (exact when at most {EXACT_MAX} "
                      f"questions differ; p<0.001 below 0.001)")]
    return out
