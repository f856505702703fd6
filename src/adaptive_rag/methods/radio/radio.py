"""RaDIO (Zhu et al., AAAI 2025), as its released code runs it (github ghh1125/RaDIO; docs/radio.md).

`src/main.py` runs `AttnWeightRAG` of `src/generate.py` with `method: dragin` and `query_formulation:
real_words` (every config/Llama2-7b-chat/*/RaDIO.json): the DRAGIN code base with three changes.
- Detection: RIND per *token* (`generate_attn` merges no tokens into words), from a re-encoded pass,
  normalised over the span, firing on any token over the threshold and then clearing the flags of tokens
  that are not real words (`filter_order: after-firing`), as DRAGIN's code does; or the
  MLP detector (`detector.py`: fires when a token's score is above the look-ahead's mean and at most 0.5).
- The real-word filter (`real_word_match: token-piece`, `AttnWeightRAG.modifier`'s `check_real_words`
  block and its `match`): the real words (POS NOUN, ADJ, VERB, PROPN, NUM) of the fired sentence alone,
  parsed on its own (`nlp(sent)`; with `rind_span: lookahead` the look-ahead's last sentence), and a
  flagged token keeps its flag only where one of them is a substring of the token's piece
  (`tokens[tl + i]`: the token as `convert_ids_to_tokens` spells it, the space marker removed; a newline
  as Llama's "<0x0A>", `token_pieces`), so the pieces of a word cut into several tokens mostly lose
  their flags. `overlap` keeps every flagged token that overlaps a real word of the judged span
  (this project's earlier reading).
- The span RIND judges (`rind_span: lookahead`): `AttnWeightRAG.modifier` finds a sentence's tokens by
  looking for the sentence in the tokens joined with spaces; unmerged tokens joined with spaces never
  spell a sentence that ends in a full stop ("1720 ." is not "1720."), so every sentence but the last
  gets no tokens and the last gets all of them: RIND judges the whole look-ahead, and a firing is at
  its last sentence. `rind_span: sentence` judges each sentence on its own tokens (DRAGIN here).
- What is kept before the fired sentence (`ptext: drop-previous`): `" ".join(sentences[:sid - 1])`,
  i.e. without the sentence just before it (DRAGIN's current code keeps `sentences[:sid]`:
  `ptext: before-fired`).
- The query (`query_weights: attention-tfidf-similarity`): DRAGIN's real words of the whole fired span
  but the flagged ones, each word's attention times a TF-IDF and a similarity term (`query.py`);
  `query_weights: attention` is DRAGIN's ranking.
- Retrieval: `BasicRAG.retrieve` searches SBERT with top-1 whatever `retrieve_topk` says (top_k: 1).

When the detector fires and RIND does not, the reference calls `keep_real_words` with no current tokens
and stops with a TypeError: no query is defined for that case. `detector_alone: keep` goes on as if the
detector had not fired (every answer the reference code completes is unchanged by it) and records the
event in the trace; `detector_alone: error` stops as the reference does, naming the question.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from ..dragin import DRAGIN, REFERENCES
from ..parts import dragin_code
from ..parts.components import Detection
from ..parts.setup import Own, basic_setup
from ..parts.text import Span, real_words
from ..registry import register
from .detector import RADIO_DETECTOR, fires, load, space_marker, token_features
from .query import radio_factors

# src/generate.py AttnWeightRAG: DRAGIN's code settings, RIND per token (no merge into words), the whole
# current span's real words for the query.
# `modifier` declares a hallucination on any token over the threshold (`if 1 in thres`) before its real-word
# filter clears flags: `filter_order: after-firing`.
RADIO_CODE = {**REFERENCES["dragin-code"], "rind_units": "token", "query_words": "whole-sentence",
              "filter_order": "after-firing"}
SPANS = ("lookahead", "sentence")
PTEXT = ("drop-previous", "before-fired")
QUERY_WEIGHTS = ("attention-tfidf-similarity", "attention")
DETECTOR_ALONE = ("keep", "error")
REAL_WORD_MATCH = ("token-piece", "overlap")


@register("radio")
class RaDIO(DRAGIN):
    when = ('RIND per token over the look-ahead (> `theta`), or the MLP detector: a token score above the '
            'look-ahead\'s mean and <= 0.5')
    what = ('the `top_n` real words of question + answer so far, ranked by attention x TF-IDF x mean '
            'word-vector similarity')

    later_settings = {**DRAGIN.later_settings, "real_word_match": "overlap"}

    @classmethod
    def read_settings(cls, section):
        settings = cls.read_rind_qfs(section, "radio-code", RADIO_CODE)
        match = section.str("real_word_match", REAL_WORD_MATCH[0], REAL_WORD_MATCH)
        if match == "token-piece" and (settings["rind_units"] != "token" or settings["filter_order"] == "before"):
            key = "rind_units" if settings["rind_units"] != "token" else "filter_order"
            raise section.fail(key, f"real_word_match: token-piece filters per-token flags after thresholding, as "
                                    f"the code; {key}: {settings[key]} has none to filter (or set real_word_match: "
                                    f"overlap)")
        if match == "token-piece":
            settings["token_pieces"] = section.str("token_pieces", dragin_code.TOKEN_PIECES[0],
                                                   dragin_code.TOKEN_PIECES)
        return {
            **settings,
            "real_word_match": match,
            "top_k": section.int("top_k", 1, minimum=1),  # BasicRAG.retrieve: SBERT's topk is forced to 1
            "rind_span": section.str("rind_span", SPANS[0], SPANS),
            "ptext": section.str("ptext", PTEXT[0], PTEXT),
            "query_weights": section.str("query_weights", QUERY_WEIGHTS[0], QUERY_WEIGHTS),
            "detector": section.str("detector", RADIO_DETECTOR),
            "detector_alone": section.str("detector_alone", DETECTOR_ALONE[0], DETECTOR_ALONE),
        }

    trained_inputs = {"detector": (RADIO_DETECTOR, "detectors.radio")}

    @classmethod
    def inputs(cls, settings, dataset, method) -> dict[str, str]:
        """The trained detector: the workflow builds it before the run (`train_radio_detector`)."""
        return {"detector": settings["detector"]}

    def __init__(self, settings, context):
        super().__init__(settings, context)
        self._detector = None
        self._unfired: dict[int, dict] = {}  # id(question state) -> the detector's record of its last look-ahead

    def detector(self):
        """The trained MLP (loaded once), refused if it was trained for another model."""
        if self._detector is None:
            path = Path(self.ctx.inputs.get("detector") or self.settings["detector"])
            self._detector = load(path, model=self.ctx.lm.identity().get("model"))
        return self._detector

    def detector_scores(self, lookahead) -> list[float]:
        """The MLP's score of each token of the look-ahead (`generate_attn`)."""
        lm, ids = self.ctx.lm, lookahead.c.token_ids
        tokenizer = getattr(lm, "tokenizer", None)
        if tokenizer is None or ids is None:
            raise InputError("radio: the detector reads the look-ahead's token ids with the model's tokenizer, "
                             "which only model.backend: hf gives")
        model_type = getattr(getattr(getattr(lm, "model", None), "config", None), "model_type", None)
        pieces = tokenizer.convert_ids_to_tokens(list(ids))
        return self.detector().scores(token_features(tokenizer, pieces, space_marker(tokenizer, model_type)))

    def detect(self, state, lookahead, sentence) -> Detection:
        s = self.settings
        last = sentence == lookahead.sentences[-1]
        if s["rind_span"] == "lookahead":
            if not last:
                return Detection(False, [], [], [], extra={"rind_span": "lookahead"})
            sentence = Span(0, len(lookahead.text), lookahead.text)
        detection = super().detect(state, lookahead, sentence)
        if detection.fire or not last:
            return detection
        scores = self.detector_scores(lookahead)
        alone = fires(scores)
        detection.extra["detector"] = record = {"scores": [round(v, 4) for v in scores], "fires": alone}
        self._unfired[id(state)] = {"detector": record}
        if alone and s["detector_alone"] == "error":
            raise InputError(f"radio: question {state.example.id!r}: the detector fired where RIND did not; the "
                             f"reference code has no query for this case (keep_real_words gets no current tokens); "
                             f"set detector_alone: keep to go on without retrieving")
        return detection

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """The code searches SBERT and keeps its first passage (`BasicRAG.retrieve` forces top-1)."""
        setup = basic_setup(cls, settings)
        if settings["top_k"] == 1:
            setup["multi"]["top_k"] = Own(1, "RaDIO's code retrieves SBERT's top-1 whatever retrieve_topk says")
        if settings.get("retriever") == "dense:sbert":
            setup["multi"]["retriever"] = Own("dense:sbert", "RaDIO's code searches SBERT")
        return setup

    @classmethod
    def reads_token_pieces(cls, section) -> bool:
        return section.data.get("real_word_match", REAL_WORD_MATCH[0]) == "token-piece"

    def word_filter(self, lookahead, sentence):
        """`real_word_match: token-piece`: `modifier`'s `match` over the fired sentence's real words."""
        if self.settings["real_word_match"] != "token-piece":
            return None
        fired = lookahead.sentences[-1] if self.settings["rind_span"] == "lookahead" else sentence
        real = {w.text for w in real_words(fired.text)}
        tokens, pieces = lookahead.c.tokens, self.settings["token_pieces"]
        return lambda units, over: token_piece_filter(real, [dragin_code.word_text(tokens, [units[k].tokens[0]], pieces)
                                                             for k in range(len(units))], over)

    def unfired_record(self, state) -> dict:
        return self._unfired.pop(id(state), {})

    def sentences_kept(self, index: int) -> int:
        return max(index - 1, 0) if self.settings["ptext"] == "drop-previous" else index

    def query_reweight(self):
        return radio_factors if self.settings["query_weights"] == "attention-tfidf-similarity" else None


def token_piece_filter(real: set[str], pieces: list[str], over: list[int]) -> list[int]:
    """The flagged units (indices into `pieces`) whose piece holds one of the `real` words as a substring:
    `AttnWeightRAG.modifier`'s `match(tokens[tl + i])` (RaDIO's src/generate.py)."""
    return [k for k in over if any(word in pieces[k] for word in real)]
