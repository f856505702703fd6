"""The separable parts of a threshold trigger: *weighting* (how much each word's threshold is scaled)
and *query* (what is retrieved once it fires). Both are registries of named functions, because
SCAAR's ablation crosses weighting {ORIGIN, ATTN, SCW} with query {Curr-Sent, Real-Words, PFQ}: any
pair is a valid configuration of the `weighted-threshold` method (and of `scaar`).

A weighting returns each unit's normalised weight r'(u) (summing to the number of units, so the mean
weight is 1); the unit's threshold is exp(r'(u)) * theta. ORIGIN returns None: every threshold is
theta, i.e. FLARE's rule at word level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ...lm.capabilities import ATTENTIONS
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


def normalise(weights: list[float]) -> list[float]:
    """r'(u) = |s| * r(u) / sum r (all ones when every weight is zero)."""
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
    """SCAAR's SCW (Eq. 2): r'(w) = |s| r(w) / sum r, r the leave-one-out semantic contribution."""
    return normalise(context.contributions(sentence, units))


def attention_weights(lookahead: LookAhead, sentence, units: list[Unit], context: TriggerContext) -> list[float]:
    """DRAGIN's attention importance per unit: the attention later tokens pay to its tokens, summed."""
    received = attention_received(attention_matrix(lookahead, "full"))
    return normalise([float(sum(received[t] for t in unit.tokens)) for unit in units])


@dataclass(frozen=True)
class Part:
    """A named weighting or query: its function and the model capabilities it needs."""

    function: Callable
    needs: frozenset[str] = frozenset()


WEIGHTINGS: dict[str, Part] = {
    "origin": Part(origin_weights),
    "attn": Part(attention_weights, frozenset({ATTENTIONS})),
    "scw": Part(scw_weights),
}


def weighted_thresholds(weights: list[float] | None, theta: float, count: int) -> list[float]:
    return [theta] * count if weights is None else [math.exp(w) * theta for w in weights]


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


def percentile_filter(contributions: list[float], alpha: float) -> list[int]:
    """Indices of the top `alpha` fraction of units by contribution (at least one when alpha > 0;
    ties broken by position), in their original order (SCAAR Algorithm 1's alpha-percentile filter)."""
    if not contributions or alpha <= 0:
        return []
    count = max(1, math.ceil(alpha * len(contributions) - 1e-9))
    ranked = sorted(range(len(contributions)), key=lambda k: (-contributions[k], k))[:count]
    return sorted(ranked)


def pfq_query(lookahead: LookAhead, sentence, detection: Detection, context: TriggerContext) -> str:
    """PFQ: the sentence's most contributing words (top alpha), hallucinated ones dropped, appended to
    the question in their original order."""
    contributions = context.contributions(sentence, detection.units)
    flagged = set(detection.flagged)
    kept = [detection.units[k].text for k in percentile_filter(contributions, context.alpha) if k not in flagged]
    return " ".join([context.question, *kept])


QUERIES: dict[str, Part] = {
    "curr-sent": Part(current_sentence_query),
    "real-words": Part(real_words_query_of, frozenset({ATTENTIONS})),
    "pfq": Part(pfq_query),
}

NEEDS_SIMILARITY = {"scw", "pfq"}  # parts that call the similarity encoder
