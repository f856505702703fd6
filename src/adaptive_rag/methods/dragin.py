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
- `sentence_words: dragin-code`: the reference's own alignment of words to sentences
  (`AttnWeightRAG.modifier`, parts/dragin_code.py): words merged at the space and newline tokens, a
  sentence's words found by a substring test over the words joined with spaces, so a sentence with a
  newline inside is never scored and its words fall to the next sentence (`offsets`, the default,
  gives each sentence the words within its characters);
- `filter_order: after-firing`: the sentence fires when any word's score exceeds theta; only then are
  the flags of words that are not real words cleared (`modifier` tests `1 in thres` before
  `check_real_words`), so a sentence may fire with no word left flagged; the query then has no
  ranking (the reference's 0/0) and takes the first `top_n` candidates in text order;
- `query_words: dragin-code`: the query of `keep_real_words` (parts/dragin_code.py): the question,
  the text so far, the sentences before the fired one and its words, encoded again and ranked by that
  pass's attention from the flagged words;
- `token_pieces` (with `sentence_words: dragin-code`): the words' texts spelled as the reference's own
  tokenizer spells tokens (`llama`, the default: a newline as Llama's byte token "<0x0A>") or as their
  decoded text (`decoded`, this project's earlier reading) (parts/dragin_code.py);
and it keeps only the first regenerated sentence (`keep: first-sentence`). `attention_scope:
generated` (the generation pass's rows restricted to the generated tokens and renormalised) was this
project's stand-in for the re-encoded pass; it applies with `attention_pass: generation` only.
"""

from __future__ import annotations

from ..lm.base import ATTENTIONS, ENTROPY, Extras
from .parts.attention import SCOPES, real_words_query, reencoded_received
from .parts import dragin_code, joining
from .parts.components import Detection
from .parts.lookahead import Unit
from .parts.loop import TriggeredRetrieval
from .parts.rind import PAPER, UNITS, rind_detection
from .registry import register

PASSES = ("generation", "reencoded")
# The settings DRAGIN gained after runs were built, with the values that reproduce what it did before.
LATER = {"rind_units": "token", "attention_pass": "generation", "query_punctuation": "strip",
         "query_duplicates": "drop", "query_words": "until-flagged", "sentence_words": "offsets",
         "token_pieces": "decoded"}
QUERY_WORDS = ("until-flagged", "whole-sentence", "dragin-code")
SENTENCE_WORDS = ("offsets", "dragin-code")
FILTER_ORDERS = ("before", "after", "after-firing")
REFERENCES = {
    "paper": {**PAPER, **LATER, "keep": "all"},
    "dragin-code": {"attention_scope": "generated", "include_diagonal": True, "normalise": True,
                    "filter_order": "after", "keep": "first-sentence", "rind_units": "word",
                    "attention_pass": "reencoded", "query_punctuation": "keep", "query_duplicates": "keep",
                    "query_words": "until-flagged", "sentence_words": "offsets"},
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
        settings = {
            **cls.read_common(section, keep=defaults["keep"]),
            "reference": reference,
            "theta": section.float("theta", 1.0, minimum=0.0),
            "top_n": section.int("top_n", 35, minimum=1),
            "attention_scope": section.str("attention_scope", defaults["attention_scope"], SCOPES),
            "include_diagonal": section.bool("include_diagonal", defaults["include_diagonal"]),
            "normalise": section.bool("normalise", defaults["normalise"]),
            "filter_order": section.str("filter_order", defaults["filter_order"], FILTER_ORDERS),
            "rind_units": section.str("rind_units", defaults["rind_units"], UNITS),
            "attention_pass": section.str("attention_pass", defaults["attention_pass"], PASSES),
            "query_punctuation": section.str("query_punctuation", defaults["query_punctuation"], ("strip", "keep")),
            "query_duplicates": section.str("query_duplicates", defaults["query_duplicates"], ("drop", "keep")),
            "query_words": section.str("query_words", defaults["query_words"], QUERY_WORDS),
            "sentence_words": section.str("sentence_words", defaults.get("sentence_words", "offsets"), SENTENCE_WORDS),
        }
        if settings["filter_order"] == "after-firing" and settings["query_words"] == "until-flagged":
            raise section.fail("filter_order", "after-firing lets a sentence fire with no word left flagged, which "
                                               "query_words: until-flagged cannot query from; set query_words: "
                                               "whole-sentence or dragin-code")
        if settings["query_words"] == "dragin-code" and settings["sentence_words"] != "dragin-code":
            raise section.fail("query_words", "dragin-code reads the fired sentence's words as the reference "
                                              "aligns them; set sentence_words: dragin-code too")
        if settings["sentence_words"] == "dragin-code":
            wrong = {k: v for k, v in (("filter_order", "before"), ("rind_units", "token"),
                                       ("attention_pass", "generation")) if settings[k] == v}
            if wrong:
                key = next(iter(wrong))
                raise section.fail(key, f"sentence_words: dragin-code scores the reference's words from its "
                                        f"re-encoded pass after its filter; {key}: {wrong[key]} does not apply there")
            settings["token_pieces"] = section.str("token_pieces", dragin_code.TOKEN_PIECES[0],
                                                   dragin_code.TOKEN_PIECES)
        elif "token_pieces" in section.data and not cls.reads_token_pieces(section):
            raise section.fail("token_pieces", "only sentence_words: dragin-code reads the reference's token pieces")
        return settings

    @classmethod
    def reads_token_pieces(cls, section) -> bool:
        """Whether settings other than `sentence_words: dragin-code` read token pieces (RaDIO's filter)."""
        return False

    def extras(self) -> Extras:
        return Extras(entropy=True, attention_layer=-1)

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self._reencoded: tuple = (None, None)  # (look-ahead, its re-encoded attention): one pass per look-ahead
        self._words: tuple = (None, None)  # (look-ahead, its reference words): `sentence_words: dragin-code`

    def detect(self, state, lookahead, sentence) -> Detection:
        s = self.settings
        if s.get("sentence_words") == "dragin-code":
            return self.reference_detection(lookahead, sentence)
        received = None
        if s["attention_pass"] == "reencoded":
            received = reencoded_received(self.reencode(lookahead), s["include_diagonal"])
        return rind_detection(lookahead, sentence, s["theta"], s["attention_scope"], s["include_diagonal"],
                              s["normalise"], s["filter_order"], s["rind_units"], received,
                              self.word_filter(lookahead, sentence))

    def word_filter(self, lookahead, sentence):
        """The real-word filter `rind_detection` applies (None: its own, real words overlapping a unit)."""
        return None

    def reencode(self, lookahead):
        """The look-ahead's tokens fed alone (`received_attention`), once per look-ahead: its sentences
        are judged one after another."""
        if self._reencoded[0] is not lookahead:
            ids = lookahead.c.token_ids
            if ids is None:
                raise RuntimeError("attention_pass: reencoded needs the continuation's token ids (a white-box model)")
            self._reencoded = (lookahead, self.ctx.lm.received_attention(ids, -1))
        return self._reencoded[1]

    def reference_words(self, lookahead) -> tuple[list[list[int]], list[str], list[tuple[int, int]]]:
        """The look-ahead's words, their texts and each sentence's word range, as `modifier` has them."""
        if self._words[0] is not lookahead:
            tokenizer = self.tokenizer()
            texts = [tokenizer.decode([i]) for i in lookahead.c.token_ids]
            groups = dragin_code.merged_words(texts, lookahead.c.token_ids, self.newline_id())
            words = [dragin_code.word_text(texts, g, self.settings["token_pieces"]) for g in groups]
            ranges = dragin_code.sentence_ranges([x.text for x in lookahead.sentences], words)
            self._words = (lookahead, (groups, words, ranges))
        return self._words[1]

    def reference_detection(self, lookahead, sentence) -> Detection:
        groups, words, ranges = self.reference_words(lookahead)
        index = lookahead.sentences.index(sentence)
        start, end = ranges[index] if index < len(ranges) else (0, 0)
        received = reencoded_received(self.reencode(lookahead), self.settings["include_diagonal"])
        entropies = lookahead.c.entropies
        attention = [sum(float(received[t]) for t in g) for g in groups]
        entropy = [sum(entropies[t] for t in g) / len(g) for g in groups]
        units = []
        for g in groups[start:end]:
            first, last = lookahead.spans[g[0]], lookahead.spans[g[-1]]
            units.append(Unit(dragin_code.word_text(lookahead.c.tokens, g, self.settings["token_pieces"]), first[0],
                              last[1], tuple(g)))
        if start == end:
            return Detection(False, units, [], [])
        scores = dragin_code.range_scores(attention, entropy, start, end)
        over = [k for k, v in enumerate(scores) if v > self.settings["theta"]]
        flagged = dragin_code.real_word_filter(sentence.text, words[start:end], over)
        fire = bool(over) if self.settings["filter_order"] == "after-firing" else bool(flagged)
        return Detection(fire, units, scores, flagged, extra={"words": [start, end]})

    def tokenizer(self):
        tokenizer = getattr(self.ctx.lm, "tokenizer", None)
        if tokenizer is None:
            from ..errors import ConfigError

            raise ConfigError("sentence_words/query_words: dragin-code read the model's tokenizer, which this "
                              "backend does not give (the hf backend does)")
        return tokenizer

    def newline_id(self) -> int | None:
        """The tokenizer's newline token (the reference compares ids with Llama's 13), looked up once."""
        if not hasattr(self, "_newline"):
            tokenizer = self.tokenizer()
            ids = tokenizer.encode("\n", add_special_tokens=False)
            self._newline = next((i for i in reversed(ids) if tokenizer.decode([i]) == "\n"), None)
        return self._newline

    def reference_query(self, state, lookahead, sentence, detection) -> str:
        """`keep_real_words` over `question + " " + text + " " + ptext + " " + curr_text`."""
        groups, words, ranges = self.reference_words(lookahead)
        index = lookahead.sentences.index(sentence)
        start, end = ranges[index]
        ptext = joining.text_before(lookahead.sentences, index)
        text = state.example.question + " " + state.text + " " + ptext + " " + " ".join(words[start:end])
        tokenizer = self.tokenizer()
        ids = tokenizer.encode(text)
        texts = [tokenizer.decode([i]) for i in ids]
        encoded = dragin_code.merged_words(texts, ids, self.newline_id())
        attention = dragin_code.word_attention(self.ctx.lm.attention_matrix(ids, -1), encoded)
        hit = [k in set(detection.flagged) for k in range(end - start)]
        pieces = self.settings["token_pieces"]
        return dragin_code.reference_query([dragin_code.word_text(texts, g, pieces) for g in encoded], attention,
                                           end - start, hit, text, self.settings["top_n"])

    def build_query(self, state, lookahead, sentence, detection) -> str:
        s = self.settings
        if s.get("query_words") == "dragin-code":
            return self.reference_query(state, lookahead, sentence, detection)
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
