"""DRAGIN (Su et al. 2024): RIND decides when, QFS decides what.

RIND of token i in the look-ahead sentence = a_i * H_i * s_i: a_i the largest attention any later
generated token pays to i (last layer, head-averaged), H_i the entropy of the distribution i was
drawn from, s_i = 0 for stop words. Fire if any token's RIND exceeds `theta`. QFS: the top-n real
words of the question, the answer so far and the sentence before the first hallucinated token,
ranked by the attention that token pays them, in original order.

The reference code differs in four ways, each a switch (`reference: dragin-code` sets all four):
- `attention_scope: generated`: attention over the generated tokens only (rows renormalised);
- `include_diagonal: true`: the max over later tokens includes the token itself;
- `normalise: true`: a_i divided by the sentence's attention sum and multiplied by its token count;
- `filter_order: after`: no stop-word factor in the score; after thresholding, only tokens of real
  words (POS NOUN/ADJ/VERB/PROPN/NUM) may fire;
and it keeps only the first regenerated sentence (`keep: first-sentence`).
"""

from __future__ import annotations

from ..lm.base import ATTENTIONS, ENTROPY, Extras
from .parts.attention import SCOPES, real_words_query
from .parts.components import Detection
from .parts.loop import TriggeredRetrieval
from .parts.rind import PAPER, rind_detection
from .registry import register

REFERENCES = {
    "paper": {**PAPER, "keep": "all"},
    "dragin-code": {"attention_scope": "generated", "include_diagonal": True, "normalise": True,
                    "filter_order": "after", "keep": "first-sentence"},
}


@register("dragin")
class DRAGIN(TriggeredRetrieval):
    when = 'RIND = a_i · H_i · s_i > `theta` for any token of the look-ahead sentence'
    what = 'QFS: the `top_n` real words of question + answer so far, ranked by the attention the hallucinated token pays them'
    needs = frozenset({ENTROPY, ATTENTIONS})

    @classmethod
    def read_settings(cls, section):
        reference = section.str("reference", "paper", tuple(REFERENCES))
        defaults = REFERENCES[reference]
        return {
            **cls.read_common(section, keep=defaults["keep"]),
            "reference": reference,
            "theta": section.float("theta", 1.0, minimum=0.0),
            "top_n": section.int("top_n", 35, minimum=1),
            "attention_scope": section.str("attention_scope", defaults["attention_scope"], SCOPES),
            "include_diagonal": section.bool("include_diagonal", defaults["include_diagonal"]),
            "normalise": section.bool("normalise", defaults["normalise"]),
            "filter_order": section.str("filter_order", defaults["filter_order"], ("before", "after")),
        }

    def extras(self) -> Extras:
        return Extras(entropy=True, attention_layer=-1)

    def detect(self, state, lookahead, sentence) -> Detection:
        s = self.settings
        return rind_detection(lookahead, sentence, s["theta"], s["attention_scope"], s["include_diagonal"],
                              s["normalise"], s["filter_order"])

    def build_query(self, state, lookahead, sentence, detection) -> str:
        return real_words_query(lookahead, detection.first_flagged_token(), state.example.question, state.text,
                                self.settings["top_n"])
