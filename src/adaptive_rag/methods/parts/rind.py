"""DRAGIN's RIND trigger (Su et al. 2024, Eq. 2-4), shared by the `dragin` method and the `rind`
weighting of the SCAAR frame: RIND of token i = a_i * H_i * s_i, a_i the largest attention a later
generated token pays to i, H_i the entropy of the distribution i was drawn from, s_i = 0 for stop
words; the sentence fires if any token's RIND exceeds theta. The reference code's switches
(attention scope, diagonal, normalisation, filter order, word units, attention from a re-encoded
pass) are the arguments; `dragin.py` documents them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .attention import attention_matrix, attention_received
from .components import Detection
from .lookahead import LookAhead
from .text import real_words, stop_words, words

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


UNITS = ("token", "word")


def rind_detection(lookahead: LookAhead, sentence, theta: float, attention_scope: str = "full",
                   include_diagonal: bool = False, normalise: bool = False, filter_order: str = "before",
                   units: str = "token", received: np.ndarray | None = None,
                   word_filter: Callable[[list, list[int]], list[int]] | None = None) -> Detection:
    """RIND over the sentence's tokens, or (`units: word`) over its whitespace-delimited words, each
    scored with the sum of its tokens' attention and the mean of their entropies (the reference
    code's merge); the flagged units are those above theta (after the real-word filter with
    `filter_order: after`, or firing before it with `after-firing`). `received` replaces the generation pass's per-token attention (a_i) by
    one computed elsewhere (a re-encoded pass). `word_filter(units, over)` replaces the real-word filter
    (by default: a unit overlapping a real word of the sentence keeps its flag)."""
    if received is None:
        received = attention_received(attention_matrix(lookahead, attention_scope), include_diagonal)
    stop_list = stop_words()
    entropies = lookahead.c.entropies
    if units == "word":
        found = lookahead.space_words(sentence)
        attention = np.array([sum(float(received[t]) for t in u.tokens) for u in found], dtype=np.float64)
        entropies = [sum(entropies[t] for t in u.tokens) / len(u.tokens) for u in found]
        stop = [all(w.text.lower() in stop_list for w in words(u.text)) for u in found]
        indices = list(range(len(found)))
    else:
        found = lookahead.token_units(sentence)
        attention, indices = received, [u.tokens[0] for u in found]
        text_words = lookahead.word_units(sentence)

        def word_of(t: int):
            return next((w for w in text_words if t in w.tokens), None)

        stop = [(w := word_of(t)) is None or w.text.lower() in stop_list for t in indices]
    scores = rind_scores(attention, entropies, indices, stop, normalise, filter_order == "before")
    over = [k for k, v in enumerate(scores) if v > theta]
    flagged = over
    if filter_order in ("after", "after-firing") and over and word_filter is not None:
        flagged = word_filter(found, over)
    elif filter_order in ("after", "after-firing") and over:
        real = [(sentence.start + w.start, sentence.start + w.end)
                for w in real_words(lookahead.text[sentence.start:sentence.end])]
        flagged = [k for k in over if any(a < found[k].end and b > found[k].start for a, b in real)]
    # `after-firing`: the reference code's order, the sentence fires on any unit over theta, the filter
    # then clears flags only
    return Detection(bool(over) if filter_order == "after-firing" else bool(flagged), found, scores, flagged)
