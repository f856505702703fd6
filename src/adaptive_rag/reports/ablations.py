"""An ablation's tables (CSV: one row per dataset x variant, varied settings and every number as
columns, `time_rel` too when it has a time baseline, `retrieval_rate` beside the scores; markdown, HTML and LaTeX: the same rows as an
answer-quality and a cost table with their glossaries, `reports.quality_cost`) and its figure: `grid` (SCAAR Table 3 /
Figure 2: F1 heatmaps of weighting x query per threshold, and how often each weighting and each
query wins), `lines` (a metric against one varied setting, e.g. F1 and S_eff vs threshold, F1 vs
alpha), or `table` (F1 and N_R per variant as bars).

Like the main table, every EM, F1 and acc has its bootstrap interval and, when the ablation has a run
to compare with (`Ablation.compare_to`), a paired test against it; the figures draw the intervals.
A `grid` counts a win only for a cell significantly better than every other in its group
(`evaluation.intervals.best_of`), and shows the statistical ties for best separately.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..evaluation.intervals import ReportConfig, best_of, paired_values
from .compare import COMPARISON_COLUMNS, INTERVAL_COLUMNS, comparison_columns, interval_columns
from .figures import interval_bars, save, theme
from .quality_cost import GLOSSARY, ROW_NOTE, quality_and_cost
from .tables import load_scores, s_eff, s_eff_metric, time_rel, write_csv, write_tables

METRICS = ("em", "f1", "acc", "N_R", "S_eff", "Rc", "Gc", "Hc", "Tc", "Sc")
DERIVED = ("S_eff", "time_rel", "retrieval_rate")  # computed here, not read from the score summary
GRID_KEYS = ("weighting", "query")  # a grid's win counts: which weighting, which query is best
OUTCOMES = {"win": "significant win", "tie": "tie for best"}


def ablation_frame(ablation, score_paths: list[Path], params):
    import pandas as pd

    settings = params.report
    scores = {(d["dataset"], d["method"]): d for d in load_scores(score_paths)}
    metrics = list(METRICS)
    if ablation.time_baseline:
        metrics.insert(metrics.index("S_eff") + 1, "time_rel")
    if any("Ks" in d["summary"] for d in scores.values()):  # some variant samples: show how much
        metrics.insert(metrics.index("Gc") + 1, "Ks")
    if any("retrievals_histogram" in d["summary"] for d in scores.values()):
        metrics.insert(metrics.index("N_R") + 1, "retrieval_rate")
    label = compare_label(ablation)
    rows = []
    for dataset in ablation.datasets:
        base = scores.get((dataset, ablation.baseline)) if ablation.baseline else None
        timing = _score(scores, dataset, ablation.time_baseline) if ablation.time_baseline else None
        compared = _score(scores, dataset, ablation.compare_to) if ablation.compare_to else None
        metric = s_eff_metric(params.dataset(dataset).format)
        for variant in ablation.variants:
            data = _score(scores, dataset, variant.method)
            row = {"dataset": dataset, **{k: str(v) for k, v in variant.values.items()}}
            # the method a row ran, with what its type says every such row must show (e.g. SUGAR's judge)
            named = params.method_label(variant.method, dataset, variant.base)
            if "method" in variant.values or named != variant.base:
                row["method"] = named
            row.update({m: data["summary"].get(m) for m in metrics if m not in DERIVED})
            if "retrieval_rate" in metrics:
                row["retrieval_rate"] = retrieval_rate(data["summary"])
            row["S_eff"] = s_eff(data, base, metric) if base is not None else None
            if timing is not None:
                row["time_rel"] = time_rel(data, timing)
            row.update(interval_columns(data, settings))
            if compared is not None:
                row.update(comparison_columns(data, compared, label, settings))
            row["run"] = variant.method  # the generated configuration (data/runs/<dataset>/<run>)
            rows.append(row)
    frame = pd.DataFrame(rows)
    grid = []
    if ablation.plot == "grid":
        for key in GRID_KEYS:
            frame[f"{key}_best"] = grid_outcomes(frame, scores, ablation, key, settings)
            grid.append(f"{key}_best")
    comparison = COMPARISON_COLUMNS if ablation.compare_to else []
    return frame[["dataset", *row_keys(ablation, frame), *metrics, *grid, *INTERVAL_COLUMNS, *comparison, "run"]]


def row_keys(ablation, frame) -> list[str]:
    """The columns that name a row besides its dataset: the varied settings, after the method when a
    row must say something of it that the varied values do not (`Params.method_label`)."""
    labelled = ["method"] if "method" in frame and "method" not in ablation.vary else []
    return [*labelled, *ablation.vary]


def retrieval_rate(summary: dict) -> float | None:
    """The share of questions that retrieved at least once (the score file's retrievals histogram):
    what a "when to retrieve" row decides, which N_R (retrievals per question) mixes with how often."""
    histogram = summary.get("retrievals_histogram")
    if not histogram:
        return None
    total = sum(histogram.values())
    return round(1.0 - histogram.get("0", 0) / total, 4) if total else None


def compare_label(ablation) -> str | None:
    """How the tables name the run compared with: the baseline configuration, or the variant's values."""
    for variant in ablation.variants:
        if variant.method == ablation.compare_to:
            return ", ".join(str(v) for v in variant.values.values())
    return ablation.compare_to


def grid_outcomes(frame, scores: dict, ablation, key: str, settings) -> list[str]:
    """Per row: "win" / "tie" / "" for its `key` value among the rows that differ from it in `key`
    only (same dataset and other settings), by the paired test on F1 (`best_of`)."""
    others = ["dataset", *(k for k in ablation.vary if k != key)]
    outcome = [""] * len(frame)
    for _, group in frame.groupby(others, sort=False):
        first = scores[(group["dataset"].iloc[0], group["run"].iloc[0])]
        candidates = {}
        for index, run in zip(group.index, group["run"]):
            candidates[index] = paired_values(scores[(group["dataset"].iloc[0], run)], first, "f1")[0]
        for index, result in best_of(candidates, settings.confidence, settings.resamples, settings.seed).items():
            outcome[frame.index.get_loc(index)] = result
    return outcome


def win_counts(frame, key: str, values: list[str]):
    """Rows: each value of `key`; columns: how many groups it won outright, and how many it tied for best."""
    import pandas as pd

    column = frame[f"{key}_best"]
    return pd.DataFrame({label: frame.loc[column == outcome, key].value_counts().reindex(values, fill_value=0)
                         for outcome, label in OUTCOMES.items()})


def _score(scores: dict, dataset: str, method: str) -> dict:
    data = scores.get((dataset, method))
    if data is None:
        raise InputError(f"no score file for {dataset}/{method} among the inputs")
    return data


def ablation_tables(ablation, frame, settings) -> list:
    """The ablation's quality and cost tables, rows named by dataset and the varied settings."""
    defined = {key: f"the row's `{key}` (varied by `ablations.{ablation.name}.vary`)" for key in ablation.vary}
    if "method" in frame:
        defined["method"] = f"{defined.get('method', 'the method configuration')}; {ROW_NOTE}"
    if ablation.time_baseline:
        row = next((v.base for v in ablation.variants if v.method == ablation.time_baseline), None)
        where = f"{row} (a row of this table: its own reads 1)" if row else ablation.time_baseline
        defined["time_rel"] = f"{GLOSSARY['time_rel']}; time baseline: {where}"
    return quality_and_cost(frame, ["dataset", *row_keys(ablation, frame)], settings, defined,
                            titles=(f"{ablation.name}: answer quality", f"{ablation.name}: cost"))


def write_ablation(ablation, frame, prefix: Path, settings=None) -> list[Path]:
    """PREFIX.md, .csv, .tex, .png and .html: the CSV has every column (the generated configuration
    of each row as `run`), the markdown, LaTeX and HTML the quality and cost tables; `settings`
    (params.report, its defaults when None) are those the frame's intervals were computed with."""
    settings = settings or ReportConfig()
    prefix.parent.mkdir(parents=True, exist_ok=True)
    md, html, tex = write_tables(ablation_tables(ablation, frame, settings), prefix, ablation.name)
    csv, png = Path(f"{prefix}.csv"), Path(f"{prefix}.png")
    write_csv(frame, csv)
    {"grid": plot_grid, "lines": plot_lines, "table": plot_bars}[ablation.plot](ablation, frame, png, settings)
    return [md, csv, tex, png, html]


def _label(frame, keys):
    return frame[list(keys)].astype(str).agg(", ".join, axis=1) if keys else frame["run"]


def _ci_label(metric: str, settings) -> str:
    return f"{metric} (bars: {settings.confidence:.0%} bootstrap interval)"


def plot_lines(ablation, frame, path: Path, settings) -> None:
    """One line per setting of the other varied keys; F1 with its intervals as error bars (dodged a
    little sideways so that equal points stay readable), S_eff (no interval) beside it."""
    import matplotlib.pyplot as plt
    import numpy as np

    sns = theme()
    others = [k for k in ablation.vary if k != ablation.x]
    numeric = _numeric(frame[ablation.x])
    order = [str(v) for v in ablation.vary[ablation.x]]
    data = frame.assign(setting=_label(frame, others),
                        x=frame[ablation.x].astype(float) if numeric else frame[ablation.x].map(order.index))
    metrics = [m for m in ("f1", "S_eff") if data[m].notna().any()]
    settings_order = list(dict.fromkeys(data["setting"]))
    palette = dict(zip(settings_order, sns.color_palette(n_colors=len(settings_order))))
    span = (data["x"].max() - data["x"].min()) or 1.0
    figure, axes = plt.subplots(len(ablation.datasets), len(metrics), squeeze=False,
                                figsize=(5.2 * len(metrics), 3.8 * len(ablation.datasets)))
    for i, dataset in enumerate(ablation.datasets):
        for j, metric in enumerate(metrics):
            ax = axes[i][j]
            part = data[data["dataset"] == dataset].dropna(subset=[metric])
            for k, setting in enumerate(settings_order):
                line = part[part["setting"] == setting].sort_values("x")
                if line.empty:
                    continue
                x = line["x"].to_numpy(float) + (k - (len(settings_order) - 1) / 2) * 0.012 * span
                y = line[metric].to_numpy(float)
                error = None
                if f"{metric}_lo" in line:
                    lo, hi = line[f"{metric}_lo"].to_numpy(float), line[f"{metric}_hi"].to_numpy(float)
                    error = np.vstack([y - lo, hi - y])
                ax.errorbar(x, y, yerr=error, marker="o", capsize=3, color=palette[setting], label=setting)
            if not numeric:
                ax.set_xticks(range(len(order)), order)
            ax.set_xlabel(ablation.x)
            ylabel = {"f1": _ci_label("F1", settings),
                      "S_eff": "S_eff ×100 = 100 (score - wo-RAG score) / N_R"}.get(metric, metric)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ablation.name} on {dataset}")
            ax.legend(title=", ".join(others) or "setting", fontsize=8)
    figure.tight_layout()
    save(figure, path)


