"""Seaborn figures for the report step.

Error bars are the tables' bootstrap intervals (`reports.compare`), drawn by `interval_bars` with
matplotlib: seaborn's own estimator would bootstrap over the rows of the frame (one per run), not over
questions, and the figures must say what the tables say.
"""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write


def theme():
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    return sns


def interval_bars(ax, categories: list[str], series: list[tuple], horizontal: bool = False, fmt: str = "{:.2f}"):
    """Grouped bars, one group per category and one bar per series `(label, values, lo, hi)`; `lo`/`hi`
    None draws no error bar. Values may be NaN (no bar, no label)."""
    import numpy as np
    import seaborn as sns

    palette = sns.color_palette(n_colors=max(len(series), 1))
    width = 0.8 / max(len(series), 1)
    positions = np.arange(len(categories))
    for j, (label, values, lo, hi) in enumerate(series):
        values = np.asarray(values, dtype=float)
        where = positions - 0.4 + width * (j + 0.5)
        error, ends = None, values
        if lo is not None:
            hi = np.asarray(hi, dtype=float)
            error, ends = np.vstack([values - np.asarray(lo, dtype=float), hi - values]), np.fmax(values, hi)
        kwargs = {"label": label, "color": palette[j], "capsize": 3, "error_kw": {"elinewidth": 1}}
        if horizontal:
            ax.barh(where, values, height=width, xerr=error, **kwargs)
        else:
            ax.bar(where, values, width=width, yerr=error, **kwargs)
        for at, value, end in zip(where, values, ends):  # beyond the error bar, where the text stays legible
            if not np.isnan(value):
                ax.annotate(fmt.format(value), (end, at) if horizontal else (at, end), fontsize=8,
                            xytext=(3, 0) if horizontal else (0, 2), textcoords="offset points",
                            ha="left" if horizontal else "center", va="center" if horizontal else "bottom")
    # every category keeps its slot, also one whose values are all NaN (the baseline among differences)
    if horizontal:
        ax.set_yticks(positions, categories)
        ax.set_ylim(len(categories) - 0.5, -0.5)  # the first category on top, as it reads in the table
    else:
        ax.set_xticks(positions, categories, rotation=30 if max(map(len, categories), default=0) > 8 else 0,
                      ha="right" if max(map(len, categories), default=0) > 8 else "center")
        ax.set_xlim(-0.5, len(categories) - 0.5)


def scores_figure(frame, confidence: float = 0.95):
    """EM and F1 per method, one column of panels per dataset, each mean with its bootstrap interval;
    with comparison columns, a second row draws each method's paired difference from the baseline
    with its interval. Every panel has its own y-axis, with 0 in it: a dataset whose scores are all
    below 0.2 fills its panel instead of lying flat under a 0-1 axis shared with an easier one."""
    import matplotlib.pyplot as plt

    theme()
    datasets = list(dict.fromkeys(frame["dataset"]))
    methods = max((frame[frame["dataset"] == d]["method"].nunique() for d in datasets), default=1)
    compared = "baseline" in frame and frame["baseline"].notna().any()
    rows = 2 if compared else 1
    figure, axes = plt.subplots(rows, len(datasets), squeeze=False, sharey=False,
                                figsize=(max(4.3, 0.75 * methods + 1.5) * len(datasets), 3.8 * rows))
    label = frame["baseline"].dropna().iloc[0] if compared else None
    for j, dataset in enumerate(datasets):
        part = frame[frame["dataset"] == dataset]
        series = [(metric.upper(), part[metric], part.get(f"{metric}_lo"), part.get(f"{metric}_hi"))
                  for metric in ("em", "f1")]
        ax = axes[0][j]
        interval_bars(ax, list(part["method"]), series)
        ax.set_title(f"dataset: {dataset}")
        ax.set_xlabel("method")
        include_zero(ax, series)
        if compared:
            ax = axes[1][j]
            series = [(f"Δ{metric.upper()}", part[f"d_{metric}"], part[f"d_{metric}_lo"], part[f"d_{metric}_hi"])
                      for metric in ("em", "f1")]
            interval_bars(ax, list(part["method"]), series, fmt="{:+.2f}")
            ax.axhline(0, color="black", linewidth=0.8)
            for at, method in enumerate(part["method"]):
                if method == label:  # its own slot stays empty: say why
                    ax.annotate("baseline", (at, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                                va="bottom", fontsize=8, color="grey")
            ax.set_title(f"{dataset}: difference from {label}")
            ax.set_xlabel("method")
            include_zero(ax, series)
    axes[0][0].set_ylabel(f"score (mean over questions)\nbars: {confidence:.0%} bootstrap interval")
    outside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}  # beside the panels, over no bar or number
    axes[0][-1].legend(title="metric", **outside)
    if compared:
        axes[1][0].set_ylabel(f"Δ score vs {label}, same questions\nbars: {confidence:.0%} paired bootstrap interval")
        axes[1][-1].legend(title="difference", **outside)
    figure.tight_layout()
    return figure


def include_zero(ax, series) -> None:
    """The panel's y-range: every value and interval end, 0 included, with room above (and below, for
    negative values) for the numbers written beyond the error bars."""
    import numpy as np

    ends = [0.0]
    for _, values, lo, hi in series:
        ends += [float(v) for v in np.asarray(values, dtype=float) if not np.isnan(v)]
        for bound in (lo, hi):
            if bound is not None:
                ends += [float(v) for v in np.asarray(bound, dtype=float) if not np.isnan(v)]
    low, high = min(ends), max(ends)  # low <= 0 <= high
    pad = 0.15 * ((high - low) or 0.1)
    ax.set_ylim(low - pad if low < 0 else 0.0, high + pad)


def plot_scores(frame, path: Path, confidence: float = 0.95, svg: Path | None = None) -> None:
    """The scores figure as `path` and, with `svg`, also as SVG (text kept as text), which the HTML
    report's front page draws inline: a page of reStructuredText cannot embed a PNG."""
    figure = scores_figure(frame, confidence)
    if svg is not None:
        save(figure, svg, close=False)
    save(figure, path)


SVG_STYLE = {"svg.fonttype": "none", "svg.hashsalt": "adaptive-rag"}  # text as text; ids the same every time


def save(figure, path: Path, close: bool = True) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    suffix = Path(path).suffix
    metadata = {".png": {"Software": None}, ".svg": {"Date": None, "Creator": None}}.get(suffix)
    with atomic_write(path, "wb") as handle, matplotlib.rc_context(SVG_STYLE if suffix == ".svg" else {}):
        figure.savefig(handle, format=suffix.lstrip(".") or "png", dpi=130, bbox_inches="tight", metadata=metadata)
    if close:
        plt.close(figure)


def retrievals_figure(long):
    """How many questions retrieved 0, 1, 2, ... times, per method in the tables' order (one panel per
    dataset, each with its own y-axis: datasets may have different numbers of questions)."""
    sns = theme()
    grid = sns.catplot(data=long, kind="bar", x="retrievals", y="questions", hue="method", col="dataset",
                       hue_order=list(dict.fromkeys(long["method"])), col_order=list(dict.fromkeys(long["dataset"])),
                       sharey=False, height=3.6, aspect=1.4)
    grid.set_axis_labels("retrievals per question", "questions")
    grid.set_titles("dataset: {col_name}")
    return grid.figure


def plot_retrievals(long, path: Path) -> None:
    save(retrievals_figure(long), path)
