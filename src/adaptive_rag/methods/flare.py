"""FLARE: retrieve when the look-ahead sentence has low-confidence tokens; query with the sentence,
the low-confidence parts masked out.

`variant: paper` (Jiang et al. 2023): fire if any unit's probability is below `theta` (0.8); the
query drops units whose probability is below `mask_theta` (0.4).
`variant: dragin-code` (DRAGIN's re-implementation): fire if the sentence's mean of (1 - p) exceeds
`theta` (0.06-0.4 in its configs); the query drops the units whose (1 - p) exceeds `theta`.
`granularity: token | word`: units are tokens, or words whose probability is the geometric mean of
their tokens' (how SCAAR evaluates FLARE). Needs only token probabilities: runs on black-box models.
"""

from __future__ import annotations

from statistics import mean

from .registry import register
from .parts.components import Detection, masked_sentence
from .parts.lookahead import probability
from .parts.loop import TriggeredRetrieval

VARIANTS = ("paper", "dragin-code")
DEFAULT_THETA = {"paper": 0.8, "dragin-code": 0.2}


@register("flare")
class FLARE(TriggeredRetrieval):
    when = "`variant: paper`: any token (or word) of the look-ahead sentence with p < `theta`; `variant: dragin-code`: the sentence's mean of 1 − p > `theta`"
    what = 'the sentence with low-confidence units masked (p < `mask_theta`; dragin-code: 1 − p > `theta`)'
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
        return settings

    def detect(self, state, lookahead, sentence) -> Detection:
        units = lookahead.units(sentence, self.settings["granularity"])
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
        return masked_sentence(sentence.text, sentence.start, detection.units, masked)
