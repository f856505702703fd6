"""The separable parts of a threshold trigger: *weighting* (how much each word's threshold is scaled)
and *query* (what is retrieved once it fires). Both are registries of named functions, because
SCAAR's ablation crosses weighting {ORIGIN, ATTN, SCW} with query {Curr-Sent, Real-Words, PFQ}: any
pair is a valid configuration of the `weighted-threshold` method (and of `scaar`).

A weighting returns each unit's raw weight in [0, 1] (SCW: the leave-one-out contribution r(w) of
Eq. 1; ATTN: the unit's share of the sentence's attention mass); ORIGIN returns None. The unit's
threshold is Eq. 3 as printed, exp(r(u)) * theta (`scaling: raw`, the default: SCAAR's N_R in its
Table 2 sits next to FLARE's, which this reading reproduces), or exp(r'(u)) * theta with r' the
Eq. 2 normalisation |s| r / sum r (`scaling: normalised`: the mean threshold is then e * theta, so for
theta > 1/e every sentence fires). ORIGIN's threshold is theta for every unit: FLARE at word level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ...lm.capabilities import ATTENTIONS, ENTROPY
from .attention import attention_matrix, attention_received, real_words_query
from .lookahead import LookAhead, Unit


@dataclass
class Detection:
    """A trigger's verdict on one sentence, with the numbers behind it (for the trace)."""

    fire: bool
    units: list[Unit]
    scores: list[float]  # the value compared with a threshold, per unit
    flagged: list[int]  # indices of the units judged hallucinated
    thresholds: list[float] | None = None
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        out = {"units": [u.text for u in self.units], "scores": [round(s, 4) for s in self.scores],
               "flagged": self.flagged, **self.extra}
        if self.thresholds is not None:
            out["thresholds"] = [round(t, 4) for t in self.thresholds]
        return out

    def first_flagged_token(self) -> int | None:
        return self.units[self.flagged[0]].tokens[0] if self.flagged else None


SCALINGS = ("raw", "normalised")
MAX_EXPONENT = 700.0  # exp(700) ~ 1e304: a threshold that always fires, without overflowing a float


def clip_unit(weights: list[float]) -> list[float]:
    """Weights into [0, 1], where Eq. 1's contribution lives: a similarity model may score a variant a
    hair above the original (a negative contribution) or, for an uncalibrated cross-encoder, outside
    [0, 1]; NaN counts as no contribution."""
    return [min(1.0, max(0.0, w)) if w == w else 0.0 for w in weights]


def normalise(weights: list[float]) -> list[float]:
    """Eq. 2: r'(u) = |s| * r(u) / sum r over the clipped weights, so the mean is 1 and no r' exceeds
    |s| (all ones when every weight is zero)."""
    weights = clip_unit(weights)
    total = sum(weights)
    if total <= 0:
        return [1.0] * len(weights)
    return [len(weights) * w / total for w in weights]


@dataclass
class TriggerContext:
    """What weightings and queries may read besides the look-ahead: the question, the answer so far,
    the method's settings, and (for SCW/PFQ) the similarity encoder with per-sentence memo."""

    question: str
    answer_so_far: str = ""
    top_n: int = 35
    alpha: float = 0.5
    pfq_order: str = "contribution"
    similarity: object = None
    memo: dict = field(default_factory=dict)

    def contributions(self, sentence, units: list[Unit]) -> list[float]:
        from .contribution import contributions

        key = (self.question, sentence.start, sentence.text, tuple((u.start, u.end) for u in units))
        if key not in self.memo:
            self.memo[key] = contributions(self.similarity, self.question, sentence.text, sentence.start, units)
        return self.memo[key]


def origin_weights(lookahead: LookAhead, sentence, units: list[Unit], context: TriggerContext) -> None:
    return None


def scw_weights(lookahead: LookAhead, sentence, units: list[Unit], context: TriggerContext) -> list[float]:
    """SCAAR's SCW weight: r(w) of Eq. 1, the leave-one-out semantic contribution, in [0, 1]."""
    return clip_unit(context.contributions(sentence, units))


