"""Word-threshold retrieval with a named weighting and a named query (SCAAR's ablation frame).

Each unit (word, or token) of the look-ahead sentence fires when its probability falls below its
own threshold exp(r'(u)) * theta, r' coming from the `weighting` (ORIGIN: none, so every threshold is
theta; ATTN: DRAGIN's attention importance; SCW: SCAAR's semantic contribution). Once it fires, the
`query` (Curr-Sent: the sentence's confident words; Real-Words: DRAGIN's QFS; PFQ: SCAAR's
percentile-filtered words appended to the question) is retrieved.
"""

from __future__ import annotations

from ..lm.base import Extras
from .registry import register
from .parts.components import NEEDS_SIMILARITY, QUERIES, WEIGHTINGS, Detection, TriggerContext, weighted_thresholds
from .parts.contribution import DEFAULT_SIMILARITY, load_similarity
from .parts.lookahead import probability
from .parts.loop import TriggeredRetrieval


@register("weighted-threshold")
class WeightedThreshold(TriggeredRetrieval):
    when = "any unit with p < exp(r'(u)) · `theta`, r' from the `weighting` (origin: none, attn, scw)"
    what = 'the named `query`: curr-sent (confident words of the sentence), real-words (QFS), pfq (SCAAR)'
    default_weighting, default_query = "origin", "curr-sent"

    @classmethod
    def read_settings(cls, section):
        settings = {
            **cls.read_common(section),
            "weighting": section.str("weighting", cls.default_weighting, tuple(WEIGHTINGS)),
            "query": section.str("query", cls.default_query, tuple(QUERIES)),
            "theta": section.float("theta", 0.8, minimum=0.0),
            "granularity": section.str("granularity", "word", ("token", "word")),
            "top_n": section.int("top_n", 35, minimum=1),
            "alpha": section.float("alpha", 0.5, minimum=0.0),
            "similarity": section.str("similarity", DEFAULT_SIMILARITY),
        }
        if settings["alpha"] > 1:
            raise section.fail("alpha", f"must be between 0 and 1; got {settings['alpha']}")
        return settings

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        return set(cls.needs) | WEIGHTINGS[settings["weighting"]].needs | QUERIES[settings["query"]].needs

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self._memo: dict = {}
        self._similarity = None

    def similarity(self):
        if self._similarity is None and {self.settings["weighting"], self.settings["query"]} & NEEDS_SIMILARITY:
            self._similarity = load_similarity(self.settings["similarity"])
        return self._similarity

    def extras(self) -> Extras:
        return Extras(attention_layer=-1) if self.needs_for(self.settings) else Extras()

    def answer_batch(self, examples):
        self._memo = {}  # contributions are reused between a sentence's trigger and its query only
        return super().answer_batch(examples)

    def context(self, state) -> TriggerContext:
        return TriggerContext(question=state.example.question, answer_so_far=state.text,
                              top_n=self.settings["top_n"], alpha=self.settings["alpha"],
                              similarity=self.similarity(), memo=self._memo)

    def detect(self, state, lookahead, sentence) -> Detection:
        units = lookahead.units(sentence, self.settings["granularity"])
        probs = [probability(lookahead.c.logprobs, u) for u in units]
        weights = WEIGHTINGS[self.settings["weighting"]].function(lookahead, sentence, units, self.context(state))
        thresholds = weighted_thresholds(weights, self.settings["theta"], len(units))
        flagged = [k for k, (p, t) in enumerate(zip(probs, thresholds)) if p < t]
        extra = {"weights": [round(w, 4) for w in weights]} if weights is not None else {}
        return Detection(bool(flagged), units, probs, flagged, thresholds, extra)

    def build_query(self, state, lookahead, sentence, detection) -> str:
        return QUERIES[self.settings["query"]].function(lookahead, sentence, detection, self.context(state))
