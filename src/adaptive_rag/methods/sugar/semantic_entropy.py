"""Semantic entropy (SUGAR §II-B, after Kuhn et al. 2023 and Farquhar et al. 2024): M sampled answers are
grouped into meaning classes by bidirectional entailment, and the entropy is taken over classes, not over
strings, so "Paris" and "It is Paris" do not count as disagreement.

Three estimators, because the SUGAR paper names none and they put SE on different scales (its thresholds
0.4 and 0.9 only make sense on one of them):
- `rao` (default; Farquhar 2024's `predictive_entropy_rao` with `sum_normalized` class log-likelihoods):
  each answer's length-normalised log-likelihood, class probabilities normalised over the M samples,
  SE = −Σ_C p(C) log p(C), bounded by ln M (2.303 for M = 10);
- `mc` (Kuhn 2023): −(1/|C|) Σ_C log p(C) with log p(C) = logsumexp of the class members' log-likelihoods,
  not normalised (unbounded; no constant shift applied);
- `discrete`: the entropy of the class frequencies |C|/M, which needs no likelihoods (any API).

Predictive entropy (the Table III ablation) is SeaKR's LN-entropy, −(1/M) Σ_i ℓ_i over the same samples:
`uncertainty.ln_entropy` serves both papers.

Clustering (`cluster`) follows Farquhar et al.'s `get_semantic_ids` (jlko/semantic_uncertainty,
uncertainty_measures/semantic_entropy.py:169-205) in shape: each answer not yet placed opens a class,
and every later answer equivalent to that class's first member joins it. It differs from both
reference codes where they are not what the method describes:
- an answer, once placed, stays: Farquhar's loop also tests answers already placed and moves them
  to a later class they match (semantic_entropy.py:197-200), so an answer's class depends on which
  later answer it met last;
- Kuhn et al.'s code (lorenzkuhn/semantic_uncertainty, code/get_semantic_similarities.py:87-114)
  compares every pair of distinct strings and lets each later string take the class of any earlier
  one that neither contradicts (neutral both ways counts as the same meaning), so classes chain; here
  `strict` (default, Farquhar's default `--strict_entailment`) needs entailment both ways, and
  `strict: false` is Farquhar's lenient rule (no contradiction, not neutral both ways), not Kuhn's.
Answers equal after SQuAD normalisation are equivalent without asking the judge; the judge is asked
once per distinct ordered pair of strings within a question (Kuhn's code, too, judges distinct strings
only), and the second direction only when the first leaves the answer open, so its cost (an NLI
forward, or an LM scoring call) stays small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ...evaluation.metrics import normalize_answer
from ..parts.uncertainty import ln_entropy as predictive_entropy  # noqa: F401  (Table III's PE)

ESTIMATORS = ("rao", "mc", "discrete")

CONTRADICTION, NEUTRAL, ENTAILMENT = 0, 1, 2
LABELS = ("contradiction", "neutral", "entailment")

# judge(a, b) -> CONTRADICTION | NEUTRAL | ENTAILMENT: does a entail b?
Implication = Callable[[str, str], int]


def equivalent(forward: int, backward: int, strict: bool = True) -> bool:
    """Strict (the paper's "logically imply each other"): entailment both ways. Lenient (Farquhar 2024's
    `strict_entailment=False`): no contradiction either way, and not neutral both ways."""
    if strict:
        return forward == ENTAILMENT and backward == ENTAILMENT
    if CONTRADICTION in (forward, backward):
        return False
    return not (forward == NEUTRAL and backward == NEUTRAL)


def cluster(answers: Sequence[str], implication: Implication, strict: bool = True) -> tuple[list[int], int]:
    """(class id per answer, judge calls made). Class ids number classes in order of first appearance;
    the judge is asked once per distinct ordered pair of strings (ten samples often repeat a string)."""
    ids = [-1] * len(answers)
    asked: dict[tuple[str, str], int] = {}
    normalised = [normalize_answer(a) for a in answers]

    def judge(a: int, b: int) -> int:
        pair = (answers[a], answers[b])
        if pair not in asked:
            asked[pair] = implication(*pair)
        return asked[pair]

    next_id = 0
    for i in range(len(answers)):
        if ids[i] != -1:
            continue
        ids[i] = next_id
        for j in range(i + 1, len(answers)):
            if ids[j] != -1:
                continue
            if normalised[i] == normalised[j] or _mutual(judge, i, j, strict):
                ids[j] = next_id
        next_id += 1
    return ids, len(asked)


def _mutual(judge: Callable[[int, int], int], a: int, b: int, strict: bool) -> bool:
    """`equivalent`, asking the second direction only when the first leaves the answer open."""
    forward = judge(a, b)
    if forward == CONTRADICTION or (strict and forward != ENTAILMENT):
        return False
    return equivalent(forward, judge(b, a), strict)


def sequence_loglik(logprobs: Sequence[float]) -> float:
    """Length-normalised log-likelihood ℓ = mean token log-prob; an empty answer gets −inf (never likely)."""
    lp = np.asarray(logprobs, dtype=np.float64).reshape(-1)
    return float(lp.mean()) if lp.size else -math.inf


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    if not math.isfinite(top):
        return top
    return top + float(np.log(np.exp(values - top).sum()))


def semantic_entropy(ids: Sequence[int], loglik: Sequence[float] | None = None, estimator: str = "rao") -> float:
    """SE in nats from class ids and each answer's log-likelihood (`discrete` needs no likelihoods)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"semantic entropy estimator must be one of {', '.join(ESTIMATORS)}; got {estimator!r}")
    ids = np.asarray(ids)
    if ids.size == 0:
        raise ValueError("semantic entropy of no answers")
    classes = sorted(set(ids.tolist()))
    if estimator == "discrete":
        p = np.array([(ids == c).sum() for c in classes], dtype=np.float64) / ids.size
        return float(-(p * np.log(p)).sum())
    if loglik is None or len(loglik) != ids.size:
        raise ValueError(f"semantic entropy ({estimator}): one log-likelihood per answer needed")
    ll = np.asarray(loglik, dtype=np.float64)
    class_ll = np.array([_logsumexp(ll[ids == c]) for c in classes])
    if estimator == "mc":
        return float(-class_ll.mean())
    finite = np.isfinite(class_ll)
    if not finite.any():  # no answer has a likelihood (all empty): weigh the classes by their sizes
        return semantic_entropy(ids, None, "discrete")
    log_p = class_ll - _logsumexp(class_ll[finite])
    p = np.where(finite, np.exp(log_p), 0.0)
    return float(-(p[finite] * log_p[finite]).sum())
