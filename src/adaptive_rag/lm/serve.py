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

No single request can take the server down: what it may ask is checked before the model runs, each
refusal naming the field and the limit (docs/engine.md#serve-limits-and-errors lists them): the bodies
are pydantic models (`CompletionRequest`, `ChatRequest`: types, ranges, finite numbers); `--max-tokens`,
the model's context length (a prompt too long is refused before, or without, tokenising), MAX_PROMPTS,
MAX_STOP, valid Unicode, MAX_BODY; the KV cache under `--max-cache-memory` and the request's whole peak
(that cache plus the largest transient of its passes, `memory.request_estimate`) under
`--max-request-memory`. A client that hangs up abandons its request: the model asks before every decoding
step whether the client is gone (`HFModel.stop_requested`), so the lock is free again one step later.

HTTP is uvicorn's (h11) under Starlette. uvicorn bounds open connections (`--max-connections`, its
`limit_concurrency`), the idle time between requests (`--read-timeout`, its `timeout_keep_alive`) and the
request head (`connections.MAX_HEAD`), and refuses a malformed request itself; `connections` adds the
deadlines it lacks. Model work runs in a worker thread, one request at a time under an asyncio lock, so the
event loop goes on accepting, refusing and timing out connections. Starlette rather than FastAPI: every
body is read bounded and checked before pydantic sees it, and every refusal is our OpenAI error body, which
is what FastAPI's own request parsing would have to be turned off for.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import secrets
import signal
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Sequence

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import AdaptiveRagError
from .base import Continuation, GenerationStopped, LanguageModel, Prompt, SamplingParams
from .connections import (DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_S, DEFAULT_RECEIVE_TIMEOUT_S, MAX_HEAD,
                          DeadlineProtocol, bound_socket, listen_error)
from .memory import (SIZE_SYNTAX, Shape, cache_estimate, format_size, headroom, parse_size, position_bytes,
                     request_estimate, return_freed_tensors)

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_CHAT_TOKENS = 256
DEFAULT_MAX_TOKENS = 1024  # --max-tokens: the most tokens one request may ask for (the project asks <= 120)
AUTO_CACHE_SHARE = 0.5  # --max-cache-memory auto: this share of the headroom
AUTO_REQUEST_SHARE = 0.9  # --max-request-memory auto: this share (the estimate is an upper bound already)
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


