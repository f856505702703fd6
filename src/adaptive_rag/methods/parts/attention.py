"""Attention-derived signals (white-box): how much later tokens attend to a token (DRAGIN's a_i), and
the query of DRAGIN's QFS: the context's real words ranked by the attention a hallucinated token pays.

`Continuation.attentions[j]` is generated token j's head-averaged attention row (last layer) over the
prompt, the tokens generated before it and itself; generated token i sits at column prompt_tokens + i.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .lookahead import LookAhead, token_spans
from .text import real_words

SCOPES = ("full", "generated")


def attention_matrix(lookahead: LookAhead, scope: str = "full") -> np.ndarray:
    """[n, n] attention of each generated token (row, as query) to each generated token (column).

    scope `full`: the rows as the model computed them over prompt + generation (the paper);
    `generated`: each row restricted to the generated tokens and renormalised to sum to one, the
    reference code's "attention over the generated tokens only" (it re-encodes the generated text on
    its own; renormalising the generation pass's rows is our stand-in and is not bit-identical).
    """
    c = lookahead.c
    n, offset = len(c.attentions), c.prompt_tokens
    matrix = np.zeros((n, n), dtype=np.float64)
    for j, row in enumerate(c.attentions):
        generated = np.asarray(row[offset:offset + j + 1], dtype=np.float64)
        if scope == "generated":
            total = generated.sum()
            generated = generated / total if total > 0 else generated
        matrix[j, :j + 1] = generated
    return matrix


def attention_received(matrix: np.ndarray, diagonal: bool = False) -> np.ndarray:
    """a_i = max over later tokens j > i of A[j, i] (j >= i with the diagonal, as the reference code)."""
    n = matrix.shape[0]
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        column = matrix[i if diagonal else i + 1:, i]
        out[i] = column.max() if column.size else 0.0
    return out


def reencoded_received(planes: np.ndarray, diagonal: bool = False) -> np.ndarray:
    """a_i from a re-encoded pass (`received_attention`'s [2, heads, n]): each head's largest attention
    from a later token (or the token itself, with the diagonal), then the mean over heads: the
    reference code's order, where the generation pass can only give the head mean's maximum."""
    planes = np.asarray(planes, dtype=np.float64)
    per_head = np.maximum(planes[0], planes[1]) if diagonal else planes[0]
    return per_head.mean(axis=0) if per_head.size else np.zeros(per_head.shape[-1], dtype=np.float64)


def real_words_query(lookahead: LookAhead, token: int | None, question: str, answer_so_far: str, top_n: int,
                     punctuation: bool = False, duplicates: bool = False,
                     sentence: tuple[int, int] | None = None, flagged: Sequence[tuple[int, int]] = (),
                     reweight: Callable[[str, list[tuple[int, int]], list[tuple[int, int]]], list[float]] | None = None
                     ) -> str:
    """DRAGIN's QFS: the top-n real words (NOUN, ADJ, VERB, PROPN, NUM) of the question, the answer so
    far and the generated text before `token`, ranked by the attention `token` pays to them, joined in
    their original order (a word repeated keeps its best-attended occurrence).

    The reference code's query differs in two ways, each a switch: `punctuation` keeps a word's
    punctuation, i.e. a real word is taken as the whitespace-delimited chunk it sits in ("1720.",
    "(Film)"; several real words in one chunk make one entry), and `duplicates` ranks every occurrence
    of a word on its own, so a repeated word can appear more than once.

    `sentence` (the fired sentence's character span in the look-ahead, `query_words: whole-sentence`)
    takes the generated text up to the sentence's end instead of up to `token`, without the words that
    overlap a `flagged` span: the DRAGIN reference's src/generate.py `AttnWeightRAG.keep_real_words`
    ranks every real word of the question, the text so far and the whole current sentence except the
    hallucinated ones. A word after `token` gets no attention from it (a token attends only to what
    precedes it), so it ranks after every attended word, in its position's order. Without a flagged
    `token` (None, with `sentence`), no word is attended: the first `top_n` candidates in text order.

    `reweight(virtual, regions, spans)` multiplies each candidate's attention by a factor of its own
    (RaDIO's TF-IDF and similarity terms): it gets the virtual text, the regions read from it (question,
    answer so far, generated text) and each candidate's character span, and returns one factor per
    candidate."""
    c = lookahead.c
    if token is None and sentence is None:
        raise ValueError("real_words_query: a query without a flagged token needs the whole sentence")
    # no flagged token (`filter_order: after-firing`): no ranking, as the reference's 0/0 attention leaves
    # its candidates in text order, so every weight is 0 and the first `top_n` are taken
    row = np.asarray(c.attentions[token], dtype=np.float64) if token is not None else np.zeros(0)
    prompt_tokens = list(c.meta.get("prompt_tokens") or [])
    prompt_text = "".join(prompt_tokens)
    # One virtual text: the prompt's own (non-shared) tokens, then the generated tokens before `token`.
    generated = token if sentence is None else len(c.tokens)
    tokens = prompt_tokens + list(c.tokens[:generated])
    columns = [c.prompt_tokens - len(prompt_tokens) + k for k in range(len(prompt_tokens))] + \
              [c.prompt_tokens + i for i in range(generated)]
    spans = token_spans(tokens)
    regions = []
    q_at = prompt_text.rfind(question) if question else -1
    if q_at >= 0:
        regions.append((q_at, q_at + len(question)))
    prefix = answer_so_far.strip()
    if prefix and prompt_text.rstrip().endswith(prefix):
        end = len(prompt_text.rstrip())
        regions.append((end - len(prefix), end))
    virtual = prompt_text + "".join(c.tokens[:generated])
    excluded = [(len(prompt_text) + a, len(prompt_text) + b) for a, b in flagged]
    if sentence is None:
        cut = len(virtual)
        continues_word = token < len(c.tokens) and c.tokens[token][:1].isalnum()
        while continues_word and cut > len(prompt_text) and virtual[cut - 1].isalnum():  # drop the word's start
            cut -= 1
    else:  # the sentence may end in an end-of-turn text the continuation has no token for (`end_of_turn: keep`)
        cut = min(len(virtual), len(prompt_text) + sentence[1])
    regions.append((len(prompt_text), cut))
    scored, seen = [], set()
    for start, end in regions:
        for word in real_words(virtual[start:end]):
            a, b = start + word.start, start + word.end
            if any(a < e and b > s for s, e in excluded):
                continue
            if punctuation:
                a, b = _chunk(virtual, a, b, start, end)
                if a in seen:  # a second real word of the same chunk
                    continue
                seen.add(a)
            weight = sum(row[columns[k]] for k, (s, e) in enumerate(spans) if s < b and e > a and columns[k] < len(row))
            scored.append((weight, a, virtual[a:b]))
    if reweight is not None and scored:
        factors = reweight(virtual, regions, [(a, a + len(text)) for _, a, text in scored])
        scored = [(weight * factor, a, text) for (weight, a, text), factor in zip(scored, factors)]
    if duplicates:
        candidates = scored
    else:
        best: dict[str, tuple[float, int, str]] = {}
        for weight, position, text in scored:
            key = text.lower()
            if key not in best or weight > best[key][0]:
                best[key] = (weight, position, text)
        candidates = list(best.values())
    chosen = sorted(candidates, key=lambda t: (-t[0], t[1]))[:top_n]
    return " ".join(text for _, _, text in sorted(chosen, key=lambda t: t[1]))


def _chunk(text: str, a: int, b: int, lo: int, hi: int) -> tuple[int, int]:
    """The whitespace-delimited chunk of `text[lo:hi]` holding the span [a, b)."""
    while a > lo and not text[a - 1].isspace():
        a -= 1
    while b < hi and not text[b].isspace():
        b += 1
    return a, b
