"""FLARE: retrieve when the look-ahead sentence has low-confidence tokens; query with the sentence,
the low-confidence parts masked out.

`variant: paper` (Jiang et al. 2023): fire if any unit's probability is below `theta` (0.8); the
query drops units whose probability is below `mask_theta` (0.4).
`variant: dragin-code` (DRAGIN's re-implementation): fire if the sentence's mean of (1 - p) exceeds
`theta` (0.06-0.4 in its configs); the query drops the units whose (1 - p) exceeds `theta`.
`granularity: token | word`: units are tokens, or words whose probability is the geometric mean of
their tokens' (how SCAAR evaluates FLARE). Needs only token probabilities: runs on black-box models.

Two more switches reproduce the DRAGIN reference's FLARE (github oneal2000/DRAGIN, src/generate.py
`TokenRAG.modifier`), whose token alignment differs from this project's:
- `score_range: dragin-code`: a sentence's score reads the tokens the reference's alignment gives it:
  from where the previous sentence's range ended plus one, as long as each next token's text is found
  in the sentence (searched from an offset the reference computes relative to its last find), and one
  token past that; `sentence` (the default) reads the tokens that sit in the sentence. Token texts
  are compared as the reference's per-token decode of its SentencePiece model writes them
  (`token_pieces: llama`, the default with this switch: one leading space dropped, a newline kept;
  `decoded`: every leading whitespace character dropped, as this project did before; parts/dragin_code.py);
- `masking: dragin-code`: the query is the sentence with each masked unit's first occurrence after
  the previous one replaced by nothing, the rest of the text left as it is (spaces included);
  `project` (the default) cuts the unit's span out and collapses whitespace.
"""

from __future__ import annotations

from statistics import mean

from .registry import register
from .parts.components import Detection, masked_sentence
from .parts.dragin_code import TOKEN_PIECES, decoded_piece
from .parts.lookahead import Unit, probability
from .parts.loop import TriggeredRetrieval

VARIANTS = ("paper", "dragin-code")
DEFAULT_THETA = {"paper": 0.8, "dragin-code": 0.2}
SCORE_RANGES = ("sentence", "dragin-code")
MASKINGS = ("project", "dragin-code")


def reference_token_ranges(sentences: list[str], tokens: list[str]) -> list[tuple[int, int]]:
    """Per sentence, the first and last index of the tokens `TokenRAG.modifier` scores it with
    (`logprobs[tid:tr+1]`; the last may lie past the end, so a range can be empty): tokens are taken
    while each is found in the sentence from `pos`, which is set to the find's offset *within the
    searched suffix* plus the token's length; the next sentence starts one token past `tr`."""
    ranges, tid = [], 0
    for sentence in sentences:
        pos, tr = 0, tid
        while tr < len(tokens):
            found = sentence[pos:].find(tokens[tr])
            if found == -1:
                break
            pos = found + len(tokens[tr])
            tr += 1
        ranges.append((tid, tr))
        tid = tr + 1
    return ranges


def reference_masked(sentence: str, units: list[str], masked: list[bool]) -> str:
    """`TokenRAG.modifier`'s masking and `inference`'s query: each unit in turn is looked for from the
    end of the previous one (a unit not found sits one character before it, as `find` returns -1), a
    masked one replaced by "[xxx]"; then every "[xxx]" is removed."""
    pos = 0
    for text, mask in zip(units, masked):
        at = sentence[pos:].find(text) + pos
        if mask:
            sentence = sentence[:at] + "[xxx]" + sentence[at + len(text):]
            pos = at + len("[xxx]")
        else:
            pos = at + len(text)
    return sentence.replace("[xxx]", "")


@register("flare")
class FLARE(TriggeredRetrieval):
    when = "`variant: paper`: any token (or word) of the look-ahead sentence with p < `theta`; `variant: dragin-code`: the sentence's mean of 1 − p > `theta`"
    what = 'the sentence with low-confidence units masked (p < `mask_theta`; dragin-code: 1 − p > `theta`)'
    later_settings = {**TriggeredRetrieval.later_settings, "score_range": "sentence", "masking": "project",
                      "token_pieces": "decoded"}

    @classmethod
    def read_settings(cls, section):
        variant = section.str("variant", "paper", VARIANTS)
        settings = {
            **cls.read_common(section, keep="first-sentence"),  # FLARE regenerates the sentence
            "variant": variant,
            "granularity": section.str("granularity", "token", ("token", "word")),
            # a probability in `paper` (retrieve "if the confidence of any token is lower than a preset
            # threshold", as SCAAR's §2 restates FLARE), a mean of 1 - p in `dragin-code`: in [0, 1] either way
            "theta": section.float("theta", DEFAULT_THETA[variant], minimum=0.0, maximum=1.0),
        }
        if variant == "paper":
            settings["mask_theta"] = section.float("mask_theta", 0.4, minimum=0.0, maximum=1.0)
        # only the keys params give, as the loop rules (settings read without them are what they were)
        for key, choices in (("score_range", SCORE_RANGES), ("masking", MASKINGS)):
            if key in section.data:
                settings[key] = section.str(key, choices=choices)
        if settings.get("score_range") == "dragin-code" and settings["granularity"] != "token":
            raise section.fail("score_range", "dragin-code scores tokens, as the reference; set granularity: token")
        if settings.get("score_range") == "dragin-code":
            settings["token_pieces"] = section.str("token_pieces", TOKEN_PIECES[0], TOKEN_PIECES)
        elif "token_pieces" in section.data:
            raise section.fail("token_pieces", "only score_range: dragin-code reads the reference's token pieces")
        return settings

    def units(self, lookahead, sentence) -> list[Unit]:
        """The units a sentence is scored on: its tokens or words, or the reference's token range."""
        if self.settings.get("score_range", "sentence") == "sentence":
            return lookahead.units(sentence, self.settings["granularity"])
        tokens = [decoded_piece(t, self.settings["token_pieces"]) for t in lookahead.c.tokens]
        ranges = reference_token_ranges([s.text for s in lookahead.sentences], tokens)
        first, last = ranges[lookahead.sentences.index(sentence)]
        return [Unit(tokens[i], lookahead.spans[i][1] - len(tokens[i]), lookahead.spans[i][1], (i,))
                for i in range(first, min(last + 1, len(tokens)))]

    def detect(self, state, lookahead, sentence) -> Detection:
        units = self.units(lookahead, sentence)
        probs = [probability(lookahead.c.logprobs, u) for u in units]
        theta = self.settings["theta"]
        if self.settings["variant"] == "paper":
            flagged = [k for k, p in enumerate(probs) if p < theta]
            return Detection(bool(flagged), units, probs, flagged)
        doubt = [1.0 - p for p in probs]
        flagged = [k for k, d in enumerate(doubt) if d > theta]
        fire = bool(doubt) and mean(doubt) > theta
        return Detection(fire, units, doubt, flagged, extra={"mean_doubt": round(mean(doubt), 4) if doubt else None})

    def build_query(self, state, lookahead, sentence, detection) -> str:
        if self.settings["variant"] == "paper":
            masked = [k for k, p in enumerate(detection.scores) if p < self.settings["mask_theta"]]
        else:
            masked = detection.flagged
        if self.settings.get("masking", "project") == "dragin-code":
            return reference_masked(sentence.text, [u.text for u in detection.units],
                                    [k in set(masked) for k in range(len(detection.units))])
        return masked_sentence(sentence.text, sentence.start, detection.units, masked)
