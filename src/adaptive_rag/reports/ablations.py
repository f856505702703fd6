"""An ablation's table (markdown, LaTeX, CSV: one row per dataset x variant, varied settings as
columns; `time_rel` too when it has a time baseline) and its figure: `grid` (SCAAR Table 3 /
Figure 2: F1 heatmaps of weighting x query per threshold, and how often each weighting and each
query wins), `lines` (a metric against one varied setting, e.g. F1 and S_eff vs threshold, F1 vs
alpha), or `table` (F1 and N_R per variant as bars)."""

from __future__ import annotations

from pathlib import Path

from .figures import save
from .tables import load_scores, s_eff, s_eff_metric, time_rel

METRICS = ("em", "f1", "acc", "N_R", "S_eff", "Rc", "Gc", "Hc", "Tc", "Sc")


def ablation_frame(ablation, score_paths: list[Path], params):
    import pandas as pd

    scores = {(d["dataset"], d["method"]): d for d in load_scores(score_paths)}
    metrics = list(METRICS)
    if ablation.time_baseline:
        metrics.insert(metrics.index("S_eff") + 1, "time_rel")
    if any("Ks" in d["summary"] for d in scores.values()):  # some variant samples: show how much
        metrics.insert(metrics.index("Gc") + 1, "Ks")
    rows = []
    for dataset in ablation.datasets:
        base = scores.get((dataset, ablation.baseline)) if ablation.baseline else None
        timing = _score(scores, dataset, ablation.time_baseline) if ablation.time_baseline else None
        metric = s_eff_metric(params.dataset(dataset).format)
        for variant in ablation.variants:
            data = _score(scores, dataset, variant.method)
            row = {"dataset": dataset, **{k: str(v) for k, v in variant.values.items()}}
            row.update({m: data["summary"].get(m) for m in metrics if m not in ("S_eff", "time_rel")})
            row["S_eff"] = s_eff(data, base, metric) if base is not None else None
            if timing is not None:
                row["time_rel"] = time_rel(data, timing)
            row["run"] = variant.method  # the generated configuration (data/runs/<dataset>/<run>)
            rows.append(row)
    return pd.DataFrame(rows)[["dataset", *ablation.vary, *metrics, "run"]]


def _score(scores: dict, dataset: str, method: str) -> dict:
    data = scores.get((dataset, method))
    if data is None:
        raise FileNotFoundError(f"no score file for {dataset}/{method} among the inputs")
    return data


def write_ablation(ablation, frame, prefix: Path) -> list[Path]:
    from .tables import write_tables

    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [prefix.with_suffix(s) for s in (".md", ".csv", ".tex", ".png")]
    write_tables(frame, paths[0], paths[1], paths[2])
    {"grid": plot_grid, "lines": plot_lines, "table": plot_bars}[ablation.plot](ablation, frame, paths[3])
    return paths


def _theme():
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    return sns


def _label(frame, keys):
    return frame[list(keys)].astype(str).agg(", ".join, axis=1) if keys else frame["run"]


def plot_lines(ablation, frame, path: Path) -> None:
    import matplotlib.pyplot as plt

    sns = _theme()
    others = [k for k in ablation.vary if k != ablation.x]
    data = frame.assign(setting=_label(frame, others), x=frame[ablation.x].astype(float)
                        if _numeric(frame[ablation.x]) else frame[ablation.x])
    metrics = [m for m in ("f1", "S_eff") if data[m].notna().any()]
    figure, axes = plt.subplots(len(ablation.datasets), len(metrics), squeeze=False,
                                figsize=(5.2 * len(metrics), 3.8 * len(ablation.datasets)))
    for i, dataset in enumerate(ablation.datasets):
        for j, metric in enumerate(metrics):
            ax = axes[i][j]
            part = data[data["dataset"] == dataset].dropna(subset=[metric])
            sns.lineplot(data=part, x="x", y=metric, hue="setting", marker="o", ax=ax)
            ax.set_xlabel(ablation.x)
            ax.set_ylabel({"f1": "F1", "S_eff": "S_eff ×100 = 100 (score - wo-RAG score) / N_R"}.get(metric, metric))
            ax.set_title(f"{ablation.name} on {dataset}")
            ax.legend(title=", ".join(others) or "setting", fontsize=8)
    figure.tight_layout()
    save(figure, path)


def plot_bars(ablation, frame, path: Path) -> None:
    import matplotlib.pyplot as plt

    sns = _theme()
    data = frame.assign(setting=_label(frame, list(ablation.vary)))
    figure, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(ablation.variants) + 2.5))
    for ax, metric, label in ((axes[0], "f1", "F1"), (axes[1], "N_R", "N_R (mean retrievals per question)")):
        sns.barplot(data=data, y="setting", x=metric, hue="dataset", ax=ax)
        ax.set_xlabel(label)
        ax.set_ylabel(", ".join(ablation.vary))
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=8)
    figure.suptitle(ablation.name)
    save(figure, path)


def plot_grid(ablation, frame, path: Path) -> None:
    """Heatmaps of F1 (weighting x query) per threshold, and win counts: for every (query, threshold)
    which weighting scores best, and for every (weighting, threshold) which query does."""
    import matplotlib.pyplot as plt

    sns = _theme()
    thetas = list(ablation.vary.get("theta", [None]))
    rows = len(ablation.datasets)
    figure, axes = plt.subplots(rows, len(thetas) + 2, squeeze=False, figsize=(4.2 * (len(thetas) + 2), 3.8 * rows))
    for i, dataset in enumerate(ablation.datasets):
        part = frame[frame["dataset"] == dataset]
        for j, theta in enumerate(thetas):
            cell = part if theta is None else part[part["theta"] == str(theta)]
            table = cell.pivot_table(index="weighting", columns="query", values="f1", aggfunc="mean")
            table = table.reindex(index=[str(v) for v in ablation.vary["weighting"]],
                                  columns=[str(v) for v in ablation.vary["query"]])
            sns.heatmap(table, annot=True, fmt=".3f", cmap="viridis", cbar=False, ax=axes[i][j])
            axes[i][j].set_title(f"{dataset}: F1, theta = {theta}")
        for j, (winner, over) in enumerate((("weighting", "query"), ("query", "weighting"))):
            ax = axes[i][len(thetas) + j]
            group = [over] + (["theta"] if "theta" in part else [])
            best = part.groupby(group)["f1"].transform("max")
            wins = part.loc[part["f1"] == best, winner].value_counts()  # a tie is a win for each tied cell
            wins = wins.reindex([str(v) for v in ablation.vary[winner]], fill_value=0)
            sns.barplot(x=wins.index, y=wins.values, ax=ax)
            ax.set_xlabel(winner)
            ax.set_ylabel(f"wins (best F1 per {' x '.join(group)})")
            ax.set_title(f"{dataset}: {winner} wins (ties: each)")
    figure.tight_layout()
    save(figure, path)


def _numeric(series) -> bool:
    try:
        series.astype(float)
        return True
    except ValueError:
        return False
