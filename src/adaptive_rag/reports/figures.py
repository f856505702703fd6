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
    if horizontal:
        ax.set_yticks(positions, categories)
        ax.invert_yaxis()  # the first category on top, as it reads in the table
    else:
        ax.set_xticks(positions, categories, rotation=30 if max(map(len, categories), default=0) > 8 else 0,
                      ha="right" if max(map(len, categories), default=0) > 8 else "center")


def plot_scores(frame, path: Path, confidence: float = 0.95) -> None:
    """EM and F1 per method, one panel per dataset, with each mean's bootstrap interval."""
    import matplotlib.pyplot as plt

    theme()
    datasets = list(dict.fromkeys(frame["dataset"]))
    methods = max((frame[frame["dataset"] == d]["method"].nunique() for d in datasets), default=1)
    figure, axes = plt.subplots(1, len(datasets), squeeze=False, sharey=True,
                                figsize=(max(4.3, 0.75 * methods + 1.5) * len(datasets), 3.8))
    for ax, dataset in zip(axes[0], datasets):
        part = frame[frame["dataset"] == dataset]
        series = [(metric.upper(), part[metric], part.get(f"{metric}_lo"), part.get(f"{metric}_hi"))
                  for metric in ("em", "f1")]
        interval_bars(ax, list(part["method"]), series)
        ax.set_title(f"dataset: {dataset}")
        ax.set_xlabel("method")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel(f"score (mean over questions)\nbars: {confidence:.0%} bootstrap interval")
    axes[0][-1].legend(title="metric")
    figure.tight_layout()
    save(figure, path)


def save(figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format=Path(path).suffix.lstrip(".") or "png", dpi=130, bbox_inches="tight",
                       metadata={"Software": None} if Path(path).suffix == ".png" else None)
    plt.close(figure)


def plot_retrievals(long, path: Path) -> None:
    """How many questions retrieved 0, 1, 2, ... times, per method (one panel per dataset)."""
    sns = theme()
    grid = sns.catplot(data=long, kind="bar", x="retrievals", y="questions", hue="method", col="dataset",
                       hue_order=list(dict.fromkeys(long["method"])), height=3.6, aspect=1.4)
    grid.set_axis_labels("retrievals per question", "questions")
    grid.set_titles("dataset: {col_name}")
    save(grid.figure, path)
