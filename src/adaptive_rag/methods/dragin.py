"""DRAGIN (Su et al. 2024): RIND decides when, QFS decides what.

RIND of token i in the look-ahead sentence = a_i * H_i * s_i: a_i the largest attention any later
generated token pays to i (last layer, head-averaged), H_i the entropy of the distribution i was
drawn from, s_i = 0 for stop words. Fire if any token's RIND exceeds `theta`. QFS: the top-n real
words of the question, the answer so far and the sentence before the first hallucinated token,
ranked by the attention that token pays them, in original order.

The reference code differs in these ways, each a switch (`reference: dragin-code` sets them all):
- `attention_pass: reencoded`: a_i from a second forward pass over the generated tokens alone, each
  head's maximum over later tokens, then the mean over heads (the generation pass's rows are
  head-averaged and read the prompt, so they give the head mean's maximum instead);
- `rind_units: word`: RIND per whitespace-delimited word (its tokens' attention summed, their
  entropies averaged), not per token;
- `include_diagonal: true`: the max over later tokens includes the token itself;
- `normalise: true`: a_i divided by the sentence's attention sum and multiplied by its unit count;
- `filter_order: after`: no stop-word factor in the score; after thresholding, only units of real
  words (POS NOUN/ADJ/VERB/PROPN/NUM) may fire;
- `query_punctuation: keep` and `query_duplicates: keep`: QFS words keep the punctuation attached to
  them and a repeated word may appear more than once;
- `query_words: whole-sentence`: QFS ranks the real words of the whole fired sentence but the flagged
  ones (src/generate.py `AttnWeightRAG.keep_real_words`), not only those before the first flagged token
  (a setting of its own: `reference: dragin-code` predates it and keeps `until-flagged`);
and it keeps only the first regenerated sentence (`keep: first-sentence`). `attention_scope:
generated` (the generation pass's rows restricted to the generated tokens and renormalised) was this
project's stand-in for the re-encoded pass; it applies with `attention_pass: generation` only.
"""

from __future__ import annotations

from ..lm.base import ATTENTIONS, ENTROPY, Extras
from .parts.attention import SCOPES, real_words_query, reencoded_received
from .parts.components import Detection
from .parts.loop import TriggeredRetrieval
from .parts.rind import PAPER, UNITS, rind_detection
from .registry import register

PASSES = ("generation", "reencoded")
# The settings DRAGIN gained after runs were built, with the values that reproduce what it did before.
LATER = {"rind_units": "token", "attention_pass": "generation", "query_punctuation": "strip",
         "query_duplicates": "drop", "query_words": "until-flagged"}
QUERY_WORDS = ("until-flagged", "whole-sentence")
REFERENCES = {
    "paper": {**PAPER, **LATER, "keep": "all"},
    "dragin-code": {"attention_scope": "generated", "include_diagonal": True, "normalise": True,
                    "filter_order": "after", "keep": "first-sentence", "rind_units": "word",
                    "attention_pass": "reencoded", "query_punctuation": "keep", "query_duplicates": "keep",
                    "query_words": "until-flagged"},
}


@register("dragin")
class DRAGIN(TriggeredRetrieval):
    when = 'RIND = a_i · H_i · s_i > `theta` for any token of the look-ahead sentence'
    what = 'QFS: the `top_n` real words of question + answer so far, ranked by the attention the hallucinated token pays them'
    needs = frozenset({ENTROPY, ATTENTIONS})
    skip_empty = True  # `joining: dragin-code`: AttnWeightRAG.inference joins only the non-empty pieces
    later_settings = {**TriggeredRetrieval.later_settings, **LATER}

    @classmethod
    def read_settings(cls, section):
        reference = section.str("reference", "paper", tuple(REFERENCES))
        return cls.read_rind_qfs(section, reference, REFERENCES[reference])

    @classmethod
    def read_rind_qfs(cls, section, reference: str, defaults: dict) -> dict:
        """The common loop settings, `reference`, and RIND's and QFS's settings over `defaults` (a
        reference's values; RaDIO reads them with its own)."""
        return {
            **cls.read_common(section, keep=defaults["keep"]),
            "reference": reference,
            "theta": section.float("theta", 1.0, minimum=0.0),
            "top_n": section.int("top_n", 35, minimum=1),
            "attention_scope": section.str("attention_scope", defaults["attention_scope"], SCOPES),
            "include_diagonal": section.bool("include_diagonal", defaults["include_diagonal"]),
            "normalise": section.bool("normalise", defaults["normalise"]),
            "filter_order": section.str("filter_order", defaults["filter_order"], ("before", "after")),
            "rind_units": section.str("rind_units", defaults["rind_units"], UNITS),
            "attention_pass": section.str("attention_pass", defaults["attention_pass"], PASSES),
            "query_punctuation": section.str("query_punctuation", defaults["query_punctuation"], ("strip", "keep")),
            "query_duplicates": section.str("query_duplicates", defaults["query_duplicates"], ("drop", "keep")),
            "query_words": section.str("query_words", defaults["query_words"], QUERY_WORDS),
        }

    def extras(self) -> Extras:
        return Extras(entropy=True, attention_layer=-1)

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self._reencoded: tuple = (None, None)  # (look-ahead, its re-encoded attention): one pass per look-ahead

    def detect(self, state, lookahead, sentence) -> Detection:
        s = self.settings
        received = None
        if s["attention_pass"] == "reencoded":
            received = reencoded_received(self.reencode(lookahead), s["include_diagonal"])
        return rind_detection(lookahead, sentence, s["theta"], s["attention_scope"], s["include_diagonal"],
                              s["normalise"], s["filter_order"], s["rind_units"], received)

    def reencode(self, lookahead):
        """The look-ahead's tokens fed alone (`received_attention`), once per look-ahead: its sentences
        are judged one after another."""
        if self._reencoded[0] is not lookahead:
            ids = lookahead.c.token_ids
            if ids is None:
                raise RuntimeError("attention_pass: reencoded needs the continuation's token ids (a white-box model)")
            self._reencoded = (lookahead, self.ctx.lm.received_attention(ids, -1))
        return self._reencoded[1]

    def build_query(self, state, lookahead, sentence, detection) -> str:
        s = self.settings
        whole = s.get("query_words") == "whole-sentence"
        return real_words_query(lookahead, detection.first_flagged_token(), state.example.question, state.text,
                                s["top_n"], punctuation=s["query_punctuation"] == "keep",
                                duplicates=s["query_duplicates"] == "keep",
                                sentence=(sentence.start, sentence.end) if whole else None,
                                flagged=[(detection.units[k].start, detection.units[k].end) for k in detection.flagged]
                                if whole else (), reweight=self.query_reweight())

    def query_reweight(self):
        """A factor per QFS candidate beside its attention (`real_words_query`'s `reweight`); DRAGIN has none."""
        return None
