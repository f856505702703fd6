"""A generated continuation seen as sentences, and each sentence as tokens or words.

Everything is in character offsets into the continuation's text. Tokens are the backend's token
texts (they join to the generated text, white-box or API alike), so no tokenizer is needed: a token
belongs to the sentence holding its first non-space character, and to every word it overlaps. That
makes the token-to-word alignment robust to leading-space tokens, sub-words, punctuation and digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ...lm.base import Continuation
from .text import Span, sentences, words


@dataclass(frozen=True)
class Unit:
    """A token or a word of a sentence: its text, character span and the tokens that make it up."""

    text: str
    start: int
    end: int
    tokens: tuple[int, ...]


def token_spans(tokens: list[str]) -> list[tuple[int, int]]:
    spans, position = [], 0
    for token in tokens:
        spans.append((position, position + len(token)))
        position += len(token)
    return spans


def anchor(token: str, start: int) -> int | None:
    """Offset of a token's first non-space character (None for whitespace-only or empty tokens)."""
    stripped = len(token) - len(token.lstrip())
    return start + stripped if stripped < len(token) else None


def mean_logprob(logprobs: list[float], unit: Unit) -> float:
    """A unit's log-probability, length-normalised: a word's probability is the geometric mean of its
    tokens' probabilities (FLARE at word level, SCAAR Eq. 4-5)."""
    return sum(logprobs[t] for t in unit.tokens) / len(unit.tokens)


def probability(logprobs: list[float], unit: Unit) -> float:
    return math.exp(mean_logprob(logprobs, unit))


class LookAhead:
    def __init__(self, continuation: Continuation):
        self.c = continuation
        self.text = continuation.text
        self.spans = token_spans(continuation.tokens)

    @cached_property
    def sentences(self) -> list[Span]:
        return sentences(self.text) if self.text.strip() else []

    def sentence_tokens(self, span: Span) -> list[int]:
        out = []
        for i, (token, (start, _)) in enumerate(zip(self.c.tokens, self.spans)):
            first = anchor(token, start)
            if first is not None and span.start <= first < span.end:
                out.append(i)
        return out

    def token_units(self, span: Span) -> list[Unit]:
        out = []
        for i in self.sentence_tokens(span):
            start, end = self.spans[i]
            out.append(Unit(self.c.tokens[i].strip(), anchor(self.c.tokens[i], start), end, (i,)))
        return out

    def word_units(self, span: Span) -> list[Unit]:
        out = []
        for word in words(self.text[span.start:span.end]):
            start, end = span.start + word.start, span.start + word.end
            # an empty token (a byte of a multi-byte character the next token completes) sits where that
            # character starts: it belongs to the word there and counts in its probability (Eq. 4-5)
            tokens = tuple(i for i, (a, b) in enumerate(self.spans)
                           if (a < end and b > start) or (a == b and start <= a < end))
            if tokens:
                out.append(Unit(word.text, start, end, tokens))
        return out

    def space_words(self, span: Span) -> list[Unit]:
        """The sentence's tokens merged into whitespace-delimited words, punctuation included ("1720."):
        a word starts at the sentence's first token and at every token whose text starts with
        whitespace. These are the words the DRAGIN reference code scores (it merges a token into the
        previous one unless it carries the tokenizer's space marker)."""
        inside = self.sentence_tokens(span)
        if not inside:
            return []
        groups: list[list[int]] = []
        # whitespace-only tokens between the sentence's first and last token (" " before "1720") count:
        # such a token starts a word, as the reference's bare space-marker token does
        for i in range(inside[0], inside[-1] + 1):
            if not groups or self.c.tokens[i][:1].isspace():
                groups.append([i])
            else:
                groups[-1].append(i)
        out = []
        for group in groups:
            start, end = self.spans[group[0]][0], self.spans[group[-1]][1]
            text = self.text[start:end]
            if text.strip():
                lead = len(text) - len(text.lstrip())
                out.append(Unit(text.strip(), start + lead, start + lead + len(text.strip()), tuple(group)))
        return out

    def units(self, span: Span, granularity: str) -> list[Unit]:
        return self.word_units(span) if granularity == "word" else self.token_units(span)

    def tokens_within(self, chars: int) -> int:
        """How many tokens the first `chars` characters of the text use."""
        return sum(1 for start, _ in self.spans if start < chars)
