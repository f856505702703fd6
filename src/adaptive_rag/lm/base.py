"""The one interface every method uses to talk to a language model, whatever the backend.

Methods ask for *what* they need (greedy continuations with token log-probabilities, sampled
continuations, forced-token scores, and for white-box models entropies, attentions or hidden
states); backends declare what they can give. A method's needs are checked against a
backend's capabilities when the run is configured, so an impossible combination (attentions from
an API model) fails before any generation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from ..errors import ConfigError
from .capabilities import (ATTENTIONS, BLACK_BOX, ENTROPY, HIDDEN_STATES, LOGPROBS,  # noqa: F401
                           SAMPLING, SCORING, WHITE_BOX, missing)


@dataclass(frozen=True)
class Prompt:
    """Raw few-shot text, or chat messages; `prefix` is answer text already written, to continue from.

    Kept as data (not a rendered string) because only the backend knows how to render chat: a
    white-box model applies its chat template, an API receives the messages.
    """

    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content)
    prefix: str = ""
    # Leading messages (chat) or characters (text) that every question of a dataset shares (the
    # few-shot part): a backend may encode them once and reuse their KV cache.
    shared: int = 0

    def __post_init__(self):
        if (self.text is None) == (self.messages is None):
            raise ValueError("a Prompt has either text or messages")

    @classmethod
    def chat(cls, messages: Sequence[dict], prefix: str = "", shared: int = 0) -> "Prompt":
        return cls(messages=tuple((m["role"], m["content"]) for m in messages), prefix=prefix, shared=shared)

    def with_prefix(self, prefix: str) -> "Prompt":
        return Prompt(self.text, self.messages, prefix, self.shared)

    def key(self) -> str:
        """Canonical identity (for the call cache)."""
        return json.dumps({"text": self.text, "messages": self.messages, "prefix": self.prefix,
                           "shared": self.shared}, ensure_ascii=False, sort_keys=True)

    def readable(self):
        """What traces record: the text, or the messages plus the answer prefix."""
        if self.text is not None:
            return self.text + self.prefix
        return {"messages": [{"role": r, "content": c} for r, c in self.messages], "prefix": self.prefix}


@dataclass(frozen=True)
class Extras:
    """White-box outputs a greedy call may ask for (all off by default: they cost memory)."""

    entropy: bool = False  # entropy of each next-token distribution (DRAGIN's H_i)
    attention_layer: int | None = None  # this layer's head-averaged attention rows of generated tokens (-1: last)
    hidden_layer: int | None = None  # this layer's hidden state at each generated position (SeaKR: L/2)

    def needs(self) -> set[str]:
        needs = set()
        if self.entropy:
            needs.add(ENTROPY)
        if self.attention_layer is not None:
            needs.add(ATTENTIONS)
        if self.hidden_layer is not None:
            needs.add(HIDDEN_STATES)
        return needs


NO_EXTRAS = Extras()


@dataclass
class Continuation:
    """One generated continuation with per-token facts.

    `attentions[i]` is the attention row of generated token i (as the query) over the prompt, the
    tokens generated before it and itself (length prompt_tokens + i + 1), head-averaged at the
    requested layer; `hidden[i]` is that layer's hidden state at generated token i's position.
    With attentions, `meta["prompt_tokens"]` holds the texts of the prompt's own (non-shared) last
    tokens, which are the last columns of the prompt part of each row.
    """

    text: str  # decoded continuation, cut before any stop string
    tokens: list[str]  # each generated token's text
    logprobs: list[float]  # log-probability of each generated token
    finish_reason: str  # "stop" (a stop string), "eos", or "length"
    prompt_tokens: int | None = None
    token_ids: list[int] | None = None  # white-box only
    entropies: list[float] | None = None
    attentions: list[np.ndarray] | None = None
    hidden: np.ndarray | None = None  # [generated tokens, hidden size]
    meta: dict = field(default_factory=dict)


class GenerationStopped(Exception):
    """A generation abandoned because the backend's `stop_requested` said so (the client went away);
    `steps` is how many tokens each row of the interrupted batch had generated."""

    def __init__(self, steps: int):
        super().__init__(f"generation stopped after {steps} tokens")
        self.steps = steps


@dataclass(frozen=True)
class SamplingParams:
    """Seeded sampling: continuation j of a call uses seed + j, so a run repeats exactly."""

    n: int
    seed: int
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float | None = 0.9


class LanguageModel(Protocol):
    capabilities: frozenset[str]

    def identity(self) -> dict:
        """What the call cache keys on: model name + weights hash or revision, backend, dtype."""

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """Greedy continuation of every prompt (batched where the backend can)."""

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = ()) -> list[Continuation]:
        """`params.n` sampled continuations with their sequence log-likelihoods."""

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        """Log-probabilities of the tokens of a forced continuation."""


def require(capabilities: frozenset[str], needs: set[str], who: str, backend: str) -> None:
    """Fail at configuration time when a method needs what the backend cannot give."""
    lacking = missing(capabilities, needs)
    if lacking:
        raise ConfigError(f"{who} needs {', '.join(lacking)}, which the {backend} backend cannot provide "
                          f"(it offers: {', '.join(sorted(capabilities))}); use a white-box model")


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
