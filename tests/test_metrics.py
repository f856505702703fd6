"""SQuAD-style normalisation, EM/F1/precision/recall, and answer extraction."""

import pytest

from adaptive_rag.evaluation.answer import extract_answer
from adaptive_rag.evaluation.metrics import normalize_answer, score_answer


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,  a pear ", "apple pear"),
        ("Theodore's", "theodores"),
        ("A.B.C.", "abc"),
        ("There was a theme", "there was theme"),  # articles only as whole words
    ],
)
def test_normalisation(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_exact_and_partial_match():
    assert score_answer("the Carrowmere", ["Carrowmere"]) == {"em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0,
                                                             "acc": 1.0}
    s = score_answer("Carrowmere harbour town", ["Carrowmere harbour"])
    assert s["em"] == 0.0
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == pytest.approx(1.0)
    assert s["f1"] == pytest.approx(0.8)
    assert score_answer("Dunmore", ["Carrowmere"])["f1"] == 0.0


def test_best_alias_wins_and_precision_recall_come_from_it():
    s = score_answer("New York City", ["NYC", "New York", "New York City"])
    assert s == {"em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0, "acc": 1.0}
    s = score_answer("York", ["New York", "Yorkshire"])
    assert s["f1"] == pytest.approx(2 / 3) and s["precision"] == 1.0 and s["recall"] == 0.5


def test_yes_no_only_match_exactly():
    assert score_answer("yes", ["yes"])["em"] == 1.0
    assert score_answer("yes", ["no"])["f1"] == 0.0
    assert score_answer("no it is not", ["no"])["f1"] == 0.0  # HotpotQA official rule


def test_accuracy_credits_a_contained_gold_on_word_boundaries():
    assert score_answer("It was founded in Carrowmere harbour.", ["Carrowmere"])["acc"] == 1.0
    assert score_answer("It was founded in Carrowmere harbour.", ["Carrowmere"])["em"] == 0.0
    assert score_answer("Carrowmeres", ["Carrowmere"])["acc"] == 0.0
    assert score_answer("1712", ["712"])["acc"] == 0.0


@pytest.mark.parametrize(
    "prediction, gold, em",
    [("Yes, llamas can.", "yes", 1.0), ("No. It cannot.", "no", 1.0), ("no, not yes", "yes", 0.0),
     ("Perhaps", "no", 0.0), ("Not known; yes", "yes", 1.0)],
)
def test_yes_no_questions_reduce_the_prediction_first(prediction, gold, em):
    assert score_answer(prediction, [gold], "yes/no")["em"] == em
    assert score_answer(prediction, [gold], "span")["em"] == 0.0


@pytest.mark.parametrize(
    "text, answer, found",
    [
        ("Velmora was founded by Idris. So the answer is Idris Penhallow.", "Idris Penhallow", True),
        ("X is in Y. so the answer is: Carrowmere", "Carrowmere", True),
        ("So the answer is 1,204. Then more text follows.", "1,204", True),
        ('The answer is "Moving Pictures".', "Moving Pictures", True),
        ('So the answer is Two Dollar Radio "Moving Pictures".', 'Two Dollar Radio "Moving Pictures"', True),
        ("The answer is:\nCarrowmere\nQuestion: next", "Carrowmere", True),
        ("First the answer is A. On reflection, the answer is B.", "B", True),
        ("It was version 3.5 of it. So the answer is 3.5.", "3.5", True),
        ("Idris Penhallow founded it.", "Idris Penhallow founded it.", False),
    ],
)
def test_answer_extraction(text, answer, found):
    assert extract_answer(text) == (answer, found)
