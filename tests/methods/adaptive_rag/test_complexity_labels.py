"""Adaptive-RAG's labels against hand-computed cases of the reference code (starsuzi/Adaptive-RAG):
classifier/preprocess/preprocess_utils.py `label_complexity` (C, then B, then A overwrite the label, so
the cheapest strategy that answered wins), evaluate.py `main` (correct = normalised exact match) and
`save_inductive_bias_single_data` / `save_inductive_bias_musique` (dataset-origin labels B and C)."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.methods.adaptive_rag.labels import build_labels, correct, label_question, read_labels

from conftest import read_jsonl

STRATEGIES = {"A": "wo-rag", "B": "sr-rag", "C": "ircot"}


@pytest.mark.parametrize("answered, label", [
    ({"A": True, "B": True, "C": True}, "A"),  # label_complexity: 'A' is assigned last
    ({"A": True, "B": False, "C": False}, "A"),
    ({"A": False, "B": True, "C": True}, "B"),
    ({"A": True, "B": False, "C": True}, "A"),
    ({"A": False, "B": False, "C": True}, "C"),
])
def test_the_cheapest_strategy_that_answers_is_the_silver_label(answered, label):
    got, why = label_question(answered, "multi-hop")
    assert got == label and why.startswith("silver")


@pytest.mark.parametrize("hops, label", [("single-hop", "B"), ("multi-hop", "C")])
def test_a_question_no_strategy_answers_takes_its_datasets_binary_label(hops, label):
    got, why = label_question({"A": False, "B": False, "C": False}, hops)
    assert got == label and why == f"binary: no strategy answers it; its dataset is {hops}"


def test_correct_is_normalised_exact_match_not_containment():
    """evaluate.py compares normalize_answer(gold) == normalize_answer(pred): case, articles and
    punctuation aside, the strings must be equal."""
    record = {"prediction": "The Paris.", "answers": ["Lyon", "paris"], "answer_type": "span"}
    assert correct(record)
    assert not correct({**record, "prediction": "Paris, France"})


def write_run(runs, dataset, method, predictions: dict[str, str], answers=("Paris",)):
    path = runs / dataset / method / "predictions.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": qid, "question": f"Q {qid}?", "answers": list(answers),
                                        "answer_type": "span", "prediction": p}) + "\n"
                            for qid, p in predictions.items()))


def test_labels_file_from_the_three_runs_of_each_dataset(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "multi", "wo-rag", {"m1": "Paris", "m2": "Rome", "m3": "Rome"})
    write_run(runs, "multi", "sr-rag", {"m1": "Paris", "m2": "Paris", "m3": "Rome"})
    write_run(runs, "multi", "ircot", {"m1": "Rome", "m2": "Paris", "m3": "Rome"})
    write_run(runs, "single", "wo-rag", {"s1": "Rome", "s2": "Rome"})
    write_run(runs, "single", "sr-rag", {"s1": "Rome", "s2": "Rome"})
    write_run(runs, "single", "ircot", {"s1": "Paris", "s2": "Rome"})
    out = tmp_path / "labels.jsonl"
    rows = build_labels(runs, {"multi": "multi-hop", "single": "single-hop"}, STRATEGIES, out)
    assert [(r["id"], r["label"], r["correct"]) for r in rows] == [
        ("m1", "A", ["A", "B"]), ("m2", "B", ["B", "C"]), ("m3", "C", []), ("s1", "C", ["C"]), ("s2", "B", [])]
    assert [r["why"].split(":")[0] for r in rows] == ["silver", "silver", "binary", "silver", "binary"]
    assert read_jsonl(out) == rows and read_labels(out) == rows
    assert set(rows[0]) == {"id", "question", "label", "why", "dataset", "correct"}


def test_runs_of_other_questions_a_missing_run_and_a_question_in_two_datasets_are_refused(tmp_path):
    runs = tmp_path / "runs"
    for method in STRATEGIES.values():
        write_run(runs, "d", method, {"q1": "x", "q2": "y"})
    write_run(runs, "e", "wo-rag", {"q1": "x"})
    with pytest.raises(InputError, match=r"e/sr-rag/predictions.jsonl: missing; the labels read strategy B's"):
        build_labels(runs, {"e": "single-hop"}, STRATEGIES, tmp_path / "l.jsonl")
    write_run(runs, "e", "sr-rag", {"q1": "x"})
    write_run(runs, "e", "ircot", {"q9": "x"})
    with pytest.raises(InputError, match=r"e/ircot/predictions.jsonl: answers other questions than .*e/wo-rag"):
        build_labels(runs, {"e": "single-hop"}, STRATEGIES, tmp_path / "l.jsonl")
    write_run(runs, "e", "ircot", {"q1": "x"})
    with pytest.raises(InputError, match="question 'q1' is in both d and e"):
        build_labels(runs, {"d": "multi-hop", "e": "single-hop"}, STRATEGIES, tmp_path / "l.jsonl")


def test_a_labels_file_without_a_label_is_refused(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Q?", "label": "D"}) + "\n")
    with pytest.raises(InputError, match=r"labels.jsonl:1: expected a record with id, question and label \(A, B, C\)"):
        read_labels(path)
