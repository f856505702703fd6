"""Black-box backend: any OpenAI-compatible API (this project's `serve`, vLLM, a hosted model).

A black-box model gives text, each token's text and log-probability, and nothing else: no entropy
over the vocabulary, no attentions, no hidden states, no gradients. `capabilities` says so, and a
method needing more is refused when the run is configured; `generate` re-checks as a backstop.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

from ..errors import ConfigError
from .base import (BLACK_BOX, NO_EXTRAS, Continuation, Extras, Prompt, SampleSet, SamplingParams, require,
                   row_limits, to_sample_set)

T = TypeVar("T")
R = TypeVar("R")
# The standard model-card fields, which are not the model's identity; `permission` is OpenAI's legacy
# permission list, which vLLM fills with a fresh id and time on every request (kept, it would make every
# job's call-cache keys differ).
CARD_FIELDS = {"id", "object", "created", "owned_by", "permission"}


class APIModel:
    """`LanguageModel` over an OpenAI-compatible API, through the official `openai` client.

    `base_url` includes the version path (`http://127.0.0.1:8000/v1`). Raw-text prompts go to
    `/v1/completions` (the prompt is `text + prefix`); chat prompts go to `/v1/chat/completions`, a
    non-empty prefix as a final assistant message with the vLLM extension `continue_final_message`.
    Greedy calls send `temperature: 0`; `sample` sends `n`, `seed`, `temperature`, `top_p` and
    `top_k` (an extension field; omitted when None). Continuation j of a sampling call uses
    seed + j on this project's server, as in-process.

    Retries: the openai client's own retry loop, with `max_retries` attempts after the first, retries
    connection errors, timeouts, 408, 409, 429 and every 5xx, with exponential backoff (0.5 s doubling
    to at most 8 s, with jitter) or the server's `retry-after`/`retry-after-ms` when it gives one. After
    the last retry the client's error (`openai.RateLimitError`, `openai.APIConnectionError`, ...) is
    raised. At most `concurrency` requests are in flight; results come back in input order.
    """

    capabilities = BLACK_BOX

    def __init__(self, base_url: str, model: str, api_key: str = "EMPTY", concurrency: int = 4,
                 max_retries: int = 5, timeout: float = 120.0):
        import openai

        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.concurrency = concurrency
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=max_retries,
                                    timeout=timeout)
        self._identity: dict | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"APIModel({self.base_url!r}, {self.model!r})"

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- identity ---------------------------------------------------------------------------------

    def identity(self) -> dict:
        """backend, base_url and model, plus what the server says about the model beyond the standard
        card fields (this project's server: `identity`, the served model's own identity with its weights hash)."""
        with self._lock:
            if self._identity is None:
                card = self._card()
                extra = {k: v for k, v in card.to_dict().items() if k not in CARD_FIELDS}
                self._identity = {"backend": "api", "base_url": self.base_url, "model": self.model, **extra}
            return dict(self._identity)

    def _card(self):
        """The served model's card: `GET /models/<model>`, or its entry in `GET /models` on a server that
        only lists its models (vLLM answers the first with a 404)."""
        import openai

        try:
            return self.client.models.retrieve(self.model)
        except openai.NotFoundError:
            cards = list(self.client.models.list())
        for card in cards:
            if card.id == self.model:
                return card
        served = ", ".join(repr(c.id) for c in cards) or "none"
        raise ConfigError(f"model.api.model: {self.base_url} does not serve {self.model!r} (it serves: {served})")

    # ---- the LanguageModel protocol ---------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        require(self.capabilities, extras.needs(), "generate", "api")
        stop = [s for s in stop if s]
        asked = list(zip(prompts, row_limits(max_new_tokens, len(prompts))))
        return self._map(lambda pair: self._call(pair[0], pair[1], stop, {"temperature": 0.0})[0], asked)

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[Continuation]:
        require(self.capabilities, extras.needs(), "sample", "api")
        decoding = {"temperature": params.temperature, "n": params.n, "seed": params.seed}
        if params.top_p is not None:
            decoding["top_p"] = params.top_p
        extra = {"top_k": params.top_k} if params.top_k is not None else {}
        return self._call(prompt, max_new_tokens, [s for s in stop if s], decoding, extra)

    def sample_batch(self, prompts: Sequence[Prompt], params: SamplingParams, max_new_tokens: int,
                     stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[SampleSet]:
        require(self.capabilities, extras.needs(), "sample_batch", "api")
        return self._map(lambda p: to_sample_set(self.sample(p, params, max_new_tokens, stop)), list(prompts))

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        """Log-probabilities of the continuation's tokens: the whole text is echoed with `max_tokens: 0`,
        and the tokens kept are those holding any character of the continuation (so, like `HFModel`, a
        token that merges the prompt's last characters with the continuation's first is scored)."""
        if prompt.messages is None:
            head = prompt.text + prompt.prefix
            response = self.client.completions.create(
                model=self.model, prompt=head + continuation, echo=True, max_tokens=0, logprobs=0, temperature=0)
            lp = response.choices[0].logprobs
            boundary = len(head)
            return [float(v) for t, v, o in zip(lp.tokens, lp.token_logprobs, lp.text_offset)
                    if v is not None and o + len(t) > boundary]
        response = self.client.chat.completions.create(
            model=self.model, messages=_messages(prompt.messages, prompt.prefix + continuation), max_tokens=0,
            temperature=0, logprobs=True,
            extra_body={"continue_final_message": True, "add_generation_prompt": False, "echo": True})
        content = response.choices[0].logprobs.content or []
        offsets = [(item.model_extra or {}).get("text_offset") for item in content]
        if any(o is None for o in offsets):  # a server without offsets: count back from the end
            end, offsets = len(prompt.prefix + continuation), []
            for item in reversed(content):
                end -= len(item.token)
                offsets.append(end)
            offsets.reverse()
        boundary = len(prompt.prefix)
        return [float(item.logprob) for item, o in zip(content, offsets) if o + len(item.token) > boundary]

    # ---- requests ---------------------------------------------------------------------------------

    def _call(self, prompt: Prompt, max_new_tokens: int, stop: list[str], decoding: dict,
              extra: dict | None = None) -> list[Continuation]:
        extra = dict(extra or {})
        common = {"model": self.model, "max_tokens": max_new_tokens, "stop": stop or None, **decoding}
        if prompt.messages is None:
            response = self.client.completions.create(prompt=prompt.text + prompt.prefix, logprobs=1,
                                                      extra_body=extra or None, **common)
            out = []
            for choice in sorted(response.choices, key=lambda c: c.index):
                lp = choice.logprobs
                tokens = list(lp.tokens) if lp and lp.tokens else []
                logprobs = [float(v) for v in lp.token_logprobs] if lp and lp.token_logprobs else []
                out.append(self._continuation(choice, choice.text or "", tokens, logprobs, stop, response))
            return out
        if prompt.prefix:
            messages = _messages(prompt.messages, prompt.prefix)
            extra.update({"continue_final_message": True, "add_generation_prompt": False})
        else:
            messages = _messages(prompt.messages)
        response = self.client.chat.completions.create(messages=messages, logprobs=True,
                                                       extra_body=extra or None, **common)
        out = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            content = (choice.logprobs.content if choice.logprobs else None) or []
            out.append(self._continuation(choice, choice.message.content or "", [c.token for c in content],
                                          [float(c.logprob) for c in content], stop, response))
        return out

    @staticmethod
    def _continuation(choice, text: str, tokens: list[str], logprobs: list[float], stop: list[str],
                      response) -> Continuation:
        usage = response.usage
        return Continuation(text=text, tokens=tokens, logprobs=logprobs,
                            finish_reason=_finish(choice, tokens, stop),
                            prompt_tokens=usage.prompt_tokens if usage is not None else None,
                            meta={"system_fingerprint": response.system_fingerprint}
                            if getattr(response, "system_fingerprint", None) else {})

    def _map(self, fn: Callable[[T], R], items: list[T]) -> list[R]:
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))


def _messages(messages: Sequence[tuple[str, str]], final_assistant: str | None = None) -> list[dict]:
    out = [{"role": role, "content": content} for role, content in messages]
    if final_assistant is not None:
        out.append({"role": "assistant", "content": final_assistant})
    return out


def _finish(choice, tokens: list[str], stop: list[str]) -> str:
    """OpenAI reports "stop" both for a stop string and for end of sequence; the protocol tells them apart.
    vLLM's (and this project's server's) `stop_reason` says which (null: end of sequence); without it,
    a stop string among the generated tokens means one ended the text."""
    reason = choice.finish_reason
    if reason == "length":
        return "length"
    if reason != "stop":
        return str(reason)
    extra = choice.model_extra or {}
    if "stop_reason" in extra:
        return "eos" if extra["stop_reason"] is None else "stop"
    generated = "".join(tokens)
    return "stop" if any(s in generated for s in stop) else "eos"
