"""Word-threshold retrieval with a named weighting and a named query (SCAAR's ablation frame, Table 3).

Each unit (word, or token) of the look-ahead sentence fires when its probability (Eq. 4-5: the
geometric mean of its tokens') falls below its own threshold exp(w(u)) * theta (Eq. 3), w coming from
the `weighting` (ORIGIN: none, every threshold is theta; ATTN: the unit's share of the sentence's
attention; SCW: SCAAR's leave-one-out semantic contribution r). `scaling: normalised` puts the Eq. 2
normalisation r' in the exponent instead. `weighting: rind` replaces the thresholds by DRAGIN's own
RIND trigger. Once a sentence fires, the `query` (Curr-Sent: the sentence's confident words;
Real-Words: DRAGIN's QFS; PFQ: SCAAR's percentile-filtered words appended to the question) is
retrieved, and by default only the first regenerated sentence replaces the fired one (section 3.4).
"""

from __future__ import annotations

from ..lm.base import ATTENTIONS, ENTROPY, Extras
from .parts.components import (NEEDS_SIMILARITY, PFQ_ORDERS, QUERIES, SCALINGS, WEIGHTINGS, Detection,
                               TriggerContext, weighted_thresholds)
from .parts.contribution import DEFAULT_SIMILARITY, load_similarity
from .parts.lookahead import probability
from .parts.loop import TriggeredRetrieval
from .parts.rind import rind_detection
from .registry import register


@register("weighted-threshold")
class WeightedThreshold(TriggeredRetrieval):
    when = "any unit with p < exp(w(u)) · `theta`, w from the `weighting` (origin: 0, attn, scw), or DRAGIN's RIND (rind)"
    what = 'the named `query`: curr-sent (confident words of the sentence), real-words (QFS), pfq (SCAAR)'
    default_weighting, default_query = "origin", "curr-sent"

    @classmethod
    def read_settings(cls, section):
        settings = {
            # section 3.4: the regenerated sentence s'_t replaces s_t, then the loop looks ahead again
            **cls.read_common(section, keep="first-sentence"),
            "weighting": section.str("weighting", cls.default_weighting, tuple(WEIGHTINGS)),
            "query": section.str("query", cls.default_query, tuple(QUERIES)),
            "theta": section.float("theta", 0.8, minimum=0.0),
            "scaling": section.str("scaling", "raw", SCALINGS),
            "granularity": section.str("granularity", "word", ("token", "word")),
            "top_n": section.int("top_n", 35, minimum=1),
            "alpha": section.float("alpha", 0.5, minimum=0.0),
            "pfq_order": section.str("pfq_order", "contribution", PFQ_ORDERS),
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
        needs = self.needs_for(self.settings)
        return Extras(entropy=ENTROPY in needs, attention_layer=-1 if ATTENTIONS in needs else None)

    def answer_batch(self, examples):
        self._memo = {}  # contributions are reused between a sentence's trigger and its query only
        return super().answer_batch(examples)

    def context(self, state) -> TriggerContext:
        return TriggerContext(question=state.example.question, answer_so_far=state.text,
                              top_n=self.settings["top_n"], alpha=self.settings["alpha"],
                              pfq_order=self.settings["pfq_order"], similarity=self.similarity(), memo=self._memo)

    def detect(self, state, lookahead, sentence) -> Detection:
        if self.settings["weighting"] == "rind":
            return rind_detection(lookahead, sentence, self.settings["theta"])
        units = lookahead.units(sentence, self.settings["granularity"])
        probs = [probability(lookahead.c.logprobs, u) for u in units]
        weights = WEIGHTINGS[self.settings["weighting"]].function(lookahead, sentence, units, self.context(state))
        thresholds = weighted_thresholds(weights, self.settings["theta"], len(units), self.settings["scaling"])
        flagged = [k for k, (p, t) in enumerate(zip(probs, thresholds)) if p < t]
        extra = {"weights": [round(w, 4) for w in weights]} if weights is not None else {}
        return Detection(bool(flagged), units, probs, flagged, thresholds, extra)

    def build_query(self, state, lookahead, sentence, detection) -> str:
        return QUERIES[self.settings["query"]].function(lookahead, sentence, detection, self.context(state))
