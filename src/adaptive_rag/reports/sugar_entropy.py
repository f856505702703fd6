"""SUGAR's Figure 2, the "case study" of the entropy levels a model shows on each dataset, which the
paper used to place its thresholds: per dataset, the distribution of per-question semantic entropy
(SE) and predictive entropy (PE) with the run's thresholds marked on the signal they route.

Read from the runs' `trace.jsonl` (the first step of each question, `phase: sugar`, holds se, pe,
the routing value, the thresholds and the branch), so the figure shows exactly what the runs decided
on; the dataset and configuration come from the `provenance.json` beside each trace.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import atomic_write, read_json, read_jsonl
from .figures import save
from .layout import shown
from .tables import write_tables

COLUMNS = ["dataset", "method", "id", "se", "pe", "signal", "value", "branch", "t1", "t2", "threshold_rule"]
BRANCHES = ("none", "single", "multi")
SUMMARY_GLOSSARY = [
    ("dataset, method", "the run: its dataset and SUGAR configuration"),
    ("questions", "questions of the run"),
    ("SE mean, SE median", "semantic entropy (nats) of each question's sampled no-retrieval answers, over the "
                           "run's questions"),
    ("PE mean, PE median", "predictive entropy (nats) of the same samples"),
    ("signal", "the entropy the run routes on (`signal`)"),
    ("t1, t2", "its thresholds: signal <= t1 answers without retrieval, <= t2 retrieves once, above t2 runs "
               "multi-step retrieval; – for t2: no multi-step"),
    ("thresholds", "how they were set: given (numbers in params.yaml), calibrated (best Acc on a calibration "
                   "split) or mean (the signal's mean on it)"),
    ("none, single, multi", "questions routed to each branch"),
]


def entropy_levels(traces: list[Path]):
    """One row per question of every run: its SE, PE, routing value, branch and thresholds."""
    import pandas as pd

    rows = []
    for trace in traces:
        run = read_json(trace.parent / "provenance.json", "provenance file (beside the trace)")
        for index, record in enumerate(read_jsonl(trace, "trace file")):
            step = next((s for s in record.get("steps", []) if s.get("phase") == "sugar"), None)
            if step is None:
                raise InputError(f"{trace}: line {index + 1}: no `phase: sugar` step; not a SUGAR run's trace")
            t1, t2 = step["thresholds"]
            rows.append({"dataset": run["dataset"], "method": run["method"], "id": record["id"], "se": step["se"],
                         "pe": step["pe"], "signal": step["signal"], "value": step["value"], "branch": step["branch"],
                         "t1": t1, "t2": t2, "threshold_rule": step.get("threshold_rule", "given")})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(frame):
    """Per run: how many questions, the signals' mean and median, the thresholds, and where they went."""
    import pandas as pd

    rows = []
    for (dataset, method), part in frame.groupby(["dataset", "method"], sort=False):
        first = part.iloc[0]
        rows.append({"dataset": dataset, "method": method, "questions": len(part),
                     "SE mean": part["se"].mean(), "SE median": part["se"].median(),
                     "PE mean": part["pe"].mean(), "PE median": part["pe"].median(), "signal": first["signal"],
                     "t1": first["t1"], "t2": first["t2"], "thresholds": first["threshold_rule"],
                     **{branch: int((part["branch"] == branch).sum()) for branch in BRANCHES}})
    return pd.DataFrame(rows)


def write_entropy_levels(frame, prefix: Path, name: str) -> list[Path]:
    if frame.empty:
        raise InputError(f"{name}: the traces hold no question")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    png, csv = Path(f"{prefix}.png"), Path(f"{prefix}.csv")
    with atomic_write(csv) as handle:
        frame.to_csv(handle, index=False, float_format="%.6f", lineterminator="\n")
    # the markdown and HTML summarise per run; the CSV has every question
    md, html = write_tables([shown(f"{name}: entropy levels per run", summary(frame), SUMMARY_GLOSSARY)], prefix,
                            name, latex=False)
    plot(frame, png, name)
    return [png, csv, md, html]


def plot(frame, path: Path, name: str) -> None:
    """One panel per dataset: SE and PE of every question (violin and points), t1 solid, t2 dashed, each
    marked on the signal the run routes on (t2 infinite: no line, no multi-step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    datasets = list(dict.fromkeys(frame["dataset"]))
    figure, axes = plt.subplots(len(datasets), 1, squeeze=False, figsize=(7.5, 2.6 * len(datasets) + 0.6))
    for ax, dataset in zip(axes[:, 0], datasets):
        part = frame[frame["dataset"] == dataset]
        long = part.melt(id_vars=["id"], value_vars=["se", "pe"], var_name="entropy", value_name="nats").dropna()
        long["entropy"] = long["entropy"].str.upper()
        sns.violinplot(data=long, x="nats", y="entropy", hue="entropy", inner=None, cut=0, legend=False,
                       density_norm="width", ax=ax, palette="pastel")
        sns.stripplot(data=long, x="nats", y="entropy", hue="entropy", legend=False, size=4, jitter=0.15, ax=ax)
        for _, run in part.drop_duplicates("method").iterrows():
            for key, style in (("t1", "-"), ("t2", "--")):
                if run[key] is not None and run[key] == run[key]:  # null / NaN: infinite t2, no line
                    ax.axvline(run[key], color="black", linestyle=style, linewidth=1,
                               label=f"{key} = {run[key]:.3f} (on {run['signal'].upper()}, {run['method']})")
        ax.set(xlabel="entropy (nats) of the sampled no-retrieval answers", ylabel="",
               title=f"{dataset}: {len(part)} questions")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    figure.suptitle(f"{name}: SUGAR entropy levels per dataset (Figure 2)")
    figure.tight_layout()
    save(figure, path)
