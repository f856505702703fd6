"""Word-threshold retrieval with a named weighting and a named query (SCAAR's ablation frame).

Each unit (word, or token) of the look-ahead sentence fires when its probability falls below its
own threshold exp(r'(u)) * theta, r' coming from the `weighting` (ORIGIN: none, so every threshold is
theta; ATTN: DRAGIN's attention importance). Once it fires, the `query` (Curr-Sent: the sentence's
confident words; Real-Words: DRAGIN's QFS) is retrieved. SCAAR's own SCW and PFQ join the same
registries (`components.WEIGHTINGS`, `components.QUERIES`).
"""

from __future__ import annotations

from ..lm.base import Extras
from . import register
from .components import QUERIES, WEIGHTINGS, Detection, weighted_thresholds
from .lookahead import probability
from .loop import TriggeredRetrieval


@register("weighted-threshold")
class WeightedThreshold(TriggeredRetrieval):
    default_weighting, default_query = "origin", "curr-sent"

    @classmethod
    def read_settings(cls, section):
        return {
            **cls.read_common(section),
            "weighting": section.str("weighting", cls.default_weighting, tuple(WEIGHTINGS)),
            "query": section.str("query", cls.default_query, tuple(QUERIES)),
            "theta": section.float("theta", 0.8, minimum=0.0),
            "granularity": section.str("granularity", "word", ("token", "word")),
            "top_n": section.int("top_n", 35, minimum=1),
        }

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        return set(cls.needs) | WEIGHTINGS[settings["weighting"]].needs | QUERIES[settings["query"]].needs

    def extras(self) -> Extras:
        return Extras(attention_layer=-1) if self.needs_for(self.settings) else Extras()

    def context(self, state) -> dict:
        return {"question": state.example.question, "answer_so_far": state.text, "top_n": self.settings["top_n"]}

    def detect(self, state, lookahead, sentence) -> Detection:
        units = lookahead.units(sentence, self.settings["granularity"])
        probs = [probability(lookahead.c.logprobs, u) for u in units]
        weights = WEIGHTINGS[self.settings["weighting"]].function(lookahead, units, self.context(state))
        thresholds = weighted_thresholds(weights, self.settings["theta"], len(units))
        flagged = [k for k, (p, t) in enumerate(zip(probs, thresholds)) if p < t]
        return Detection(bool(flagged), units, probs, flagged, thresholds)

    def build_query(self, state, lookahead, sentence, detection) -> str:
        return QUERIES[self.settings["query"]].function(lookahead, sentence, detection, self.context(state))
