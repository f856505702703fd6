"""Serve any `LanguageModel` as an OpenAI-compatible HTTP API that returns only tokens and log-probabilities.

This is how a black-box model is simulated (as the SCAAR paper did): a white-box `HFModel` behind
the API, so a method run through `APIModel` sees exactly what a hosted model would give it - text,
each token's text and log-probability, a finish reason, token counts - and nothing else.

    python -m adaptive_rag.lm.serve --model-dir data/models/smollm2 --port 8000

prints `serving <name> on http://127.0.0.1:8000/v1` once it accepts requests, and stops cleanly on
SIGTERM or SIGINT. Endpoints (OpenAI response shapes, JSON in and out):

- `GET /v1/models`, `GET /v1/models/<name>`: the served model; its extra field `identity` is the
  model's own `identity()` (weights hash, dtype, ...), which `APIModel.identity()` passes on to the
  call cache.
- `POST /v1/completions`: `prompt` (string or list of strings), `max_tokens` (default 16),
  `temperature` (0: greedy through `generate`; > 0: seeded sampling through `sample` with `n`, `seed`,
  `top_p` and the extra field `top_k`), `stop`, `logprobs` (an int; the legacy object
  `{tokens, token_logprobs, top_logprobs: null, text_offset}` - only the chosen token's log-probability
  is given, whatever the int), `echo` (prompt tokens and their log-probabilities first; with
  `max_tokens: 0` this scores a text, through `LanguageModel.score`), `n`.
- `POST /v1/chat/completions`: `messages`, the same decoding fields (`max_tokens` or
  `max_completion_tokens`, default 256), `logprobs: true` (`choices[i].logprobs.content`, with
  `top_logprobs: []`), and the vLLM extension `continue_final_message: true`: a final assistant
  message is answer text already written, continued rather than answered. With it, `echo: true`
  (extension) also returns that message's tokens and log-probabilities first, each with an extra
  `text_offset` into the message (negative for a token that starts before it); this is how
  `APIModel.score` scores chat prompts.

`finish_reason` is "stop" for a stop string and for the end-of-sequence token, as OpenAI does;
the vLLM field `stop_reason` tells them apart (the stop string, or null at end of sequence).
Requests are answered one at a time (a lock around the model), so a prompt's result never depends
on what else the server is doing. Bad requests get a 400 with an OpenAI error body
`{"error": {"message", "type", "param", "code"}}`; nothing raised in the server reaches the client
as a traceback (an internal failure is a 500 marked `x-should-retry: false`, its traceback on stderr).
Decoding defaults follow OpenAI: temperature 1; a sampling request without `seed` draws a random one.

No single request can take the server down. What it may ask is checked before the model runs, each
refusal naming the field and the limit: `max_tokens` at most `--max-tokens` (default 1024); prompt
tokens + `max_tokens` at most the model's context length (`HFModel.context_length`; a prompt with more
characters than context x the longest vocabulary entry is refused without being tokenised); no empty
prompt; at most MAX_PROMPTS prompts, MAX_STOP stop strings, and as many messages as the context has
tokens; roles system, user, assistant; numbers finite and in range (`json.loads` reads NaN and
Infinity); strings valid Unicode (JSON escapes can write a lone surrogate, which no tokenizer or UTF-8
reply can carry); a body over MAX_BODY is a 413. A client that hangs up abandons its request: the model
asks before every decoding step whether the client's socket has reached end-of-file
(`HFModel.stop_requested`), so the lock is free again one step later, and stderr says `client
disconnected; generation stopped after N tokens (of at most M)`. With `--log-requests`, stderr also says
when each generation starts.

Memory is bounded by design and checked per request: the KV cache a request will hold at its peak
(`memory.cache_estimate`, from the engine's layout: on the fast path a sampled prompt is held once and
each of its n rows only what it generates) times the bytes of one cached position must fit
`--max-cache-memory` (default: half of what the tightest memory limit of the process leaves once the
model is loaded, `memory.headroom`), or the request is a 400 naming its numbers and the limit, before
any model work.

Connections are bounded too (`connections`): at most `--max-connections` at a time (one thread each;
the next is answered 503 at once and closed), a connection silent for `--read-timeout` is closed, and a
request must arrive whole (request line, headers, body) within `--receive-timeout` of its first byte, so
a client dripping one byte every few seconds cannot hold a thread for long. A request whose length is
ambiguous (`Transfer-Encoding`, differing `Content-Length`s, a length that is not ASCII digits) is a 400
and its connection is closed. Start-up mistakes (an option out of range, a port in use, an address not
of this machine, a device that is not there) are one `error:` line and exit status 2, before the model
is loaded.

Why `http.server` rather than a framework (uvicorn/starlette are installed here, but as nobody's
declared dependency): the work to bound is synchronous torch code under one lock, so an ASGI server's
disconnect event would have to reach the decoding loop through the same per-step hook; polling the
handler's own socket (`select`, then `recv(MSG_PEEK)` reading b"") does that without a new dependency
or an event loop, and the body limit and validation are a few lines either way.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import secrets
import select
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import unquote

from ..errors import AdaptiveRagError
from .base import Continuation, GenerationStopped, LanguageModel, Prompt, SamplingParams
from .connections import (DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_S, DEFAULT_RECEIVE_TIMEOUT_S, BoundedHandler,
                          BoundedServer, ReceiveTimeout, error_body, listen_error)
from .memory import SIZE_SYNTAX, cache_estimate, format_size, headroom, parse_size, position_bytes

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_CHAT_TOKENS = 256
DEFAULT_MAX_TOKENS = 1024  # --max-tokens: the most tokens one request may ask for (the project asks <= 120)
AUTO_CACHE_SHARE = 0.5  # --max-cache-memory auto: this share of the headroom (the rest: activations, logits)
MAX_N = 128
MAX_PROMPTS = 128  # prompts in one /v1/completions list (APIModel sends one)
MAX_STOP = 16  # stop strings: each is looked for after every token
MAX_BODY = 64 * 1024 * 1024
INT64 = 2**63  # seeds are int64, as OpenAI's; seed + j (j < n) stays within what torch accepts
ROLES = ("system", "user", "assistant")
FINISH = {"eos": "stop", "stop": "stop", "length": "length"}

# Fields a request may carry only with their neutral value (anything else is refused, never ignored).
NEUTRAL = {
    "stream": (None, False),
    "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "stream_options": (None,),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None, False),
}
IGNORED = {"user", "metadata", "store", "service_tier"}  # carry no meaning for generation
DECODING = {"model", "max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop"}
COMPLETION_FIELDS = DECODING | {"prompt", "logprobs", "echo", "best_of"}
CHAT_FIELDS = DECODING | {"messages", "max_completion_tokens", "logprobs", "top_logprobs",
                          "continue_final_message", "add_generation_prompt", "echo"}


class RequestError(Exception):
    """An error the client caused (or may see): answered as an OpenAI error body."""

    def __init__(self, message: str, status: int = 400, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


class ClientGone(Exception):
    """The client closed its connection while its request waited or generated, or stalled sending it:
    nobody to answer."""


# ---- request parsing ----------------------------------------------------------------------------


def _number(body: dict, key: str, default, low: float | None = None, high: float | None = None,
            integer: bool = False):
    value = body.get(key)
    if value is None:
        return default
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise RequestError(f"'{key}' must be {'an integer' if integer else 'a number'}; got {value!r}", param=key)
    if not math.isfinite(value):  # json.loads reads NaN and Infinity; no comparison below catches NaN
        raise RequestError(f"'{key}' must be a finite number; got {value!r}", param=key)
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise RequestError(f"'{key}' must be {bounds}; got {value!r}", param=key)
    return value


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"'{key}' must be true or false; got {value!r}", param=key)
    return value


def _stop(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        if len(value) > MAX_STOP:
            raise RequestError(f"'stop' has {len(value)} strings; at most {MAX_STOP} are allowed", param="stop")
        return tuple(s for s in value if s)
    raise RequestError(f"'stop' must be a string or a list of strings; got {value!r}", param="stop")


def _check_fields(body: dict, allowed: set[str]) -> None:
    for key, value in body.items():
        if key in allowed or key in IGNORED:
            continue
        if key in NEUTRAL:
            if value in NEUTRAL[key]:
                continue
            what = "streaming is not supported" if key == "stream" else f"'{key}' is not supported"
            raise RequestError(f"{what} by this server (got {key}={value!r})", param=key,
                               code="unsupported_parameter")
        raise RequestError(f"unsupported parameter '{key}'", param=key, code="unsupported_parameter")


@dataclass(frozen=True)
class Decoding:
    max_tokens: int
    temperature: float
    top_p: float | None
    top_k: int | None
    n: int
    seed: int | None
    stop: tuple[str, ...]

    @classmethod
    def parse(cls, body: dict, max_tokens: int) -> "Decoding":
        top_k = _number(body, "top_k", None, low=-1, integer=True)
        return cls(
            max_tokens=max_tokens,
            temperature=float(_number(body, "temperature", 1.0, low=0, high=2)),
            top_p=_number(body, "top_p", None, low=0, high=1),
            top_k=None if top_k in (None, -1, 0) else top_k,  # vLLM: -1 (and 0) switch top-k off
            n=_number(body, "n", 1, low=1, high=MAX_N, integer=True),
            seed=_number(body, "seed", None, low=-INT64, high=INT64 - 1, integer=True),
            stop=_stop(body),
        )


# ---- the service (HTTP-independent) ------------------------------------------------------------


class Service:
    """Answers OpenAI-style request bodies with a `LanguageModel`; one model call at a time.

    `max_tokens` caps what one request may ask to generate; `context` (the model's `context_length`,
    when it has one) caps prompt + generation; `max_cache_bytes` caps the KV cache one request holds
    (for a model whose cached position has a known size). All are checked before the model runs, so no
    request can hold the lock for longer than one bounded generation, nor take more memory than allowed.
    """

    def __init__(self, model: LanguageModel, name: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                 max_cache_bytes: int | None = None):
        self.model, self.name, self.max_tokens, self.max_cache_bytes = model, name, max_tokens, max_cache_bytes
        self.position_bytes = position_bytes(model)
        self.fast = getattr(model, "decoder", None) is not None
        self.context: int | None = getattr(model, "context_length", None)
        self.token_chars = _longest_token(model)
        self.log: Callable[[str], None] | None = None  # with --log-requests: when each generation starts
        self.lock = threading.Lock()
        self.created = int(time.time())
        self.identity = model.identity()
        digest = hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode()).hexdigest()
        self.fingerprint = f"fp_{digest[:12]}"

    # -- models

    def model_card(self) -> dict:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "adaptive-rag",
                "identity": self.identity}

    def models(self) -> dict:
        return {"object": "list", "data": [self.model_card()]}

    def _check_model(self, body: dict) -> None:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' is required (a string)", param="model")
        if model != self.name:
            raise RequestError(f"The model `{model}` does not exist (this server serves `{self.name}`)",
                               status=404, param="model", code="model_not_found")

    # -- limits (checked before the model runs)

    def _max_tokens(self, body: dict, key: str, default: int) -> int:
        value = _number(body, key, min(default, self.max_tokens), low=0, integer=True)
        if value > self.max_tokens:
            raise RequestError(f"'{key}' must be at most {self.max_tokens} (this server's --max-tokens); "
                               f"got {value}", param=key)
        return value

    def _check_chars(self, chars: int, param: str) -> None:
        """Refuse, without tokenising it, a prompt too long to fit whatever its tokens: every token is at
        most `token_chars` characters, so more than context x token_chars characters cannot fit. (Tokenising
        megabytes takes seconds and gigabytes, under the lock.)"""
        if self.context is None or self.token_chars is None:
            return
        limit = self.context * self.token_chars
        if chars > limit:
            raise RequestError(f"'{param}' is too long: {chars} characters cannot fit in the model's context "
                               f"length of {self.context} tokens (at most {limit} characters: no token of this "
                               f"tokenizer is longer than {self.token_chars})", param=param,
                               code="context_length_exceeded")

    def _check_tokens(self, prompt: Prompt, max_tokens: int, param: str) -> int | None:
        """Tokenise the prompt (the caller holds the lock: the tokenizer is not thread-safe) and refuse it
        when it has no tokens or it and `max_tokens` overflow the context - before any forward pass, which
        on a prompt past the context would allocate gigabytes for nothing. Its token count (None for a
        model without a tokenizer)."""
        encode = getattr(self.model, "encode", None)
        if encode is None:
            return None
        n = len(encode(prompt)[0])
        if n == 0:
            raise RequestError(f"'{param}' gives no tokens: the model needs at least one to continue from",
                               param=param)
        if self.context is not None and n + max_tokens > self.context:
            raise RequestError(f"'{param}' is too long: {n} prompt tokens + {max_tokens} max_tokens = "
                               f"{n + max_tokens}, more than the model's context length of {self.context} tokens",
                               param=param, code="context_length_exceeded")
        return n

    def _check_cache(self, prompt_tokens: list[int | None], decoding: Decoding) -> None:
        """Refuse a generation whose KV cache would not fit `max_cache_bytes` (see `cache_estimate`), before
        the model allocates any of it."""
        if (self.max_cache_bytes is None or self.position_bytes is None or decoding.max_tokens == 0
                or None in prompt_tokens):
            return
        positions, how = cache_estimate(prompt_tokens, decoding.n, decoding.max_tokens, decoding.temperature > 0,
                                        self.fast, getattr(self.model, "batch_size", 1))
        need = positions * self.position_bytes
        if need > self.max_cache_bytes:
            raise RequestError(
                f"this request needs a KV cache of {how} = {positions} positions x {self.position_bytes} bytes = "
                f"{need} bytes ({format_size(need)}), more than this server's --max-cache-memory of "
                f"{self.max_cache_bytes} bytes ({format_size(self.max_cache_bytes)}); ask for fewer samples (n), "
                f"fewer tokens (max_tokens) or a shorter prompt, or start the server with a larger "
                f"--max-cache-memory", code="cache_memory_exceeded")

    @contextmanager
    def _turn(self, disconnected: Callable[[], bool] | None):
        """The model for one request: the lock held, and a stoppable model's `stop_requested` asking whether
        this request's client is gone, so an abandoned request gives the lock back within one decoding step."""
        with self.lock:
            if disconnected is not None and disconnected():
                raise ClientGone("client disconnected while its request waited; dropped before generation")
            stoppable = hasattr(self.model, "stop_requested")
            if stoppable:
                self.model.stop_requested = disconnected
            try:
                yield
            finally:
                if stoppable:
                    self.model.stop_requested = None

    # -- /v1/completions

    def completions(self, body: dict, disconnected: Callable[[], bool] | None = None) -> dict:
        _check_fields(body, COMPLETION_FIELDS)
        self._check_model(body)
        prompts = _prompts(body.get("prompt"))
        max_tokens = self._max_tokens(body, "max_tokens", DEFAULT_COMPLETION_TOKENS)
        decoding = Decoding.parse(body, max_tokens)
        logprobs = _number(body, "logprobs", None, low=0, high=20, integer=True)
        echo = _flag(body, "echo")
        best_of = body.get("best_of")
        if best_of is not None and best_of != decoding.n:
            raise RequestError("'best_of' other than n is not supported", param="best_of",
                               code="unsupported_parameter")

        for p in prompts:
            self._check_chars(len(p), "prompt")
        requests = [Prompt(text=p) for p in prompts]
        with self._turn(disconnected):
            counts = []
            for request in requests:  # up to MAX_PROMPTS x ~1 s of tokenising at the character bound
                if disconnected is not None and disconnected():
                    raise ClientGone("client disconnected; dropped while its prompts were counted")
                counts.append(self._check_tokens(request, max_tokens, "prompt"))
            self._check_cache(counts, decoding)
            echoes = [self._echo(Prompt(text=""), p) for p in prompts] if echo else None
            results = self._decode(requests, decoding)
        choices, prompt_tokens, completion_tokens = [], 0, 0
        for i, (text, continuations) in enumerate(zip(prompts, results)):
            prompt_tokens += _prompt_tokens(continuations, echoes[i] if echoes else None)
            for c in continuations:
                completion_tokens += len(c.tokens)
                tokens, token_logprobs = list(c.tokens), list(c.logprobs)
                offset = len(text)
                offsets = []
                for t in tokens:
                    offsets.append(offset)
                    offset += len(t)
                out_text = c.text
                if echoes:
                    e_tokens, e_logprobs, e_offsets = echoes[i]
                    tokens, token_logprobs, offsets = e_tokens + tokens, e_logprobs + token_logprobs, \
                        e_offsets + offsets
                    out_text = text + c.text
                choices.append({
                    "index": len(choices), "text": out_text, "finish_reason": FINISH.get(c.finish_reason, "stop"),
                    "stop_reason": _stop_reason(c, decoding.stop),
                    "logprobs": None if logprobs is None else {
                        "tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": None,
                        "text_offset": offsets},
                })
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.name, "system_fingerprint": self.fingerprint, "choices": choices,
                "usage": _usage(prompt_tokens, completion_tokens)}

    # -- /v1/chat/completions

    def chat(self, body: dict, disconnected: Callable[[], bool] | None = None) -> dict:
        _check_fields(body, CHAT_FIELDS)
        self._check_model(body)
        messages = _messages(body.get("messages"), self.context)
        key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = self._max_tokens(body, key, DEFAULT_CHAT_TOKENS)
        decoding = Decoding.parse(body, max_tokens)
        logprobs = _flag(body, "logprobs")
        top = _number(body, "top_logprobs", 0, low=0, high=20, integer=True)
        if top:
            raise RequestError("'top_logprobs' is not supported (only the chosen token's log-probability is "
                               "given); leave it unset or 0", param="top_logprobs", code="unsupported_parameter")
        continue_final = _flag(body, "continue_final_message")
        generation_prompt = body.get("add_generation_prompt")
        if generation_prompt is not None and not isinstance(generation_prompt, bool):
            raise RequestError("'add_generation_prompt' must be true or false", param="add_generation_prompt")
        echo = _flag(body, "echo")
        if continue_final:
            if messages[-1][0] != "assistant":
                raise RequestError("'continue_final_message' needs a final assistant message to continue",
                                   param="messages")
            if generation_prompt:
                raise RequestError("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                                   param="add_generation_prompt")
            prompt = Prompt(messages=tuple(messages[:-1]), prefix=messages[-1][1])
        else:
            if generation_prompt is False:
                raise RequestError("'add_generation_prompt: false' is only supported with "
                                   "'continue_final_message: true'", param="add_generation_prompt",
                                   code="unsupported_parameter")
            if echo:
                raise RequestError("'echo' is only supported with 'continue_final_message: true'", param="echo",
                                   code="unsupported_parameter")
            prompt = Prompt(messages=tuple(messages))

        self._check_chars(sum(len(c) for _, c in messages), "messages")
        with self._turn(disconnected):
            self._check_cache([self._check_tokens(prompt, max_tokens, "messages")], decoding)
            echoed = self._echo(Prompt(messages=prompt.messages), prompt.prefix, scored_only=True) if echo else None
            (continuations,) = self._decode([prompt], decoding)
        choices, completion_tokens = [], 0
        for c in continuations:
            completion_tokens += len(c.tokens)
            content = [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                       for t, lp in zip(c.tokens, c.logprobs)]
            text = c.text
            if echoed:
                e_tokens, e_logprobs, e_offsets = echoed
                content = [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": [],
                            "text_offset": o} for t, lp, o in zip(e_tokens, e_logprobs, e_offsets)] + content
                text = prompt.prefix + text
            choices.append({
                "index": len(choices), "message": {"role": "assistant", "content": text},
                "finish_reason": FINISH.get(c.finish_reason, "stop"), "stop_reason": _stop_reason(c, decoding.stop),
                "logprobs": {"content": content} if logprobs else None,
            })
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name, "system_fingerprint": self.fingerprint, "choices": choices,
                "usage": _usage(_prompt_tokens(continuations, echoed), completion_tokens)}

    # -- model calls (the caller holds the lock)

    def _decode(self, prompts: list[Prompt], decoding: Decoding) -> list[list[Continuation]]:
        """`decoding.n` continuations of every prompt (`ClientGone` when the model was told to stop)."""
        if self.log is not None:
            self.log(f"generating: {len(prompts)} prompt(s), n={decoding.n}, max_tokens={decoding.max_tokens}")
        try:
            return self._generate(prompts, decoding)
        except GenerationStopped as e:
            raise ClientGone(f"client disconnected; generation stopped after {e.steps} tokens "
                             f"(of at most {decoding.max_tokens})") from None

    def _generate(self, prompts: list[Prompt], decoding: Decoding) -> list[list[Continuation]]:
        d = decoding
        if d.max_tokens == 0:
            return [[Continuation("", [], [], "length", prompt_tokens=self._count(p)) for _ in range(d.n)]
                    for p in prompts]
        if d.temperature == 0:
            greedy = self.model.generate(prompts, d.max_tokens, d.stop)
            return [[c] * d.n for c in greedy]
        seed = d.seed if d.seed is not None else secrets.randbelow(2**31)
        params = SamplingParams(n=d.n, seed=seed, temperature=d.temperature, top_k=d.top_k, top_p=d.top_p)
        return [self.model.sample(p, params, d.max_tokens, d.stop) for p in prompts]

    def _count(self, prompt: Prompt) -> int | None:
        encode = getattr(self.model, "encode", None)
        return len(encode(prompt)[0]) if encode else None

    def _echo(self, prompt: Prompt, text: str, scored_only: bool = False):
        """Tokens of `text` read after `prompt`, their log-probabilities (`LanguageModel.score`; None for a
        token nothing predicts) and their character offsets into `text`.

        `score` gives log-probabilities only; the token texts and offsets come from the model's own
        tokenizer, so echo needs a model that exposes one (`HFModel` does).
        """
        encode, token_texts = getattr(self.model, "encode", None), getattr(self.model, "token_texts", None)
        if encode is None or token_texts is None:
            raise RequestError("'echo' (prompt log-probabilities) is not supported by this model",
                               param="echo", code="unsupported_parameter")
        if not text:
            return [], [], []
        ids = list(encode(prompt.with_prefix(prompt.prefix + text))[0])
        texts = token_texts(ids)
        scores = self.model.score(prompt, text) if len(ids) > 1 else []
        if len(scores) > len(ids):
            raise RuntimeError(f"score gave {len(scores)} values for {len(ids)} tokens")
        logprobs = [None] * (len(ids) - len(scores)) + list(scores)
        offsets = _offsets(self.model, prompt, text, ids, texts)
        if scored_only:
            keep = len(ids) - len(scores)
            return texts[keep:], logprobs[keep:], offsets[keep:]
        return texts, logprobs, offsets


