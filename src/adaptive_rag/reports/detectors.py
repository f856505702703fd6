"""DioR's detector figures (paper Figs. 4-9, App. C) and its detector table (App. C.6), from the files
the detector steps write: the early detector's data JSONL, and each trained detector's metrics JSON.

Figures, all from one early-detection pass over the training questions (hallucinated = label 1):
- Fig. 4: the normalised IG attribution a_j of each token of two questions, one the model answered
  wrongly and one it answered correctly. Which two: the question of median attribution entropy within
  each class (ties: the first), so the example is typical of its class rather than chosen to look
  like the paper's;
- Fig. 5: ECDF of the output entropy of the first generated token's distribution;
- Fig. 6: ECDF of Snyder's first-token activation entropy (MLP up-projection, min-max scaled over the set);
- Fig. 7: ECDF of the attribution entropy (Eq. 6);
- Fig. 8: ECDF of the first generated token's softmax probability;
- Fig. 9: the 2-D PCA of the first-token softmax vectors, one point per question.
Each ECDF figure's title gives the class sizes and the AUROC of the value for "hallucinated" (0.5: the
value does not separate the classes; below 0.5: lower values go with hallucinations). Each figure has
a CSV of exactly what it plots.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import atomic_write, read_json, read_jsonl
from .figures import save, theme

CLASSES = {1: "hallucinated", 0: "correct"}
ECDFS = {  # figure number -> (column, x label, what)
    5: ("output_entropy", "entropy of the first token's distribution (nats)", "output entropy"),
    6: ("activation_entropy", "activation entropy of the first token (min-max scaled)", "activation entropy"),
    7: ("attribution_entropy", "IG attribution entropy H(Q), Eq. 6 (nats)", "attribution entropy"),
    8: ("probability", "softmax probability of the first generated token", "first-token probability"),
}
FIGURES = (4, 5, 6, 7, 8, 9)
PAPER_RD_AUC = 0.7913  # App. C.6: the real-time detector's sentence-level AUC with Llama-2-7B-chat


def early_frame(data: Path):
    """One row per question of the early-detection data: id, question, class, the statistics, PCA."""
    import pandas as pd

    rows = []
    for number, record in enumerate(read_jsonl(data, "early detector data"), 1):
        try:
            rows.append({"id": record["id"], "dataset": record["dataset"], "question": record["question"],
                         "answer": record["answer"], "label": record["label"], "class": CLASSES[record["label"]],
                         "output_entropy": record["entropies"]["output"],
                         "activation_entropy": record["entropies"]["activation"],
                         "attribution_entropy": record["entropies"]["attribution"],
                         "probability": record["probability"], "pc1": record["pca"][0], "pc2": record["pca"][1],
                         "tokens": record["tokens"], "scores": record["scores"]})
        except (KeyError, IndexError, TypeError) as exc:
            raise InputError(f"{data}: line {number}: not an early detector data record ({exc!r} missing)") from None
    if not rows:
        raise InputError(f"{data}: no questions")
    return pd.DataFrame(rows)


def auroc(values, labels) -> float | None:
    """P(value of a hallucinated question > value of a correct one), ties half; None with one class."""
    import numpy as np
    from scipy.stats import rankdata

    values, labels = np.asarray(values, dtype=float), np.asarray(labels, dtype=bool)
    positives, negatives = labels.sum(), (~labels).sum()
    if not positives or not negatives:
        return None
    ranks = rankdata(values)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _title(frame, what: str, column: str) -> str:
    counts = ", ".join(f"{n} {name}" for name, n in frame["class"].value_counts().items())
    value = auroc(frame[column], frame["label"] == 1)
    return f"{what}: {counts}; AUROC for hallucinated {'n/a' if value is None else f'{value:.3f}'}"


def _csv(frame, path: Path) -> None:
    with atomic_write(path) as handle:
        frame.to_csv(handle, index=False, float_format="%.6f", lineterminator="\n")


def typical(frame, label: int):
    """The row of median attribution entropy among the questions of `label` (None if there is none)."""
    part = frame[frame["label"] == label].sort_values("attribution_entropy", kind="stable")
    return None if part.empty else part.iloc[(len(part) - 1) // 2]


def figure_4(frame, png: Path, csv: Path) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    theme()
    chosen = [(label, row) for label in (1, 0) if (row := typical(frame, label)) is not None]
    rows = [{"id": row["id"], "class": row["class"], "question": row["question"], "answer": row["answer"],
             "position": j, "token": token, "attribution": score}
            for _, row in chosen for j, (token, score) in enumerate(zip(row["tokens"], row["scores"]))]
    _csv(pd.DataFrame(rows, columns=["id", "class", "question", "answer", "position", "token", "attribution"]), csv)
    figure, axes = plt.subplots(len(chosen), 1, squeeze=False, figsize=(8, 2.8 * len(chosen) + 0.4))
    for ax, (label, row) in zip(axes[:, 0], chosen):
        ax.bar(range(len(row["tokens"])), row["scores"], color="tab:red" if label else "tab:blue")
        ax.set_xticks(range(len(row["tokens"])), [repr(t.replace(" ", "\u2423"))[1:-1] for t in row["tokens"]],
                      rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("normalised IG a_j")
        ax.set_title(f"{row['class']} ({row['id']}): {row['question']}\nanswer: {row['answer'][:80]!r}; "
                     f"H(Q) = {row['attribution_entropy']:.3f}", fontsize=9)
    figure.suptitle("DioR Fig. 4: IG attribution of the question tokens (median-entropy question of each class)")
    figure.tight_layout()
    save(figure, png)


def figure_ecdf(frame, number: int, png: Path, csv: Path) -> None:
    import matplotlib.pyplot as plt

    sns = theme()
    column, xlabel, what = ECDFS[number]
    _csv(frame[["id", "dataset", "class", column]], csv)
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, name in CLASSES.items():
        part = frame[frame["label"] == label]
        if not part.empty:
            sns.ecdfplot(part[column], ax=ax, label=f"{name} (n = {len(part)})", linewidth=2)
    ax.set(xlabel=xlabel, ylabel="cumulative fraction of questions")
    ax.set_title(f"DioR Fig. {number}: {_title(frame, what, column)}", fontsize=9)
    ax.legend()
    figure.tight_layout()
    save(figure, png)


def figure_9(frame, png: Path, csv: Path, explained: list[float] | None) -> None:
    import matplotlib.pyplot as plt

    sns = theme()
    _csv(frame[["id", "dataset", "class", "pc1", "pc2"]], csv)
    figure, ax = plt.subplots(figsize=(6.4, 4.8))
    sns.scatterplot(data=frame, x="pc1", y="pc2", hue="class", hue_order=[CLASSES[1], CLASSES[0]], s=18,
                    alpha=0.7, ax=ax)
    ratio = f" (explained variance {explained[0]:.1%}, {explained[1]:.1%})" if explained else ""
    ax.set(xlabel="PC1", ylabel="PC2")
    ax.set_title(f"DioR Fig. 9: PCA of the first token's softmax vector{ratio}", fontsize=9)
    figure.tight_layout()
    save(figure, png)


def write_detector_figures(data: Path, prefix: str, explained: list[float] | None = None) -> list[Path]:
    """Figs. 4-9 as `<prefix><n>.png` and `<prefix><n>.csv` (the workflow: reports/ablations/dior-fig);
    `explained`: the PCA's explained variance ratios (from the data's meta file), for Fig. 9's title."""
    frame = early_frame(data)
    written = []
    for number in FIGURES:
        png, csv = Path(f"{prefix}{number}.png"), Path(f"{prefix}{number}.csv")
        png.parent.mkdir(parents=True, exist_ok=True)
        if number == 4:
            figure_4(frame, png, csv)
        elif number == 9:
            figure_9(frame, png, csv, explained)
        else:
            figure_ecdf(frame, number, png, csv)
        written += [png, csv]
    return written