def plot_bars(ablation, frame, path: Path, settings) -> None:
    """F1 per variant with its interval, and N_R (a count, no interval), one bar per dataset."""
    import matplotlib.pyplot as plt

    theme()
    data = frame.assign(setting=_label(frame, list(ablation.vary)))
    labels = list(dict.fromkeys(data["setting"]))
    figure, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(ablation.variants) * max(1, len(ablation.datasets) / 2)
                                               + 2.5))
    for ax, metric, title in ((axes[0], "f1", _ci_label("F1", settings)),
                              (axes[1], "N_R", "N_R (mean retrievals per question)")):
        series = []
        for dataset in ablation.datasets:
            part = data[data["dataset"] == dataset].set_index("setting").reindex(labels)
            bounds = (part[f"{metric}_lo"], part[f"{metric}_hi"]) if f"{metric}_lo" in part else (None, None)
            series.append((dataset, part[metric].astype(float), *bounds))
        interval_bars(ax, labels, series, horizontal=True)
        ax.margins(x=0.18)  # room for the value written beyond each error bar
        ax.set_xlabel(title)
        ax.set_ylabel(", ".join(ablation.vary))
        if len(ablation.datasets) > 1:  # one dataset is named in the title: no legend over the bars
            ax.legend(title="dataset", fontsize=8, loc="best")
    single = f" ({ablation.datasets[0]})" if len(ablation.datasets) == 1 else ""
    figure.suptitle(ablation.name + single)
    figure.tight_layout()
    save(figure, path)