def _offsets(model, prompt: Prompt, text: str, ids: list[int], texts: list[str]) -> list[int]:
    """Each token's character offset into `text` (negative: the token starts in the prompt).

    From the tokenizer's offset mapping when it re-creates the model's token ids (exact even when a
    character is split across byte tokens); otherwise from the token texts, counted back from the end.
    """
    tokenizer = getattr(model, "tokenizer", None)
    try:
        if prompt.messages is not None:
            head = model.render_chat(prompt.messages) + prompt.prefix
            special = False
        else:
            head, special = prompt.text + prompt.prefix, True
        encoded = tokenizer(head + text, add_special_tokens=special, return_offsets_mapping=True)
        if list(encoded["input_ids"]) == ids:
            return [start - len(head) for start, _ in encoded["offset_mapping"]]
    except Exception:  # noqa: BLE001 - any tokenizer without offsets falls back to counting
        pass
    offsets, end = [], len(text)
    for t in reversed(texts):
        end -= len(t)
        offsets.append(end)
    return offsets[::-1]


def _longest_token(model) -> int | None:
    """Characters in the model's longest vocabulary entry: an upper bound on the characters one token
    stands for (byte-level entries have one character per byte, SentencePiece ones one per character)."""
    tokenizer = getattr(model, "tokenizer", None)
    try:
        return max(len(token) for token in tokenizer.get_vocab()) or None
    except Exception:  # noqa: BLE001 - no tokenizer, or one without a vocabulary: no character bound
        return None


