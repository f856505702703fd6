"""DRAGIN's RIND trigger (Su et al. 2024, Eq. 2-4), shared by the `dragin` method and the `rind`
weighting of the SCAAR frame: RIND of token i = a_i * H_i * s_i, a_i the largest attention a later
generated token pays to i, H_i the entropy of the distribution i was drawn from, s_i = 0 for stop
words; the sentence fires if any token's RIND exceeds theta. The reference code's switches
(attention scope, diagonal, normalisation, filter order) are the arguments; `dragin.py` documents them.
"""

from __future__ import annotations

import numpy as np

from .attention import attention_matrix, attention_received
from .components import Detection
from .lookahead import LookAhead
from .text import real_words, stop_words

PAPER = {"attention_scope": "full", "include_diagonal": False, "normalise": False, "filter_order": "before"}


def rind_scores(received: np.ndarray, entropies: list[float], tokens: list[int], stop: list[bool],
                normalise: bool, filter_before: bool) -> list[float]:
    """RIND of each token of a sentence (`tokens` index the look-ahead; `stop[k]` for tokens[k])."""
    attention = np.array([received[t] for t in tokens], dtype=np.float64)
    if normalise and attention.sum() > 0:
        attention = attention / attention.sum() * len(tokens)
    scores = [float(a * entropies[t]) for a, t in zip(attention, tokens)]
    if filter_before:
        scores = [0.0 if s else score for score, s in zip(scores, stop)]
    return scores


def rind_detection(lookahead: LookAhead, sentence, theta: float, attention_scope: str = "full",
                   include_diagonal: bool = False, normalise: bool = False, filter_order: str = "before") -> Detection:
    """RIND over the sentence's tokens; the flagged tokens are those above theta (after the real-word
    filter with `filter_order: after`)."""
    units = lookahead.token_units(sentence)
    tokens = [u.tokens[0] for u in units]
    received = attention_received(attention_matrix(lookahead, attention_scope), include_diagonal)
    words = lookahead.word_units(sentence)
    stop_list = stop_words()

    def word_of(t: int):
        return next((w for w in words if t in w.tokens), None)

    stop = [(w := word_of(t)) is None or w.text.lower() in stop_list for t in tokens]
    scores = rind_scores(received, lookahead.c.entropies, tokens, stop, normalise, filter_order == "before")
    flagged = [k for k, v in enumerate(scores) if v > theta]
    if filter_order == "after" and flagged:
        real = [(sentence.start + w.start, sentence.start + w.end)
                for w in real_words(lookahead.text[sentence.start:sentence.end])]
        flagged = [k for k in flagged if any(a < units[k].end and b > units[k].start for a, b in real)]
    return Detection(bool(flagged), units, scores, flagged)