# ---- the detector table ----------------------------------------------------------------------------

def _metrics(path: Path, kind: str) -> dict:
    record = read_json(path, f"{kind} detector metrics (train it first)")
    if record.get("header", {}).get("kind") != kind or "metrics" not in record:
        raise InputError(f"{path}: not the metrics of a {kind} detector")
    return record


def detector_rows(early: Path | None, realtime: Path | None):
    """One row per trained detector: its held-out AUC, accuracy and ECE, sizes and label balance; RD
    also at the unit level (a continuation scored by its least faithful token: the paper's
    sentence-level AUC, 0.7913 with Llama-2-7B-chat)."""
    import pandas as pd

    rows = []
    for kind, path in (("early", early), ("realtime", realtime)):
        if path is None:
            continue
        record = _metrics(Path(path), kind)
        header, metrics = record["header"], record["metrics"]
        train, test = metrics["train"], metrics["test"]
        units = metrics.get("test_units")
        rows.append({
            "detector": "ED (early, GRU over IG)" if kind == "early" else "RD (real-time, MLP over hidden states)",
            "model": header["model"], "features": header["architecture"].get("features", "hidden state"),
            "positive class": header["positive"],
            "train examples": train["n"], "test examples": test["n"],
            "positive share": (train["positives"] + test["positives"]) / (train["n"] + test["n"]),
            "test AUC": test["auc"], "test accuracy": test["accuracy"], "test ECE": test["ece"],
            "test units": units["n"] if units else None, "unit AUC": units["auc"] if units else None,
            "unit accuracy": units["accuracy"] if units else None,
            "paper": "–" if kind == "early" else f"sentence-level AUC {PAPER_RD_AUC} (Llama-2-7B-chat)",
        })
    if not rows:
        raise InputError("detector-table: give the metrics of at least one detector (--early, --realtime)")
    return pd.DataFrame(rows)


def write_detector_table(frame, markdown: Path, csv: Path, html: Path | None = None) -> None:
    """The CSV, and the table as markdown and (for the HTML report, which shows HTML inline) HTML, 4
    decimals as the paper prints its AUC, a note under it."""
    from .layout import shown, write_shown

    _csv(frame, csv)
    note = ("Held-out split of each detector's own data (ED: questions; RD: whole continuations, token-level "
            "AUC, and unit-level AUC with a continuation scored by its least faithful token, labelled 0 if any "
            "token is: Alg. 2's H_i). ECE: 10 equal-width bins of p(positive class). The paper reports RD's "
            f"sentence-level AUC only ({PAPER_RD_AUC}, Llama-2-7B-chat, 1,304 test continuations); these numbers "
            "come from a different model and far less data.")
    counts = {c: 0 for c in ("train examples", "test examples", "test units")}
    table = shown("DioR's detectors on their held-out data", frame, note=note, decimals=counts, default=4)
    write_shown([table], "dior-detectors", markdown, html)