def _prompts(value) -> list[str]:
    """The `prompt` field as a list: non-empty strings (an empty one has nothing to continue), at most
    MAX_PROMPTS of them."""
    prompts = [value] if isinstance(value, str) else value
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise RequestError("'prompt' is required: a string or a non-empty list of strings "
                           "(token-id prompts are not supported)", param="prompt")
    if len(prompts) > MAX_PROMPTS:
        raise RequestError(f"'prompt' has {len(prompts)} prompts; at most {MAX_PROMPTS} per request",
                           param="prompt")
    for i, p in enumerate(prompts):
        if not p:
            where = "" if isinstance(value, str) else f" (prompt[{i}])"
            raise RequestError(f"'prompt' must not be empty{where}: the model needs text to continue from",
                               param="prompt")
    return prompts


def _messages(value, limit: int | None = None) -> list[tuple[str, str]]:
    """(role, content) pairs; at most `limit` (the context length: every message takes at least one token
    in any chat template, and rendering a million empty ones would take seconds under the lock)."""
    if not isinstance(value, list) or not value:
        raise RequestError("'messages' is required: a non-empty list of {role, content}", param="messages")
    if limit is not None and len(value) > limit:
        raise RequestError(f"'messages' has {len(value)} messages; at most {limit} fit in the model's context "
                           f"length of {limit} tokens", param="messages", code="context_length_exceeded")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string 'role'", param="messages")
        if m["role"] not in ROLES:
            raise RequestError(f"messages[{i}].role {m['role']!r} is not supported; the roles are "
                               f"{', '.join(ROLES)}", param="messages")
        extra = set(m) - {"role", "content", "name"}
        if extra:
            raise RequestError(f"messages[{i}]: unsupported field(s) {', '.join(sorted(extra))}", param="messages",
                               code="unsupported_parameter")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise RequestError(f"messages[{i}].content: only text parts are supported", param="messages")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", param="messages")
        out.append((m["role"], content))
    return out