def plot_grid(ablation, frame, path: Path, settings) -> None:
    """Heatmaps of F1 with its interval (weighting x query) per threshold, and per weighting (query) how
    many (query, threshold) groups it wins outright, by the paired test, and how many it ties for best."""
    import matplotlib.pyplot as plt

    sns = theme()
    thetas = list(ablation.vary.get("theta", [None]))
    rows = len(ablation.datasets)
    alpha = 1 - settings.confidence
    figure, axes = plt.subplots(rows, len(thetas) + 2, squeeze=False, figsize=(4.4 * (len(thetas) + 2), 4.2 * rows))
    for i, dataset in enumerate(ablation.datasets):
        part = frame[frame["dataset"] == dataset]
        for j, theta in enumerate(thetas):
            cell = part if theta is None else part[part["theta"] == str(theta)]
            index, columns = [str(v) for v in ablation.vary["weighting"]], [str(v) for v in ablation.vary["query"]]
            table = cell.pivot_table(index="weighting", columns="query", values="f1", aggfunc="mean")
            table = table.reindex(index=index, columns=columns)
            text = cell.assign(text=[f"{v:.3f}\n[{lo:.2f}, {hi:.2f}]" for v, lo, hi in
                                     zip(cell["f1"], cell["f1_lo"], cell["f1_hi"])])
            text = text.pivot_table(index="weighting", columns="query", values="text", aggfunc="first")
            text = text.reindex(index=index, columns=columns).fillna("")
            sns.heatmap(table, annot=text.to_numpy(), fmt="", annot_kws={"fontsize": 8}, cmap="viridis", cbar=False,
                        ax=axes[i][j])
            axes[i][j].set_title(f"{dataset}: F1 [{settings.confidence:.0%} interval], theta = {theta}", fontsize=9)
        for j, key in enumerate(GRID_KEYS):
            ax = axes[i][len(thetas) + j]
            group = [k for k in ablation.vary if k != key]
            counts = win_counts(part, key, [str(v) for v in ablation.vary[key]])
            long = counts.rename_axis(key).reset_index().melt(id_vars=key, var_name="outcome", value_name="groups")
            sns.barplot(data=long, x=key, y="groups", hue="outcome", hue_order=list(OUTCOMES.values()),
                        errorbar=None, ax=ax)
            ax.set_xlabel(key)
            ax.set_ylabel(f"groups (one per {' x '.join(group)})")
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.set_title(f"{dataset}: best {key} by F1\nwin: above every other, paired p < {alpha:.2g}; "
                         f"tie: best or not\nsignificantly below the best", fontsize=9)
            ax.legend(fontsize=8)
    figure.tight_layout()
    save(figure, path)


def _numeric(series) -> bool:
    try:
        series.astype(float)
        return True
    except ValueError:
        return False