class RequestError(Exception):
    """An error the client caused (or may see): answered as an OpenAI error body."""

    def __init__(self, message: str, status: int = 400, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict:
        """The OpenAI error body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class ClientGone(Exception):
    """The client closed its connection while its request waited, generated or was being received: nobody
    to answer."""


# ---- request bodies -------------------------------------------------------------------------------

BOUNDS: dict[str, tuple[float, float | None]] = {}  # a number field's range, for its message


def _number(key: str, kind: type, low: float, high: float | None = None):
    """An optional, strictly typed number field in [low, high] (finite: `json.loads` reads NaN and Infinity)."""
    BOUNDS[key] = (low, high)
    return Annotated[kind, Field(ge=low, le=high, allow_inf_nan=False)] | None


class _Decoding(BaseModel):
    """The fields both endpoints read. Strict: a boolean or a string is not a number. Fields beyond the
    model's are checked by `_check_fields` (some are allowed at their neutral value)."""

    model_config = ConfigDict(strict=True, extra="allow")
    model: str | None = None
    max_tokens: _number("max_tokens", int, 0) = None
    temperature: _number("temperature", float, 0, 2) = None
    top_p: _number("top_p", float, 0, 1) = None
    top_k: _number("top_k", int, -1) = None
    n: _number("n", int, 1, MAX_N) = None
    seed: _number("seed", int, -INT64, INT64 - 1) = None
    stop: str | list[str] | None = None


class CompletionRequest(_Decoding):
    prompt: str | list[str] | None = None
    logprobs: _number("logprobs", int, 0, 20) = None
    echo: bool | None = None
    best_of: int | None = None


class ChatRequest(_Decoding):
    messages: list | None = None  # each message is checked by `_messages`, naming its index
    max_completion_tokens: _number("max_completion_tokens", int, 0) = None
    logprobs: bool | None = None
    top_logprobs: _number("top_logprobs", int, 0, 20) = None
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None
    echo: bool | None = None


# What a field of the wrong type must be, where "a number" or "true or false" would not say it.
SHAPES = {
    "model": "'model' is required (a string)",
    "prompt": "'prompt' is required: a string or a non-empty list of strings (token-id prompts are not supported)",
    "messages": "'messages' is required: a non-empty list of {role, content}",
    "stop": "'stop' must be a string or a list of strings; got {value!r}",
}


def parse_request(kind: type[_Decoding], body: dict) -> _Decoding:
    """`body` as a request model, or the RequestError that names its first mistake."""
    _check_fields(body, set(kind.model_fields))
    try:
        return kind.model_validate(body)
    except ValidationError as e:
        error = e.errors()[0]
    key, value, why = str(error["loc"][0]), error["input"], error["type"]
    if key in SHAPES:
        raise RequestError(SHAPES[key].format(value=body.get(key)), param=key) from None
    if why == "finite_number":
        message = f"'{key}' must be a finite number; got {value!r}"
    elif why in ("greater_than_equal", "less_than_equal"):
        low, high = BOUNDS[key]
        message = f"'{key}' must be {f'at least {low}' if high is None else f'between {low} and {high}'}; got {value!r}"
    elif why.startswith("bool"):
        message = f"'{key}' must be true or false; got {value!r}"
    elif why.startswith("int"):
        message = f"'{key}' must be an integer; got {value!r}"
    else:
        message = f"'{key}' must be a number; got {value!r}"
    raise RequestError(message, param=key) from None


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
    def of(cls, request: _Decoding, max_tokens: int) -> "Decoding":
        stop = request.stop
        stop = [stop] if isinstance(stop, str) else stop or []
        if len(stop) > MAX_STOP:
            raise RequestError(f"'stop' has {len(stop)} strings; at most {MAX_STOP} are allowed", param="stop")
        return cls(
            max_tokens=max_tokens,
            temperature=1.0 if request.temperature is None else float(request.temperature),
            top_p=request.top_p,
            top_k=None if request.top_k in (None, -1, 0) else request.top_k,  # vLLM: -1 (and 0) switch top-k off
            n=1 if request.n is None else request.n,
            seed=request.seed,
            stop=tuple(s for s in stop if s),
        )


# ---- the service (HTTP-independent) ------------------------------------------------------------


class Service:
    """Answers OpenAI-style request bodies with a `LanguageModel`.

    `completions` and `chat` check a body without touching the model and return the request's turn: the
    model work, which `run` does, one turn at a time (the caller's lock; `serve`'s is an asyncio lock).
    `max_tokens` caps what one request may ask to generate; `context` (the model's `context_length`,
    when it has one) caps prompt + generation; `max_cache_bytes` caps the KV cache one request holds and
    `max_request_bytes` its whole peak (for a model whose shape is known). All are checked before the model
    runs, so no request can hold the lock for longer than one bounded generation, nor take more memory
    than allowed.
    """

    def __init__(self, model: LanguageModel, name: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                 max_cache_bytes: int | None = None, max_request_bytes: int | None = None):
        self.model, self.name, self.max_tokens, self.max_cache_bytes = model, name, max_tokens, max_cache_bytes
        self.max_request_bytes = max_request_bytes
        self.position_bytes = position_bytes(model)
        self.shape = Shape.of(model)
        self.fast = getattr(model, "decoder", None) is not None
        self.context: int | None = getattr(model, "context_length", None)
        self.token_chars = _longest_token(model)
        self.log: Callable[[str], None] | None = None  # with --log-requests: when each generation starts
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

    def _check_model(self, model: str | None) -> None:
        if not model:
            raise RequestError("'model' is required (a string)", param="model")
        if model != self.name:
            raise RequestError(f"The model `{model}` does not exist (this server serves `{self.name}`)",
                               status=404, param="model", code="model_not_found")

    # -- limits (checked before the model runs)

    def _max_tokens(self, request: _Decoding, key: str, default: int) -> int:
        value = getattr(request, key)
        if value is None:
            return min(default, self.max_tokens)
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

    def _check_memory(self, prompt_tokens: list[int | None], decoding: Decoding, echo: bool) -> None:
        """Refuse a request whose peak (KV cache and the largest transient of its passes: `request_estimate`)
        would not fit `max_request_bytes`, before the model runs any of it."""
        if self.max_request_bytes is None or self.shape is None or None in prompt_tokens:
            return
        need, how = request_estimate(self.shape, self.position_bytes or self.shape.position_bytes, prompt_tokens,
                                     decoding.n, decoding.max_tokens, decoding.temperature > 0, self.fast,
                                     getattr(self.model, "batch_size", 1), echo)
        if need > self.max_request_bytes:
            raise RequestError(
                f"this request needs {need} bytes ({format_size(need)}) at its peak, {how}: more than this "
                f"server's --max-request-memory of {self.max_request_bytes} bytes "
                f"({format_size(self.max_request_bytes)}); ask for fewer samples (n), fewer tokens (max_tokens) "
                f"or a shorter prompt, or start the server with a larger --max-request-memory",
                code="request_memory_exceeded")

    def run(self, turn: Callable[[Callable[[], bool] | None], dict],
            disconnected: Callable[[], bool] | None = None) -> dict:
        """A request's turn at the model (the caller lets one run at a time), with a stoppable model's
        `stop_requested` asking whether its client is gone, so an abandoned request gives the model back
        within one decoding step."""
        if disconnected is not None and disconnected():
            raise ClientGone("client disconnected while its request waited; dropped before generation")
        stoppable = hasattr(self.model, "stop_requested")
        if stoppable:
            self.model.stop_requested = disconnected
        try:
            return turn(disconnected)
        finally:
            if stoppable:
                self.model.stop_requested = None

    # -- /v1/completions

    def completions(self, body: dict) -> Callable[[Callable[[], bool] | None], dict]:
        """Check a /v1/completions body (no model work); its turn at the model, for `run`."""
        request = parse_request(CompletionRequest, body)
        self._check_model(request.model)
        prompts = _prompts(request.prompt)
        max_tokens = self._max_tokens(request, "max_tokens", DEFAULT_COMPLETION_TOKENS)
        decoding = Decoding.of(request, max_tokens)
        if request.best_of is not None and request.best_of != decoding.n:
            raise RequestError("'best_of' other than n is not supported", param="best_of",
                               code="unsupported_parameter")
        for p in prompts:
            self._check_chars(len(p), "prompt")
        return lambda disconnected: self._complete(prompts, decoding, request.logprobs, bool(request.echo),
                                                   disconnected)

    def _complete(self, prompts: list[str], decoding: Decoding, logprobs: int | None, echo: bool,
                  disconnected: Callable[[], bool] | None) -> dict:
        requests = [Prompt(text=p) for p in prompts]
        counts = []
        for request in requests:  # up to MAX_PROMPTS x ~1 s of tokenising at the character bound
            if disconnected is not None and disconnected():
                raise ClientGone("client disconnected; dropped while its prompts were counted")
            counts.append(self._check_tokens(request, decoding.max_tokens, "prompt"))
        self._check_cache(counts, decoding)
        self._check_memory(counts, decoding, echo)
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

    def chat(self, body: dict) -> Callable[[Callable[[], bool] | None], dict]:
        """Check a /v1/chat/completions body (no model work); its turn at the model, for `run`."""
        request = parse_request(ChatRequest, body)
        self._check_model(request.model)
        messages = _messages(request.messages, self.context)
        key = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
        max_tokens = self._max_tokens(request, key, DEFAULT_CHAT_TOKENS)
        decoding = Decoding.of(request, max_tokens)
        if request.top_logprobs:
            raise RequestError("'top_logprobs' is not supported (only the chosen token's log-probability is "
                               "given); leave it unset or 0", param="top_logprobs", code="unsupported_parameter")
        generation_prompt, echo = request.add_generation_prompt, bool(request.echo)
        if request.continue_final_message:
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
        return lambda disconnected: self._chat(prompt, decoding, bool(request.logprobs), echo)

    def _chat(self, prompt: Prompt, decoding: Decoding, logprobs: bool, echo: bool) -> dict:
        counts = [self._check_tokens(prompt, decoding.max_tokens, "messages")]
        self._check_cache(counts, decoding)
        self._check_memory(counts, decoding, echo)
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

    # -- model calls (in a request's turn)

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


class JSON(Response):
    media_type = "application/json"

    def render(self, content) -> bytes:
        # backslashreplace: a lone surrogate, should one reach a reply, is written as its JSON escape
        return json.dumps(content, ensure_ascii=False).encode("utf-8", "backslashreplace")


def error_reply(error: RequestError, close: bool = False) -> JSON:
    headers = {"x-should-retry": "false"} if error.status == 500 else {}  # it would fail the same way again
    if close:  # the rest of the request was not read: the connection cannot carry another
        headers["connection"] = "close"
    return JSON(error.body(), status_code=error.status, headers=headers)


async def read_body(request: Request) -> bytes:
    """The request's body, at most MAX_BODY bytes (a 413 beyond, judged on Content-Length when it is given:
    h11 has checked it is one number)."""
    length = request.headers.get("content-length")
    if length is not None and "transfer-encoding" in request.headers:  # h11 would go by Transfer-Encoding
        raise RequestError("a request may not carry both Transfer-Encoding and Content-Length (its length would "
                           "be ambiguous); send the JSON body with Content-Length alone", status=400, code="framing")
    if length is not None and int(length) > MAX_BODY:
        raise RequestError(f"request body too large: {int(length)} bytes; at most {MAX_BODY}", status=413)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise RequestError(f"request body too large: more than {MAX_BODY} bytes sent (chunked); at most "
                                   f"{MAX_BODY}", status=413)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone("client disconnected while sending its request") from None
    return b"".join(chunks)


def parse_body(raw: bytes) -> dict:
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


class App:
    """The routes, over a `Service`: bodies read and checked off the event loop's hot path, model turns one
    at a time under `lock`, each in a worker thread, stopped when its client goes or the server stops."""

    def __init__(self, service: Service, stopping: threading.Event):
        self.service, self.stopping = service, stopping
        self.lock = asyncio.Lock()
        self.asgi = Starlette(routes=[
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{name:path}", self.model, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/health", self.health, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ], exception_handlers={HTTPException: self.no_route})

    async def no_route(self, request: Request, exc: HTTPException) -> JSON:
        found = exc.status_code == 404
        message = f"no route {request.method} {request.url.path}" + ("" if found else f" ({exc.detail})")
        return error_reply(RequestError(message, status=exc.status_code, code="not_found" if found else None),
                           close=request.method == "POST")  # its body is left unread

    async def health(self, request: Request) -> JSON:
        return JSON({"status": "ok"})

    async def models(self, request: Request) -> JSON:
        return JSON(self.service.models())

    async def model(self, request: Request) -> JSON:
        name = request.path_params["name"].rstrip("/")
        if not name:  # /v1/models/
            return await self.models(request)
        if name != self.service.name:
            return error_reply(RequestError(f"The model `{name}` does not exist", status=404,
                                            code="model_not_found"))
        return JSON(self.service.model_card())

    async def completions(self, request: Request) -> Response:
        return await self.answer(request, self.service.completions)

    async def chat(self, request: Request) -> Response:
        return await self.answer(request, self.service.chat)

    async def answer(self, request: Request, check: Callable[[dict], Callable]) -> Response:
        """Read and check the body, wait for the model, run the request's turn; every outcome an OpenAI
        reply (a client that left gets none: stderr says so)."""
        gone, watcher = threading.Event(), None
        try:
            raw = await read_body(request)
            turn = await asyncio.to_thread(lambda: check(parse_body(raw)))
            # Once the body is read, uvicorn's next message for the request is `http.disconnect`, when the
            # connection closes.
            watcher = asyncio.create_task(request.receive())
            watcher.add_done_callback(lambda task: task.cancelled() or gone.set())
            async with self.lock:
                return JSON(await asyncio.to_thread(self.service.run, turn,
                                                    lambda: gone.is_set() or self.stopping.is_set()))
        except ClientGone as e:
            if not gone.is_set() and self.stopping.is_set():  # stopped by the server's shutdown, not the client
                return error_reply(RequestError("this server is shutting down; the generation was stopped, retry "
                                                 "elsewhere or later", status=503, type_="server_error"), close=True)
            # nobody to answer; say so on stderr, where operators look (what is sent to a closed client is dropped)
            print(f"{e} ({request.method} {request.url.path})", file=sys.stderr, flush=True)
            return Response(status_code=499, headers={"connection": "close"})
        except RequestError as e:
            return error_reply(e, close=e.status == 413 or e.code == "framing")
        except AdaptiveRagError as e:  # the model refused this input (no chat template, empty text, ...)
            return error_reply(RequestError(str(e)))
        except Exception as e:  # noqa: BLE001 - never a traceback to the client; it goes to our stderr
            traceback.print_exc(file=sys.stderr)
            return error_reply(RequestError(f"internal server error ({type(e).__name__})", status=500,
                                            type_="server_error"))
        finally:
            if watcher is not None:
                watcher.cancel()


class Server(uvicorn.Server):
    """uvicorn's server, saying `serving <name> on <url>` once it listens, and telling a running generation
    to stop when it shuts down (SIGTERM, SIGINT) rather than waiting for it."""

    def __init__(self, config: uvicorn.Config, ready: str, stopping: threading.Event):
        super().__init__(config)
        self.ready, self.stopping = ready, stopping

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.ready, flush=True)

    async def shutdown(self, sockets=None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def make_server(service: Service, sock, log_requests: bool = False, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                receive_timeout_s: float = DEFAULT_RECEIVE_TIMEOUT_S,
                max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Server:
    """A uvicorn server answering for `service` on the bound socket `sock` (`run()` listens and serves). A
    connection silent for `read_timeout_s`, or slower than `receive_timeout_s` to send a request, is closed
    (`DeadlineProtocol`); beyond `max_connections` open at once, a request is answered 503."""
    if log_requests:
        service.log = lambda message: print(message, file=sys.stderr, flush=True)
    stopping = threading.Event()
    protocol = type("Deadlines", (DeadlineProtocol,), {"read_timeout": read_timeout_s,
                                                        "receive_timeout": receive_timeout_s})
    config = uvicorn.Config(App(service, stopping).asgi, http=protocol, lifespan="off", log_level=(
        "info" if log_requests else "warning"), access_log=log_requests, use_colors=False, server_header=False,
        limit_concurrency=max_connections + 1,  # uvicorn counts the asking connection itself
        timeout_keep_alive=read_timeout_s, timeout_graceful_shutdown=10, h11_max_incomplete_event_size=MAX_HEAD)
    host, port = sock.getsockname()[:2]
    return Server(config, f"serving {service.name} on http://{host}:{port}/v1", stopping)


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
        if not 0 < value < 10**9:  # NaN and inf too (a timer needs a finite number)
            return f"{option} must be a positive number of seconds; got {value}"
    if not 0 <= args.port <= 65535:
        return f"--port must be between 0 and 65535 (0 picks a free port); got {args.port}"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        return f"--device must be cpu, cuda or cuda:N; got {args.device!r}"
    for option, value in (("--max-cache-memory", args.max_cache_memory),
                          ("--max-request-memory", args.max_request_memory)):
        if value != "auto":
            try:
                parse_size(value)
            except ValueError:
                return f"{option} must be auto or a size of at least one byte, {SIZE_SYNTAX}; got {value!r}"
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


def _budget(option: str, setting: str, share: float, room: tuple[int, str] | None) -> tuple[int | None, str]:
    """Bytes one request may take under `option` (None: unchecked), and where the number comes from."""
    if setting != "auto":
        return parse_size(setting), option
    if room is None:
        return None, f"{option} auto, but no memory limit of this process could be read: unchecked"
    size, which = room
    return int(size * share), f"{option} auto: {share:.0%} of {format_size(size)}, {which} once the model is loaded"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="adaptive-rag serve",
                     description="Serve a local model as an OpenAI-compatible API (tokens and log-probabilities "
                                 "only), on uvicorn. A request beyond a limit below is answered with an OpenAI "
                                 "error body naming it, before the model runs.")
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
                        help="the most KV-cache memory one request may hold (the positions the engine caches for it x "
                             "the bytes of one: docs/engine.md); more is a 400 naming both. SIZE is " + SIZE_SYNTAX +
                             ", or auto: half of what the tightest memory limit (available memory, cgroup, RLIMIT_AS; "
                             "on CUDA the device's free memory) leaves once the model is loaded (default: %(default)s)")
    parser.add_argument("--max-request-memory", default="auto", metavar="SIZE",
                        help="the most memory one request may take at its peak: that cache plus its prefill, a "
                             "decoding step's scores and logits, echo's pass; more is a 400 naming both. SIZE as "
                             f"above, or auto: {AUTO_REQUEST_SHARE * 100:.0f}%% of that room (default: %(default)s)")
    parser.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S,
                        help="seconds a connection may send nothing (a new connection, an unfinished request, an idle "
                             "keep-alive: uvicorn's timeout_keep_alive) before it is closed (default: %(default)s)")
    parser.add_argument("--receive-timeout", type=float, default=DEFAULT_RECEIVE_TIMEOUT_S,
                        help="seconds a client has to send one whole request (request line, headers and body) from "
                             "its first byte; a slower one is disconnected, however often it sends a byte "
                             "(default: %(default)s)")
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                        help="open connections at a time (uvicorn's limit_concurrency); a request on one more is "
                             "answered 503 and its connection closed (default: %(default)s)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    problem = _option_error(args) or _device_error(args.device)
    if problem:
        return fail(problem)
    try:
        sock = bound_socket(args.host, args.port)
    except OSError as e:
        return fail(listen_error(args.host, args.port, e))
    from .hf import HFModel

    allocator = return_freed_tensors()  # before any tensor: the estimates bound live tensors, not freed ones kept
    try:
        model = HFModel(args.model_dir, dtype=args.dtype, device=args.device, threads=args.threads,
                        batch_size=args.batch_size, attention=args.attention)
        room = headroom(args.device) if "auto" in (args.max_cache_memory, args.max_request_memory) else None
        cache, cache_source = _budget("--max-cache-memory", args.max_cache_memory, AUTO_CACHE_SHARE, room)
        whole, whole_source = _budget("--max-request-memory", args.max_request_memory, AUTO_REQUEST_SHARE, room)
    except AdaptiveRagError as e:
        sock.close()
        return fail(str(e))
    name = args.served_name or Path(args.model_dir).resolve().name
    server = make_server(Service(model, name, args.max_tokens, cache, whole), sock, args.log_requests,
                         args.read_timeout, args.receive_timeout, args.max_connections)
    for what, budget, source in (("KV cache", cache, cache_source), ("memory", whole, whole_source)):
        limit = "unchecked" if budget is None else f"{budget} bytes ({format_size(budget)})"
        print(f"{what} per request: at most {limit}; {source}", file=sys.stderr, flush=True)
    print(f"memory: {allocator}", file=sys.stderr, flush=True)
    # uvicorn re-raises the signal that stopped it once it has shut down; handled here, that ends `run` with
    # status 0. Both signals explicitly: a process started in the background may inherit SIGINT as ignored.
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