def _stop_reason(c: Continuation, stop: Sequence[str]):
    """vLLM's `stop_reason`: the stop string that ended the text, None at end of sequence or length."""
    if c.finish_reason != "stop":
        return None
    generated = "".join(c.tokens)
    found = [(generated.find(s), s) for s in stop if s in generated]
    return min(found)[1] if found else (stop[0] if stop else None)


def _prompt_tokens(continuations: list[Continuation], echoed) -> int:
    counts = [c.prompt_tokens for c in continuations if c.prompt_tokens is not None]
    if counts:
        return counts[0]
    return len(echoed[0]) if echoed else 0


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _check_unicode(body: dict) -> None:
    """Refuse a body with a lone surrogate in any string or field name: JSON's `\\ud800` escapes write
    them, `json.loads` keeps them, and neither the tokenizer nor a UTF-8 reply can carry one."""
    stack: list[tuple[str, object]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            position = _surrogate(value)
            if position is not None:
                param = re.split(r"[.\[]", path, maxsplit=1)[0]
                raise RequestError(f"'{path}' is not valid Unicode: a lone surrogate "
                                   f"({value[position]!a}) at character {position}; write characters outside "
                                   f"the Basic Multilingual Plane as UTF-8 or as a pair of surrogate escapes",
                                   param=param)
        elif isinstance(value, dict):
            items = list(value.items())
            for key, _ in items:
                if _surrogate(key) is not None:
                    raise RequestError(f"a field name{f' in {path!r}' if path else ''} is not valid Unicode: "
                                       f"{key!a} has a lone surrogate; field names must be text")
            stack.extend((f"{path}.{key}" if path else key, item) for key, item in reversed(items))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))


