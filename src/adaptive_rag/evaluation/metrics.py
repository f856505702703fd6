"""EM, F1, precision, recall and accuracy with SQuAD normalisation (HotpotQA's official variant).

Against several gold aliases, each metric takes the gold giving the best F1, so precision and recall
come from the same alias as F1. A yes/no gold only matches an identical yes/no prediction; for
yes/no questions (StrategyQA, IIRC binary) the prediction is first reduced to its first "yes" or
"no", as the reference evaluation does. `acc` is "a gold answer is contained in the prediction"
(SUGAR, DioR), which credits verbose but correct answers that EM misses.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_precision_recall(prediction: str, gold: str) -> tuple[float, float, float]:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


_YES_NO = re.compile(r"\b(yes|no)\b")


def to_yes_no(prediction: str) -> str:
    match = _YES_NO.search(normalize_answer(prediction))
    return match.group(1) if match else prediction


def contains_gold(prediction: str, gold: str) -> float:
    pred, ref = f" {normalize_answer(prediction)} ", f" {normalize_answer(gold)} "
    return float(bool(ref.strip()) and ref in pred)


def score_answer(prediction: str, golds: Sequence[str], answer_type: str = "span") -> dict[str, float]:
    if not golds:
        raise ValueError("no gold answers to score against")
    if answer_type == "yes/no":
        prediction = to_yes_no(prediction)
    best = max((f1_precision_recall(prediction, g) for g in golds), key=lambda t: t[0])
    return {
        "em": max(exact_match(prediction, g) for g in golds),
        "f1": best[0],
        "precision": best[1],
        "recall": best[2],
        "acc": max(contains_gold(prediction, g) for g in golds),
    }
