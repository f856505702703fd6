"""Encoder-decoder backend (transformers `AutoModelForSeq2SeqLM`, e.g. FLAN-T5): greedy and seeded
sampled continuations with token log-probabilities, entropies and logits' logsumexp, and forced-token
scoring. `model.architecture: seq2seq` selects it.

Why it is built this way:
- The methods that need only generated text and token probabilities (wo-RAG, SR-RAG, FL-RAG, FS-RAG,
  IRCoT, FLARE, SUGAR's strategies) run unchanged on it; attentions over the prompt, hidden states and
  input gradients are a decoder-only model's, so this backend does not offer them and params
  validation refuses a method that needs them (`SEQ2SEQ` in `capabilities`).
- The prompt goes to the encoder; `Prompt.prefix` (answer text already written) is forced into the
  decoder after its start token, so a method that continues an answer continues it here too.
- The encoder runs once per batch; decoding advances in lockstep with its KV cache. Rows are grouped
  by the length of their forced decoder prefix, so no decoder row is ever padded: a row's numbers
  depend only on its prompt and the batch's encoder padding, as on the causal backend.
- Token choice, stopping and the per-token facts are `rows.choose` and `rows.RowState`, the causal
  backend's own, so the two backends stop and record alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from .base import (NO_EXTRAS, Attribution, Continuation, Extras, GenerationStopped, IGSettings, Prompt, SampleSet,
                   SamplingParams, require, row_limits, to_sample_set)
from .capabilities import DTYPES, SEQ2SEQ
from .hf import token_texts
from .rows import RowState, choose


class Seq2SeqModel:
    capabilities = SEQ2SEQ

    def __init__(self, model_dir: str | Path, dtype: str = "float32", device: str = "cpu", threads: int = 1,
                 seed: int = 0, batch_size: int = 8, loaded: tuple | None = None):
        """`loaded`: a (model, tokenizer) pair already in memory; `model_dir` then only names it."""
        import torch
        from transformers import AutoModelForSeq2SeqLM

        from .models import load_in_process

        model_dir = Path(model_dir)
        if loaded is None and not (model_dir / "config.json").is_file():
            raise InputError(f"{model_dir}: not a model directory (run the model step first)")
        if dtype not in DTYPES:
            raise InputError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        if loaded is None:
            from transformers import AutoConfig

            if not getattr(AutoConfig.from_pretrained(model_dir), "is_encoder_decoder", False):
                raise InputError(f"{model_dir}: a decoder-only model, but model.architecture is seq2seq; "
                                 "set model.architecture: causal")
        self.torch, self.device, self.dtype, self.batch_size = torch, device, dtype, batch_size
        self.model_dir = model_dir
        self.tokenizer, self.model = load_in_process(model_dir, dtype, device, threads, seed, loaded,
                                                     AutoModelForSeq2SeqLM)
        config = self.model.config
        self.start_id = config.decoder_start_token_id if config.decoder_start_token_id is not None \
            else self.tokenizer.pad_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start_id
        self.eos_ids = {i for i in (self.tokenizer.eos_token_id, config.eos_token_id) if isinstance(i, int)}
        self.forward_tokens = 0
        self.stop_requested: Callable[[], bool] | None = None

    # ---- identity and prompts -------------------------------------------------------------------

    def identity(self) -> dict:
        from .models import recorded_weights

        weights = recorded_weights(self.model_dir)
        return {"backend": "hf", "architecture": "seq2seq", "model": self.model_dir.name, "weights_sha256": weights,
                "dtype": self.dtype, "device": self.device.split(":")[0], "batch_size": self.batch_size}

    @property
    def context_length(self) -> int | None:
        """The tokenizer's `model_max_length` (T5's relative positions set no limit of their own)."""
        limit = getattr(self.tokenizer, "model_max_length", None)
        return limit if isinstance(limit, int) and 0 < limit < 10**9 else None

    @property
    def end_of_turn_text(self) -> str | None:
        return self.tokenizer.eos_token

    def encode(self, prompt: Prompt) -> tuple[list[int], list[int]]:
        """The encoder's token ids, and the decoder's forced ids (start token + the answer prefix)."""
        if prompt.messages is not None:
            raise InputError("model.architecture: seq2seq reads plain text; set model.prompt_format: raw")
        source = list(self.tokenizer(prompt.text)["input_ids"])
        forced = [self.start_id]
        if prompt.prefix:
            forced += list(self.tokenizer(prompt.prefix, add_special_tokens=False)["input_ids"])
        return source, forced

    def token_texts(self, ids: list[int]) -> list[str]:
        return token_texts(self.tokenizer, ids)

    # ---- generation ------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        require(self.capabilities, extras.needs(), "generate", "seq2seq")
        limits = row_limits(max_new_tokens, len(prompts))
        encoded = [self.encode(p) for p in prompts]
        results: list[Continuation | None] = [None] * len(prompts)
        groups: dict[int, list[int]] = {}
        for index, (_, forced) in enumerate(encoded):
            groups.setdefault(len(forced), []).append(index)
        for rows in groups.values():
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start:start + self.batch_size]
                for index, result in zip(chunk, self._run([encoded[i] for i in chunk], [limits[i] for i in chunk],
                                                          stop, extras, None)):
                    results[index] = result
        return results

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """The n continuations as n rows of one batch, continuation j seeded seed + j."""
        require(self.capabilities, extras.needs(), "sample", "seq2seq")
        return self._run([self.encode(prompt)] * params.n, [max_new_tokens] * params.n, stop, extras,
                         (params, list(range(params.n))))

    def sample_batch(self, prompts: Sequence[Prompt], params: SamplingParams, max_new_tokens: int,
                     stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[SampleSet]:
        return [to_sample_set(self.sample(p, params, max_new_tokens, stop, extras)) for p in prompts]

    def _run(self, encoded: list[tuple[list[int], list[int]]], limits: list[int], stop: Sequence[str],
             extras: Extras, sampling: tuple[SamplingParams, list[int]] | None) -> list[Continuation]:
        torch = self.torch
        batch = len(encoded)
        width = max(len(source) for source, _ in encoded)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for row, (source, _) in enumerate(encoded):  # right-padded: the encoder attends to real tokens only
            input_ids[row, :len(source)] = torch.tensor(source)
            mask[row, :len(source)] = 1
        forced = torch.tensor([f for _, f in encoded], dtype=torch.long)
        generators, params = None, None
        if sampling is not None:
            params, rows = sampling
            generators = [torch.Generator().manual_seed(params.seed + j) for j in rows]
        states = [RowState(len(source)) for source, _ in encoded]
        active = list(range(batch))
        with torch.inference_mode():
            mask = mask.to(self.device)
            encoder = self.model.get_encoder()(input_ids=input_ids.to(self.device), attention_mask=mask)
            self.forward_tokens += int(mask.sum())
            out = self.model(encoder_outputs=encoder, attention_mask=mask, decoder_input_ids=forced.to(self.device),
                             use_cache=True)
            self.forward_tokens += forced.numel()
            step = 0
            while active:
                if self.stop_requested is not None and self.stop_requested():
                    raise GenerationStopped(step)
                chosen = choose(out.logits[:, -1, :], extras,
                                None if generators is None else [generators[r] for r in active], params)
                keep, fed = [], []
                for i, row in enumerate(active):
                    # a row allowed no tokens leaves before its first
                    feed = states[row].take(chosen, i, self, stop, limits[row], False, ()) if limits[row] > 0 else None
                    if feed is not None:
                        keep.append(i)
                        fed.append(feed[0])
                step += 1
                if not keep:
                    break
                if len(keep) != len(active):  # finished rows leave the cache, the encoder states and the mask
                    index = torch.tensor(keep, dtype=torch.long, device=self.device)
                    out.past_key_values.batch_select_indices(index)
                    encoder.last_hidden_state = encoder.last_hidden_state[index]
                    mask = mask[index]
                out = self.model(encoder_outputs=encoder, attention_mask=mask,
                                 decoder_input_ids=torch.tensor([[t] for t in fed], device=self.device),
                                 past_key_values=out.past_key_values, use_cache=True)
                self.forward_tokens += len(keep)
                active = [active[i] for i in keep]
        return [state.result(self, stop, extras) for state in states]

    # ---- scoring ---------------------------------------------------------------------------------

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        """Log-probabilities of the continuation's tokens, forced into the decoder after the prompt's
        answer prefix (one teacher-forced pass)."""
        source, forced = self.encode(prompt)
        _, whole = self.encode(prompt.with_prefix(prompt.prefix + continuation))
        start = len(forced)
        if whole[:start] != forced:  # the prefix's last token merged with the continuation's first characters
            start = next((i for i, (a, b) in enumerate(zip(whole, forced)) if a != b), len(forced))
        if start >= len(whole):
            raise InputError("the continuation adds no tokens to the prompt")
        torch = self.torch
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([source], device=self.device),
                                decoder_input_ids=torch.tensor([whole], device=self.device)).logits[0].float()
        self.forward_tokens += len(source) + len(whole)
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        return [float(logprobs[i - 1, whole[i]]) for i in range(max(start, 1), len(whole))]

    # ---- what a decoder-only model offers and this one does not -----------------------------------

    def received_attention(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        require(self.capabilities, {"attentions"}, "received_attention", "seq2seq")

    def attention_matrix(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        require(self.capabilities, {"attentions"}, "attention_matrix", "seq2seq")

    def attribution(self, prompt: Prompt, settings: IGSettings = IGSettings()) -> Attribution:
        require(self.capabilities, {"gradients"}, "attribution", "seq2seq")