def _surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


# ---- HTTP -----------------------------------------------------------------------------------------


class Handler(BoundedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "adaptive-rag"
    service: Service  # set on the subclass made by `attach`
    log_requests = False

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.received()
        self._answer(self._get)

    def do_POST(self):  # noqa: N802
        self._answer(self._post)

    def _get(self) -> dict:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            return self.service.models()
        if path.startswith("/v1/models/"):
            name = unquote(path[len("/v1/models/"):])
            if name != self.service.name:
                raise RequestError(f"The model `{name}` does not exist", status=404, code="model_not_found")
            return self.service.model_card()
        if path in ("/health", "/v1/health"):
            return {"status": "ok"}
        raise RequestError(f"no route GET {path}", status=404, code="not_found")

    def _post(self) -> dict:
        path = self.path.split("?", 1)[0].rstrip("/")
        routes = {"/v1/completions": self.service.completions, "/v1/chat/completions": self.service.chat}
        if path not in routes:
            self._read_body()  # keep the connection usable
            raise RequestError(f"no route POST {path}", status=404, code="not_found")
        return routes[path](self._read_body(), self._client_gone)

    def _client_gone(self) -> bool:
        """Whether the client has closed its connection: the socket reads as end-of-file (or fails).
        Pipelined bytes of a next request read as data, so they do not count as gone; a client that
        half-closes its side after sending (rare; `nc -N`) does."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):  # reset, or already closed
            return True

    def _body_length(self) -> int:
        """The body's length from an unambiguous Content-Length; a request framed any other way is refused
        and its connection closed (where its body ends is unknown, so nothing after it can be read)."""
        self.close_connection = True
        lengths = [value.strip() for value in self.headers.get_all("Content-Length", [])]
        if self.headers.get("Transfer-Encoding") is not None:
            if lengths:
                raise RequestError("a request may not carry both Transfer-Encoding and Content-Length (its length "
                                   "would be ambiguous); send the JSON body with Content-Length alone")
            raise RequestError("Transfer-Encoding is not supported; send the JSON body with a Content-Length header")
        if not lengths:
            raise RequestError("a JSON body with a Content-Length header is required")
        if len(set(lengths)) > 1:
            raise RequestError(f"Content-Length is given {len(lengths)} times with different values "
                               f"({', '.join(map(repr, lengths))}); send it once")
        if not re.fullmatch(r"[0-9]{1,19}", lengths[0]):
            raise RequestError(f"Content-Length must be a number of bytes in ASCII digits; got {lengths[0]!r}")
        length = int(lengths[0])
        if length > MAX_BODY:
            raise RequestError(f"request body too large: {length} bytes; at most {MAX_BODY}", status=413)
        self.close_connection = False
        return length

    def _read_body(self) -> dict:
        try:
            length = self._body_length()
            raw = self.rfile.read(length)
        except ReceiveTimeout as e:
            raise ClientGone(str(e)) from None
        except TimeoutError:
            raise ClientGone(f"client sent no complete body ({length} bytes promised) within the read timeout "
                             f"of {self.timeout:g} s; connection closed") from None
        finally:
            self.received()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the body is not valid JSON: {e}") from None
        except RecursionError:
            raise RequestError("the body is not valid JSON: nested too deeply") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        _check_unicode(body)
        return body

    def _answer(self, route) -> None:
        try:
            status, body = 200, route()
        except ClientGone as e:  # nobody to answer; say so on stderr, where operators look
            print(f"{e} ({self.command} {self.path})", file=sys.stderr, flush=True)
            self.close_connection = True
            return
        except RequestError as e:
            status, body = e.status, e.body()
        except AdaptiveRagError as e:  # the model refused this input (no chat template, empty text, ...)
            status, body = 400, RequestError(str(e)).body()
        except Exception as e:  # noqa: BLE001 - never a traceback to the client; it goes to our stderr
            traceback.print_exc(file=sys.stderr)
            status = 500
            body = RequestError(f"internal server error ({type(e).__name__})", status=500,
                                type_="server_error").body()
        # backslashreplace: a lone surrogate, should one reach a reply, is written as its JSON escape
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 500:  # the model failed on this input: it would fail the same way on a retry
                self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout); nothing to tell it
            self.close_connection = True

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        if self.log_requests:
            super().log_message(format, *args)


def attach(server: BoundedServer, service: Service, log_requests: bool = False,
           read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
           receive_timeout_s: float = DEFAULT_RECEIVE_TIMEOUT_S) -> BoundedServer:
    """Give a bound `server` its service and start listening (`serve_forever` then answers)."""
    if log_requests:
        service.log = lambda message: print(message, file=sys.stderr, flush=True)
    server.RequestHandlerClass = type("BoundHandler", (Handler,), {
        "service": service, "log_requests": log_requests, "timeout": read_timeout_s,
        "receive_timeout": receive_timeout_s})
    server.server_activate()
    return server


def make_server(model: LanguageModel, name: str, host: str = "127.0.0.1", port: int = 0,
                log_requests: bool = False, max_tokens: int = DEFAULT_MAX_TOKENS,
                read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                receive_timeout_s: float = DEFAULT_RECEIVE_TIMEOUT_S,
                max_connections: int = DEFAULT_MAX_CONNECTIONS, max_cache_bytes: int | None = None) -> BoundedServer:
    """An HTTP server (listening, not yet serving) answering for `model` under `name`; `port=0` picks a free
    port; a request may ask for at most `max_tokens` generated tokens and a KV cache of `max_cache_bytes`.
    A connection that sends nothing for `read_timeout_s` (a request never finished, or an idle keep-alive)
    is closed, and so is one that takes longer than `receive_timeout_s` to send a request, so slow or
    stalled clients cannot pile up threads; the wait for the model's lock and generation are not reads."""
    server = BoundedServer((host, port), Handler, max_connections)
    return attach(server, Service(model, name, max_tokens, max_cache_bytes), log_requests, read_timeout_s,
                  receive_timeout_s)


# ---- the command ----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """One `error:` line and exit status 2, as every command of the project reports a fixable mistake."""
        self.exit(2, f"error: {message} (see --help)\n")


def _option_error(args) -> str | None:
    """What is wrong with an option's value, checked before anything is loaded or bound."""
    for option, value in (("--max-tokens", args.max_tokens), ("--threads", args.threads),
                          ("--batch-size", args.batch_size), ("--max-connections", args.max_connections)):
        if value < 1:
            return f"{option} must be at least 1; got {value}"
    for option, value in (("--read-timeout", args.read_timeout), ("--receive-timeout", args.receive_timeout)):
        if not 0 < value < 10**9:  # NaN and inf too (a socket timeout must be a finite number)
            return f"{option} must be a positive number of seconds; got {value}"
    if not 0 <= args.port <= 65535:
        return f"--port must be between 0 and 65535 (0 picks a free port); got {args.port}"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        return f"--device must be cpu, cuda or cuda:N; got {args.device!r}"
    if args.max_cache_memory != "auto":
        try:
            parse_size(args.max_cache_memory)
        except ValueError:
            return (f"--max-cache-memory must be auto or a size of at least one byte, {SIZE_SYNTAX}; "
                    f"got {args.max_cache_memory!r}")
    return None


def _device_error(device: str) -> str | None:
    """Why `--device` cannot hold the model here, before the model is loaded onto it."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        why = "this torch has no CUDA support" if torch.version.cuda is None else "no CUDA device is visible"
        return f"--device {device}: CUDA is not available ({why}); use --device cpu"
    index = torch.device(device).index
    if index is not None and index >= torch.cuda.device_count():
        return (f"--device {device}: there is no such CUDA device ({torch.cuda.device_count()} visible, "
                f"numbered from 0)")
    return None


def _cache_budget(setting: str, device: str) -> tuple[int | None, str]:
    """Bytes of KV cache one request may hold (None: unchecked), and where the number comes from."""
    if setting != "auto":
        return parse_size(setting), "--max-cache-memory"
    room = headroom(device)
    if room is None:
        return None, "--max-cache-memory auto, but no memory limit of this process could be read: unchecked"
    size, which = room
    return int(size * AUTO_CACHE_SHARE), (f"--max-cache-memory auto: {AUTO_CACHE_SHARE:.0%} of {format_size(size)}, "
                                          f"{which} once the model is loaded")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="adaptive-rag serve",
                     description="Serve a local model as an OpenAI-compatible API (tokens and log-probabilities "
                                 "only). A request beyond a limit below is answered with an OpenAI error body "
                                 "naming it, before the model runs.")
    parser.add_argument("--model-dir", required=True, help="a materialised Hugging Face model directory")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="the weights' dtype in memory (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="rows decoded together for greedy requests (default: %(default)s)")
    parser.add_argument("--attention", default="fast", choices=("fast", "eager"),
                        help="the engine's attention path, as model.attention (default: %(default)s; eager runs any "
                             "causal LM)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on: 127.0.0.1 (this machine only) or 0.0.0.0 (every interface) "
                             "(default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: %(default)s)")
    parser.add_argument("--served-name", default=None, help="the model name clients ask for "
                                                            "(default: the model directory's name)")
    parser.add_argument("--log-requests", action="store_true", help="log every request to stderr")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="the most tokens a request may ask to generate (max_tokens or max_completion_tokens; "
                             "more is a 400 naming this limit); prompt + max_tokens must also fit the model's "
                             "context length (default: %(default)s)")
    parser.add_argument("--max-cache-memory", default="auto", metavar="SIZE",
                        help="the most KV-cache memory one request may hold: (positions the engine would cache for "
                             "it: fast path, prompt tokens + n x (max_tokens + 1) when sampling, min(prompts, "
                             "--batch-size) x (prompt + max_tokens + 1) greedy; eager path, n or min(prompts, "
                             "--batch-size) rows x (prompt + max_tokens)) x the bytes of one cached position; more "
                             "is a 400 naming both. SIZE is " + SIZE_SYNTAX + ", or auto: half "
                             "of what the tightest memory limit leaves once the model is loaded (the machine's "
                             "available memory, the process's cgroup limit or RLIMIT_AS; on CUDA the device's "
                             "free memory), printed at start-up (default: %(default)s)")
    parser.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S,
                        help="seconds a connection may send nothing (an unfinished request, an idle keep-alive) "
                             "before it is closed (default: %(default)s)")
    parser.add_argument("--receive-timeout", type=float, default=DEFAULT_RECEIVE_TIMEOUT_S,
                        help="seconds a client has to send one whole request (request line, headers and body) from "
                             "its first byte; a slower one is disconnected, however often it sends a byte "
                             "(default: %(default)s)")
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                        help="open connections at a time (one thread each); one more is answered 503 "
                             "(too_many_connections) at once and closed (default: %(default)s)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    problem = _option_error(args) or _device_error(args.device)
    if problem:
        return fail(problem)
    try:
        server = BoundedServer((args.host, args.port), Handler, args.max_connections)
    except OSError as e:
        return fail(listen_error(args.host, args.port, e))
    from .hf import HFModel

    try:
        model = HFModel(args.model_dir, dtype=args.dtype, device=args.device, threads=args.threads,
                        batch_size=args.batch_size, attention=args.attention)
        budget, source = _cache_budget(args.max_cache_memory, args.device)
    except AdaptiveRagError as e:
        server.server_close()
        return fail(str(e))
    name = args.served_name or Path(args.model_dir).resolve().name
    attach(server, Service(model, name, args.max_tokens, budget), log_requests=args.log_requests,
           read_timeout_s=args.read_timeout, receive_timeout_s=args.receive_timeout)
    limit = "unchecked" if budget is None else f"{budget} bytes ({format_size(budget)})"
    print(f"KV cache per request: at most {limit}; {source}", file=sys.stderr, flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    # Both signals explicitly: a process started in the background may inherit SIGINT as ignored.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    host, port = server.server_address[:2]
    print(f"serving {name} on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
