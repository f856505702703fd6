"""Seaborn figures for the report step."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write


def plot_scores(frame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    long = frame.melt(id_vars=["dataset", "method"], value_vars=["em", "f1"], var_name="metric", value_name="score")
    long["metric"] = long["metric"].str.upper()
    sns.set_theme(style="whitegrid")
    grid = sns.catplot(data=long, kind="bar", x="method", y="score", hue="metric", col="dataset",
                       height=3.6, aspect=1.2, sharey=True)
    grid.set_axis_labels("method", "score (mean over questions)")
    grid.set_titles("dataset: {col_name}")
    grid.set(ylim=(0, 1))
    for ax in grid.axes.flat:
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=8)
    save(grid.figure, path)


def save(figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format=Path(path).suffix.lstrip(".") or "png", dpi=130, bbox_inches="tight",
                       metadata={"Software": None} if Path(path).suffix == ".png" else None)
    plt.close(figure)


def plot_retrievals(long, path: Path) -> None:
    """How many questions retrieved 0, 1, 2, ... times, per method (one panel per dataset)."""
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    grid = sns.catplot(data=long, kind="bar", x="retrievals", y="questions", hue="method", col="dataset",
                       hue_order=list(dict.fromkeys(long["method"])), height=3.6, aspect=1.4)
    grid.set_axis_labels("retrievals per question", "questions")
    grid.set_titles("dataset: {col_name}")
    save(grid.figure, path)
