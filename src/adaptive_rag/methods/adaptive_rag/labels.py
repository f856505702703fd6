"""The query-complexity labels Adaptive-RAG's classifier is trained on, made as the reference code makes
them (starsuzi/Adaptive-RAG):

- "silver" labels (classifier/preprocess/preprocess_utils.py, `label_complexity`): every question is
  answered by the three strategies, A no retrieval, B single-step retrieval, C multi-step retrieval
  (IRCoT); it takes the label of the cheapest strategy that answers it correctly. `label_complexity`
  assigns C, then B, then A over what answered, so the last (cheapest) one stays.
- "correct" is exact match after SQuAD normalisation against any gold answer (evaluate.py, `main`:
  `normalize_answer(gold_ans) == normalize_answer(pred)`), i.e. this project's EM.
- "binary" labels (preprocess_utils.py, `save_inductive_bias_single_data`, `save_inductive_bias_musique`
  and its HotpotQA and 2Wiki siblings): a question takes its dataset's kind, B for a single-hop dataset
  and C for a multi-hop one. The reference draws them from the datasets' training sets (400 per dataset,
  preprocess_binary_train.py) and concat_binary_silver_train.py keeps a question's silver label over its
  binary one; here the questions no strategy answers are those of the labelled splits themselves, so
  every labelled question has exactly one label, silver where there is one, binary otherwise.

The runs are the workflow's own (`data/runs/<dataset>/<method>/predictions.jsonl` of the configured
strategies on each labelled dataset), so a label says what this model, retriever and prompt do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ...errors import InputError
from ...evaluation.metrics import score_answer
from ...io import read_jsonl, write_jsonl

LABELS = ("A", "B", "C")  # cheapest first: the order `label_complexity` lets the cheaper strategy win in
STRATEGIES = {"A": "no retrieval", "B": "single-step retrieval", "C": "multi-step retrieval"}
HOP_LABEL = {"single-hop": "B", "multi-hop": "C"}  # the binary label of a dataset's kind


def correct(record: dict) -> bool:
    """A run's prediction record answers its question correctly: EM against any gold (evaluate.py)."""
    return score_answer(record["prediction"], record["answers"], record.get("answer_type", "span"))["em"] == 1.0


def label_question(answered: Mapping[str, bool], hops: str) -> tuple[str, str]:
    """(label, why) of one question from which strategies answered it correctly: the cheapest that did
    (silver), else its dataset's kind (binary: single-hop B, multi-hop C)."""
    for label in LABELS:
        if answered[label]:
            return label, f"silver: {STRATEGIES[label]} answers it (the cheapest strategy that does)"
    label = HOP_LABEL[hops]
    return label, f"binary: no strategy answers it; its dataset is {hops}"


def predictions_path(runs: Path, dataset: str, method: str) -> Path:
    return Path(runs) / dataset / method / "predictions.jsonl"


def dataset_labels(runs: Path, dataset: str, hops: str, strategies: Mapping[str, str]) -> list[dict]:
    """One labelled record per question of `dataset`, in its runs' order, from the three strategies'
    predictions; runs that answered other questions than each other are refused, naming both files."""
    by_label = {}
    for label in LABELS:
        path = predictions_path(runs, dataset, strategies[label])
        if not path.is_file():
            raise InputError(f"{path}: missing; the labels read strategy {label}'s answers from it "
                             f"(snakemake --cores all {path})")
        by_label[label] = {r["id"]: r for r in read_jsonl(path, "predictions file")}
    first = predictions_path(runs, dataset, strategies["A"])
    for label in LABELS[1:]:
        if set(by_label[label]) != set(by_label["A"]):
            other = predictions_path(runs, dataset, strategies[label])
            raise InputError(f"{other}: answers other questions than {first}; rebuild both runs from the same "
                             f"split (data/splits/{dataset}.jsonl)")
    rows = []
    for qid, record in by_label["A"].items():
        answered = {label: correct(by_label[label][qid]) for label in LABELS}
        label, why = label_question(answered, hops)
        rows.append({"id": qid, "question": record["question"], "label": label, "why": why, "dataset": dataset,
                     "correct": [label for label in LABELS if answered[label]]})
    return rows


def build_labels(runs: Path, datasets: Mapping[str, str], strategies: Mapping[str, str], out: Path) -> list[dict]:
    """Every labelled dataset's questions (params order), written to `out` as JSONL; a question id in two
    labelled datasets is refused (its label would count twice, once in each split)."""
    rows, seen = [], {}
    for dataset, hops in datasets.items():
        for row in dataset_labels(runs, dataset, hops, strategies):
            if row["id"] in seen:
                raise InputError(f"question {row['id']!r} is in both {seen[row['id']]} and {dataset}; label "
                                 f"disjoint datasets (complexity_classifier.datasets)")
            seen[row["id"]] = dataset
            rows.append(row)
    write_jsonl(out, rows)
    return rows


def read_labels(path: Path) -> list[dict]:
    """The labels file, each record checked to hold an id, a question and one of the labels."""
    rows = read_jsonl(path, "complexity labels (snakemake --cores all complexity_labels)")
    for line, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or row.get("label") not in LABELS:
            raise InputError(f"{path}:{line}: expected a record with id, question and label "
                             f"({', '.join(LABELS)}); rebuild it (snakemake --cores all complexity_labels)")
    if not rows:
        raise InputError(f"{path}: no labelled questions; label at least one dataset (complexity_classifier.datasets)")
    return rows
