"""The one interface every method uses to talk to a language model, whatever the backend.

Methods ask for *what* they need (greedy continuations with token log-probabilities, sampled
continuations, forced-token scores, and for white-box models entropies, attentions or hidden
states); backends declare what they can give. A method's needs are checked against a
backend's capabilities when the run is configured, so an impossible combination (attentions from
an API model) fails before any generation.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from ..errors import ConfigError
from .capabilities import (ATTENTIONS, BLACK_BOX, ENTROPY, GRADIENTS, HIDDEN_STATES, LOGITS,  # noqa: F401
                           LOGPROBS, SAMPLING, SCORING, WHITE_BOX, missing)


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
    """White-box outputs a call may ask for (all off by default: they cost memory)."""

    entropy: bool = False  # entropy of each next-token distribution (DRAGIN's H_i)
    attention_layer: int | None = None  # this layer's head-averaged attention rows of generated tokens (-1: last)
    hidden_layer: int | None = None  # this layer's hidden state at each generated position
    # SeaKR's internal state: at these 1-based layers, the state at the position where the finished
    # continuation's last token is replaced by EOS (an EOS the model emitted itself is fed as it is).
    final_layers: tuple[int, ...] = ()
    final_source: str = "mlp"  # mlp: the layer's MLP output before the residual add (reference code) | residual
    logsumexp: bool = False  # logsumexp of the raw logits at each generated token (the Energy score)
    # Log-probabilities of these token ids at every generated position, whatever token was chosen there
    # (Self-RAG reads its reflection tokens' probabilities where the model writes them). Tokens that write
    # no text (special tokens) after the last text are kept in a continuation that asks for these.
    watch_ids: tuple[int, ...] = ()
    # The log-probability of the token that ended a continuation that kept no token (the stop string's first
    # token, or the end token): an empty answer's likelihood, as Farquhar et al.'s semantic-entropy code
    # takes the stop word's when only stop words were generated (SUGAR).
    end_logprob: bool = False

    def __post_init__(self):
        if self.final_source not in FINAL_SOURCES:
            raise ValueError(f"final_source must be one of {', '.join(FINAL_SOURCES)}; got {self.final_source!r}")
        if self.final_layers and (self.attention_layer is not None or self.hidden_layer is not None):
            # The final feed replaces the last token by EOS, so per-token rows would describe EOS, not the token.
            raise ValueError("final_layers cannot be combined with per-token attention or hidden states")
        if any(not isinstance(layer, int) or layer < 1 for layer in self.final_layers):
            raise ValueError(f"final_layers are 1-based layer numbers; got {self.final_layers!r}")
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in self.watch_ids):
            raise ValueError(f"watch_ids are token ids (integers >= 0); got {self.watch_ids!r}")

    def needs(self) -> set[str]:
        needs = set()
        if self.entropy:
            needs.add(ENTROPY)
        if self.attention_layer is not None:
            needs.add(ATTENTIONS)
        if self.hidden_layer is not None or self.final_layers:
            needs.add(HIDDEN_STATES)
        if self.logsumexp or self.watch_ids:
            needs.add(LOGITS)
        return needs

    def key(self) -> dict:
        """What the call cache keys on. Fields added after cache rows were first written enter the key
        only when set, so adding one does not turn every stored call into a miss."""
        fields = dataclasses.asdict(self)
        for name, default in _LATER_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        return fields


FINAL_SOURCES = ("mlp", "residual")
_LATER_FIELDS = {"final_layers": (), "final_source": "mlp", "logsumexp": False, "watch_ids": (), "end_logprob": False}
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
    final_hidden: np.ndarray | None = None  # [len(Extras.final_layers), hidden size]: the state at the final EOS
    logsumexp: list[float] | None = None  # logsumexp of the raw logits at each generated token
    # watched[i][j]: log-probability of Extras.watch_ids[j] at generated position i
    watched: list[list[float]] | None = None
    # with Extras.end_logprob, for a continuation that kept no token: the log-probability of the first token
    # generated (the one that ended it); None otherwise, or where the backend cannot tell
    end_logprob: float | None = None


@dataclass
class SampleSet:
    """The k sampled continuations of one prompt, with the centred Gram matrix of their final states
    per requested layer (`grams[str(layer)]`, k x k, float64) instead of the states themselves.

    The Gram is all SeaKR's EigenScore reads, and it is exact for any subset of the samples (a
    principal sub-matrix: dropped empties, a k-prefix) and any alpha; it is k*k numbers where the
    states are k*d, which keeps the call cache small (d is 4,096 for Llama-2-7B).
    """

    samples: list[Continuation]
    grams: dict[str, np.ndarray] = field(default_factory=dict)


IG_METHODS = ("gausslegendre", "riemann_right")
IG_TARGETS = ("probability", "log-probability")


@dataclass(frozen=True)
class IGSettings:
    """How `attribution` integrates. The defaults are DioR's reference (`IntegratedGradientsAnalyzer`,
    itself Snyder et al. 2024's): the softmax probability of the greedy next token, 64 Gauss-Legendre
    nodes (captum's default method). `batch` is how many interpolation points go through the model in
    one forward + backward (the reference: captum's `internal_batch_size=4`); 1 is the one-step-at-a-time
    path. It only bounds memory and changes the last bits (a different matrix shape), never the
    integral, but it is part of the cache key because a cached result must equal a fresh one exactly.
    """

    target: str = "probability"  # probability (reference) | log-probability
    steps: int = 64
    method: str = "gausslegendre"  # gausslegendre (reference) | riemann_right
    batch: int = 16

    def __post_init__(self):
        if self.target not in IG_TARGETS:
            raise ValueError(f"IG target must be one of {', '.join(IG_TARGETS)}; got {self.target!r}")
        if self.method not in IG_METHODS:
            raise ValueError(f"IG method must be one of {', '.join(IG_METHODS)}; got {self.method!r}")
        for name in ("steps", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"IG {name} must be a positive integer; got {value!r}")


@dataclass
class Attribution:
    """Integrated Gradients of one prompt's tokens for the model's own next token (white-box only).

    Per prompt token j (all of them, a BOS the tokenizer adds included, as in the reference):
    `l2[j]` = ||IG_j||_2 over the embedding dimension (what DioR's detector reads, normalised), `dot[j]` =
    sum_d IG_j,d (the signed share of F(x) - F(0)). `value` = F(x), `baseline_value` = F(0) for the
    target F, so `dot.sum() - (value - baseline_value)` is the quadrature error (completeness). Only
    per-token numbers are kept, not the [n, d] matrix: that is what every use reads, and it keeps a
    cached row small (d is 4,096 for Llama-2-7B).
    """

    tokens: list[str]  # each prompt token's text (they join to the decoded prompt)
    token_ids: list[int]
    target_id: int  # argmax of the next-token distribution at the real input
    target: str  # its text
    value: float  # F(x)
    baseline_value: float  # F(0)
    l2: np.ndarray  # [n] float64
    dot: np.ndarray  # [n] float64


@dataclass
class FirstToken:
    """What a white-box model computes when it generates the first token after a prompt: the full next-token
    distribution and one decoder layer's MLP up-projection at the prompt's last position (the forward pass
    that produces that token). Snyder et al. (2024) and DioR (Figs. 5, 6, 8, 9) read these for the first
    answer token; the distribution is the vocabulary's width, so the call cache does not keep it."""

    token_id: int  # argmax of `probabilities`: the greedy first token
    probabilities: np.ndarray  # [vocab] float32, softmax of the float32 logits
    activations: np.ndarray  # [intermediate] float32: `mlp.up_proj` (or the layout's equivalent) output
    layer: int  # the decoder layer read, 0-based


def gram(states: np.ndarray) -> np.ndarray:
    """Feature-centred Gram matrix Σ = Z J_d Zᵀ of k sample states Z [k, d], in float64.

    Why: EigenScore only ever needs Σ, never the states, and Σ is k×k (20×20) where the states are k×d
    (20×4096), so Σ is what gets cached. Because J_d centres each ROW over its own d features
    (Σ_ij = (z_i − mean z_i)·(z_j − mean z_j)), no statistic is shared across samples: the Gram of any
    subset of samples is exactly the principal sub-matrix of the full Gram, so dropping empty samples or
    taking a k-prefix later needs no states. It is computed in float64 from (usually float32) states
    because the log-det of Σ + αI with α = 1e-3 is sensitive to rounding in the near-null directions;
    the reference code's float32 `torch.logdet` is what we deliberately do not copy.
    """
    z = np.asarray(states, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"gram: states must be a [k, d] array, got shape {z.shape}")
    centred = z - z.mean(axis=1, keepdims=True) if z.shape[1] else z
    sigma = centred @ centred.T
    return (sigma + sigma.T) / 2  # exactly symmetric, whatever the BLAS did


def to_sample_set(samples: list[Continuation], layers: Sequence[int] = ()) -> SampleSet:
    """Fold the samples' final states into one Gram per layer and drop the states."""
    grams = {}
    for index, layer in enumerate(layers):
        states = [c.final_hidden[index] for c in samples]
        grams[str(layer)] = gram(np.stack(states)) if states else np.zeros((0, 0))
    return SampleSet([dataclasses.replace(c, final_hidden=None) for c in samples], grams)


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

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """Greedy continuation of every prompt (batched where the backend can); `max_new_tokens` is one
        limit for every prompt or one per prompt (`row_limits`)."""

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """`params.n` sampled continuations with their sequence log-likelihoods."""

    def sample_batch(self, prompts: Sequence[Prompt], params: SamplingParams, max_new_tokens: int,
                     stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[SampleSet]:
        """`params.n` samples of every prompt (seeds seed + j each, whatever the batch), with the
        Gram matrices of `extras.final_layers` in place of the final states."""

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        """Log-probabilities of the tokens of a forced continuation."""

    def received_attention(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        """White-box only (`attentions`): [2, heads, n], the largest attention each token receives from a
        later token per head ([0]) and its attention to itself ([1]), in a pass over the tokens alone."""

    def attention_matrix(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        """White-box only (`attentions`): [n, n], one layer's attention averaged over heads, in a pass
        over the tokens alone."""

    def attribution(self, prompt: Prompt, settings: IGSettings = IGSettings()) -> Attribution:
        """White-box only (`gradients`): Integrated Gradients of every prompt token for the probability
        (or log-probability) of the model's greedy next token, zero-embedding baseline."""


def require(capabilities: frozenset[str], needs: set[str], who: str, backend: str) -> None:
    """Fail at configuration time when a method needs what the backend cannot give."""
    lacking = missing(capabilities, needs)
    if lacking:
        raise ConfigError(f"{who} needs {', '.join(lacking)}, which the {backend} backend cannot provide "
                          f"(it offers: {', '.join(sorted(capabilities))}); use a white-box model")


def row_limits(max_new_tokens: int | Sequence[int], count: int) -> list[int]:
    """The token limit of each of a call's `count` prompts: one number for all, or one per prompt.

    Per-prompt limits let a dynamic loop send every question's next step as one batched call, whatever
    each has left of its budget: a greedy row's text does not depend on the limits of the rows beside it,
    and calls split by limit would decode mostly one row at a time."""
    if isinstance(max_new_tokens, int):
        return [max_new_tokens] * count
    limits = [int(n) for n in max_new_tokens]
    if len(limits) != count:
        raise ValueError(f"{len(limits)} token limits for {count} prompts")
    return limits


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