def attention_weights(lookahead: LookAhead, sentence, units: list[Unit], context: TriggerContext) -> list[float]:
    """ATTN: each unit's share of the sentence's attention mass (DRAGIN's a_i, the largest attention a
    later token pays, summed over the unit's tokens, over the sentence's total), in [0, 1]."""
    received = attention_received(attention_matrix(lookahead, "full"))
    mass = [float(sum(received[t] for t in unit.tokens)) for unit in units]
    total = sum(mass)
    return [m / total for m in mass] if total > 0 else [0.0] * len(mass)


@dataclass(frozen=True)
class Part:
    """A named weighting or query: its function and the model capabilities it needs."""

    function: Callable
    needs: frozenset[str] = frozenset()


WEIGHTINGS: dict[str, Part] = {
    "origin": Part(origin_weights),
    "attn": Part(attention_weights, frozenset({ATTENTIONS})),
    "scw": Part(scw_weights),
    # Not a weighting: DRAGIN's own RIND trigger (token level, `theta` is the RIND threshold), so a frame
    # cell can be the DRAGIN of SCAAR's Table 2 (rind x real-words) beside ATTN-weighted thresholds.
    "rind": Part(None, frozenset({ATTENTIONS, ENTROPY})),
}


def weighted_thresholds(weights: list[float] | None, theta: float, count: int, scaling: str = "raw") -> list[float]:
    """Eq. 3: exp(w) * theta per unit, w the raw weight (`raw`) or its Eq. 2 normalisation (`normalised`)."""
    if weights is None:
        return [theta] * count
    exponents = normalise(weights) if scaling == "normalised" else clip_unit(weights)
    return [math.exp(min(w, MAX_EXPONENT)) * theta for w in exponents]


# ---- queries ---------------------------------------------------------------------------------------

def masked_sentence(sentence_text: str, sentence_start: int, units: list[Unit], masked: list[int]) -> str:
    """The sentence with the given units cut out (FLARE's masked query)."""
    text = sentence_text
    for index in sorted(masked, key=lambda k: -units[k].start):
        unit = units[index]
        a, b = unit.start - sentence_start, unit.end - sentence_start
        text = text[:a] + " " + text[b:]
    return " ".join(text.split())


def current_sentence_query(lookahead: LookAhead, sentence, detection: Detection, context: TriggerContext) -> str:
    """Curr-Sent: the sentence's confident words (the flagged ones dropped), in order."""
    return " ".join(u.text for k, u in enumerate(detection.units) if k not in set(detection.flagged))


def real_words_query_of(lookahead: LookAhead, sentence, detection: Detection, context: TriggerContext) -> str:
    """Real-Words: DRAGIN's QFS, ranked by the attention of the first flagged token."""
    token = detection.first_flagged_token()
    if token is None:
        return ""
    return real_words_query(lookahead, token, context.question, context.answer_so_far, context.top_n)


PFQ_ORDERS = ("contribution", "original")


def percentile_filter(contributions: list[float], alpha: float) -> list[int]:
    """Algorithm 1 lines 1-2: the indices of the top `alpha` fraction of units (at least one when
    alpha > 0), sorted by contribution descending, ties by position. Ranking by r' (Eq. 2) or by r is
    the same order: r' is r times a positive constant."""
    if not contributions or alpha <= 0:
        return []
    count = max(1, math.ceil(alpha * len(contributions) - 1e-9))
    weights = clip_unit(contributions)
    return sorted(range(len(weights)), key=lambda k: (-weights[k], k))[:count]


def pfq_query(lookahead: LookAhead, sentence, detection: Detection, context: TriggerContext) -> str:
    """PFQ (Algorithm 1): the top-alpha contributing words of the sentence, minus the hallucinated ones
    (probability below their own threshold: the detection's flagged units), appended to the question
    in descending contribution order (line 4's loop over the sorted s'_t), or in sentence order with
    `pfq_order: original`."""
    contributions = context.contributions(sentence, detection.units)
    flagged = set(detection.flagged)
    kept = [k for k in percentile_filter(contributions, context.alpha) if k not in flagged]
    if context.pfq_order == "original":
        kept.sort()
    return " ".join([context.question, *(detection.units[k].text for k in kept)])


QUERIES: dict[str, Part] = {
    "curr-sent": Part(current_sentence_query),
    "real-words": Part(real_words_query_of, frozenset({ATTENTIONS})),
    "pfq": Part(pfq_query),
}

NEEDS_SIMILARITY = {"scw", "pfq"}  # parts that call the similarity encoder
