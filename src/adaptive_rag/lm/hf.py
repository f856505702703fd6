"""White-box backend (transformers): batched greedy steps with token log-probabilities, entropies,
attentions and hidden states taken from the generation pass itself; seeded sampling; forced-token
scoring.

Why it is built this way:
- Two attention paths, named by `model.attention` and part of every result's identity: `fast` (the
  default for Llama-family decoders) runs `fast_decoder` on a shared-prefix cache with continuous
  batching (`continuous`); `eager` runs the model's own `forward` with its eager attention kernel, one
  lockstep batch at a time, and is the reference the fast path is tested against.
- The few-shot part of a prompt is the same for every question of a dataset, so it is encoded once
  and its KV cache reused (`Prompt.shared` marks it). The split point depends only on the prompt,
  never on which other prompts share its batch, so a prompt's numbers do not depend on the batch.
- Per-token extras are collected only on decode steps (one query row each); the prefill would need
  a full [layers x heads x n x n] tensor that nobody uses.
- Sampling runs a prompt's n continuations as n rows of one batch (continuation j seeded seed + j),
  after one prefill of the prompt whose KV cache every row then shares: the prompt is read once, not n
  times, and a prompt's samples never depend on which other prompts were asked with it.
- SeaKR's final state: when a row finishes, its last token is replaced by EOS (an EOS the model chose
  is fed as it is) and fed once more; the layer's MLP output (or the residual stream) at that position
  is the state, as the reference vLLM fork computes it.

The eager path, in detail: questions advance in lockstep, one forward per step for the whole batch,
suffixes left-padded between the shared prefix and the question (masked, with explicit positions),
finished rows pruned; eager attention in every layer, because `output_attentions` needs it.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from .capabilities import ATTENTION_PATHS, DTYPES
from .base import (NO_EXTRAS, WHITE_BOX, Attribution, Continuation, Extras, FirstToken, GenerationStopped, IGSettings,
                   Prompt, SampleSet, SamplingParams, row_limits, to_sample_set)
from .kv_cache import PrefixKV
from .rows import RowState, choose

class HFModel:
    capabilities = WHITE_BOX

    def __init__(self, model_dir: str | Path, dtype: str = "float32", device: str = "cpu", threads: int = 1,
                 seed: int = 0, batch_size: int = 8, attention: str = "fast", cuda_graphs: bool = False,
                 loaded: tuple | None = None, fused_kernels: bool | None = None, special_tokens: str = "skip",
                 cpu_kernels: str = "auto"):
        """`loaded`: a (model, tokenizer) pair already in memory (benchmarks build randomly initialised
        models of a paper model's shape that way); `model_dir` then only names it. `fused_kernels`: the
        fast path's fused layers (`FastDecoder(fused=...)`; default: on a CUDA device). `special_tokens`:
        `keep` writes the special tokens a continuation generates into its text and token texts, as a
        decoder without `skip_special_tokens` does; a final end-of-sequence token is then one of its
        tokens, with its probability (`rows.RowState.take`). `cpu_kernels`: the fast path's linear kernel
        on the CPU (`model.cpu_kernels`: auto | packed | mkl | modules; `lm.cpu_kernels`)."""
        import torch
        from transformers import AutoModelForCausalLM

        from .models import load_in_process

        model_dir = Path(model_dir)
        if loaded is None and not (model_dir / "config.json").is_file():
            raise InputError(f"{model_dir}: not a model directory (run the model step first)")
        if loaded is None:
            import json

            if json.loads((model_dir / "config.json").read_text()).get("is_encoder_decoder"):
                raise InputError(f"{model_dir}: an encoder-decoder model; set model.architecture: seq2seq "
                                 "(it runs the methods that read only text and token probabilities)")
        if dtype not in DTYPES:
            raise InputError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        if attention not in ATTENTION_PATHS:
            raise InputError(f"attention must be one of {', '.join(ATTENTION_PATHS)}; got {attention!r}")
        self.torch, self.device, self.dtype, self.batch_size = torch, device, dtype, batch_size
        self.model_dir = model_dir
        self.tokenizer, self.model = load_in_process(model_dir, dtype, device, threads, seed, loaded,
                                                     AutoModelForCausalLM, attn_implementation="eager")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        self._prefix_ids: tuple[int, ...] | None = None
        self._prefix_cache = None
        self._prefix_kv = PrefixKV(())
        self.attention = attention
        self.skip_special = special_tokens == "skip"
        self.decoder = None
        if attention == "fast":
            from .fast_decoder import FastDecoder

            # Refuses an architecture it does not run, and CUDA graphs off a CUDA device, naming the setting.
            self.decoder = FastDecoder(self.model, cuda_graphs=cuda_graphs, rows_hint=batch_size, fused=fused_kernels,
                                       cpu_kernels=cpu_kernels)
        elif cuda_graphs:
            raise InputError("model.cuda_graphs: true captures the fast attention path; set model.attention: fast")
        self.cuda_graphs = cuda_graphs
        self.forward_tokens = 0  # tokens actually run through the model (reported by benchmarks)
        # Asked before every decoding step; True abandons the call with `GenerationStopped`. `serve` points
        # it at "has this request's client gone?" so a disconnected client does not keep the model busy.
        self.stop_requested: Callable[[], bool] | None = None

    # ---- identity and prompts -------------------------------------------------------------------

    def identity(self) -> dict:
        from .models import recorded_weights

        weights = recorded_weights(self.model_dir)
        # Device type, batch size and the fast path's fused kernels are part of a result's identity: CPU
        # and CUDA kernels, padding in a different batch shape and fused products can differ in the last
        # bits, so a shared cache must not mix them; so can the CPU's linear kernel when it is not the packed
        # one (`lm.cpu_kernels`).
        return {"backend": "hf", "model": self.model_dir.name, "weights_sha256": weights, "dtype": self.dtype,
                "attention": self.attention, "device": self.device.split(":")[0], "batch_size": self.batch_size,
                **({"cuda_graphs": True} if self.cuda_graphs else {}),
                **({} if self.skip_special else {"special_tokens": "keep"}),
                **({"kernels": "fused"} if self.decoder is not None and self.decoder.fused else {}),
                **({"cpu_kernels": kernel} if (kernel := (self.kernel_choice or {}).get("kernel", "packed")) != "packed" else {})}

    @property
    def kernel_choice(self) -> dict | None:
        """The fast path's CPU linear kernel and how it was chosen (`lm.cpu_kernels`); None off the CPU's
        fast path."""
        choice = self.decoder.kernel_choice if self.decoder is not None else None
        return choice.record() if choice is not None else None

    @property
    def context_length(self) -> int | None:
        """The most tokens (prompt + generated) the model reads: the config's `max_position_embeddings`
        (`n_positions` for GPT-2-style configs), or the tokenizer's `model_max_length` where smaller; None
        when neither says (transformers writes a huge number for an unset `model_max_length`)."""
        config = self.model.config
        limits = [getattr(config, key, None) for key in ("max_position_embeddings", "n_positions")]
        limits.append(getattr(self.tokenizer, "model_max_length", None))
        limits = [n for n in limits if isinstance(n, int) and 0 < n < 10**9]
        return min(limits) if limits else None

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render_chat(self, messages: Sequence[dict] | Sequence[tuple[str, str]], generation_prompt: bool = True) -> str:
        if not self.has_chat_template:
            raise InputError("model.prompt_format is 'chat' but this model's tokenizer has no chat template; "
                             "set model.prompt_format: raw")
        messages = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def encode(self, prompt: Prompt) -> tuple[list[int], int]:
        """Token ids of the rendered prompt, and how many leading ids are the shared (cacheable) part."""
        if prompt.messages is not None:
            text = self.render_chat(prompt.messages) + prompt.prefix
            shared_text = self.render_chat(prompt.messages[:prompt.shared], generation_prompt=False) \
                if prompt.shared else ""
            special = False  # the template writes its own special tokens
        else:
            text = prompt.text + prompt.prefix
            shared_text = prompt.text[:prompt.shared]
            special = True
        encoded = self.tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
        ids = list(encoded["input_ids"])
        shared = 0
        if shared_text and text.startswith(shared_text):
            limit = len(shared_text)
            for start, end in encoded["offset_mapping"]:
                if end > limit:
                    break
                shared += 1
        return ids, min(shared, len(ids) - 1)  # at least one token is run to get next-token logits

    # ---- greedy generation ----------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        limits = row_limits(max_new_tokens, len(prompts))
        if self.decoder is not None:  # one continuous batch per distinct shared prefix, in prompt order
            encoded = [self.encode(p) for p in prompts]
            groups: dict[tuple[int, ...], list[int]] = {}
            for index, (ids, shared) in enumerate(encoded):
                groups.setdefault(tuple(ids[:shared]), []).append(index)
            results: list[Continuation | None] = [None] * len(prompts)
            for rows in groups.values():
                for index, result in zip(rows, self._run([encoded[i] for i in rows], [limits[i] for i in rows], stop,
                                                         extras, None)):
                    results[index] = result
            return results
        out: list[Continuation] = []
        for start in range(0, len(prompts), self.batch_size):
            end = start + self.batch_size
            out.extend(self._run([self.encode(p) for p in prompts[start:end]], limits[start:end], stop, extras, None))
        return out

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """All n continuations in one batch of n rows (memory grows with n, not with `batch_size`)."""
        return self._run([self.encode(prompt)] * params.n, [max_new_tokens] * params.n, stop, extras,
                         (params, list(range(params.n))))

    def sample_batch(self, prompts: Sequence[Prompt], params: SamplingParams, max_new_tokens: int,
                     stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[SampleSet]:
        return [to_sample_set(self.sample(p, params, max_new_tokens, stop, extras), extras.final_layers)
                for p in prompts]

    def time_spent(self) -> dict | None:
        """The fast path's prefill and decode counts and seconds so far (`FastDecoder.spent`), which every
        run's provenance records; None on the eager path."""
        return None if self.decoder is None else self.decoder.spent.as_dict()

    def prefix_kv(self, prefix: tuple[int, ...]) -> PrefixKV:
        """The fast path's cache of a shared prefix, computed once per distinct prefix (the last is kept;
        an empty prefix, prompts that share nothing, needs no pass and leaves it in place)."""
        if not prefix:
            return PrefixKV(())
        if prefix != self._prefix_kv.ids:
            with self.torch.inference_mode():
                self._prefix_kv = self.decoder.encode_prefix(prefix)
            self.forward_tokens += len(prefix)
        return self._prefix_kv

    def _shared_cache(self, prefix: tuple[int, ...]):
        """KV cache of the shared prefix, computed once per distinct prefix (the last one is kept)."""
        if prefix != self._prefix_ids:
            torch = self.torch
            with torch.inference_mode():
                ids = torch.tensor([prefix], device=self.device)
                result = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)  # only its KV cache is used
            self.forward_tokens += len(prefix)
            self._prefix_ids, self._prefix_cache = prefix, result.past_key_values
        return self._prefix_cache

    def _run(self, encoded: list[tuple[list[int], int]], limits: list[int], stop: Sequence[str],
             extras: Extras, sampling: tuple[SamplingParams, list[int]] | None) -> list[Continuation]:
        """The continuations of encoded prompts, prompt i generating at most limits[i] tokens."""
        if self.decoder is not None:
            from .continuous import run_continuous

            states = run_continuous(self, encoded, limits, stop, extras, sampling)
        else:
            states = self._run_eager(encoded, limits, stop, extras, sampling)
        results = [state.result(self, stop, extras) for state in states]
        if extras.attention_layer is not None:
            # Attention rows cover the prompt too; the texts of the prompt's own (non-shared) tokens
            # let a method find the question and the answer so far among those columns.
            for result, (ids, own_shared) in zip(results, encoded):
                result.meta["prompt_tokens"] = self.token_texts(ids[own_shared:])
        return results

    def _run_eager(self, encoded: list[tuple[list[int], int]], limits: list[int], stop: Sequence[str],
                   extras: Extras, sampling: tuple[SamplingParams, list[int]] | None) -> list[RowState]:
        torch = self.torch
        shared = min(s for _, s in encoded)
        prefix = tuple(encoded[0][0][:shared])
        if any(tuple(ids[:shared]) != prefix for ids, _ in encoded):
            shared, prefix = 0, ()  # prompts of this batch do not share their cacheable part
        batch = len(encoded)
        suffixes = [ids[shared:] for ids, _ in encoded]
        width = max(len(s) for s in suffixes)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        positions = torch.zeros((batch, width), dtype=torch.long)
        for row, suffix in enumerate(suffixes):
            input_ids[row, width - len(suffix):] = torch.tensor(suffix)
            mask[row, shared + width - len(suffix):] = 1
            positions[row, width - len(suffix):] = torch.arange(shared, shared + len(suffix))
        # Sample rows of one prompt are identical: prefill one and share its cache with the others.
        replicas = batch if sampling is not None and all(e == encoded[0] for e in encoded) else 1
        if replicas > 1:
            input_ids, mask, positions = input_ids[:1], mask[:1], positions[:1]
        cache = None
        if shared:
            cache = copy.deepcopy(self._shared_cache(prefix))
            cache.batch_repeat_interleave(batch // replicas)
        generators, params = None, None
        if sampling is not None:
            params, rows = sampling
            generators = [torch.Generator().manual_seed(params.seed + j) for j in rows]

        want_rows = extras.attention_layer is not None or extras.hidden_layer is not None
        final_layers = self.check_layers(extras.final_layers)
        captured: dict[int, object] = {}
        states = [RowState(len(ids)) for ids, _ in encoded]
        active = list(range(batch))
        with torch.inference_mode(), self._mlp_hooks(final_layers if extras.final_source == "mlp" else (), captured):
            out = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                             position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
                             logits_to_keep=1)  # the next token's logits only: no LM head over the prompt
            self.forward_tokens += int(sum(len(s) for s in suffixes[:len(input_ids)]))
            if replicas > 1:
                out.past_key_values.batch_repeat_interleave(replicas)
                mask = mask.repeat(replicas, 1)
                out.logits = out.logits[:, -1:, :].repeat(replicas, 1, 1)
            step = 0
            while active:
                if self.stop_requested is not None and self.stop_requested():
                    raise GenerationStopped(step)
                chosen = choose(out.logits[:, -1, :], extras,
                                None if generators is None else [generators[r] for r in active], params)
                keep, next_ids, feed_positions = [], [], []
                for i, row in enumerate(active):
                    feed = states[row].take(chosen, i, self, stop, limits[row], want_rows, final_layers)
                    if feed is not None:
                        keep.append(i)
                        next_ids.append(feed[0])
                        feed_positions.append(feed[1])
                step += 1
                if not keep:
                    break
                # Feed the chosen tokens: gives the next logits, and each token's own attention row /
                # hidden state (rows that just finished are fed once more only for those, or for the
                # final state).
                finishing = [j for j, i in enumerate(keep) if states[active[i]].finish is not None]
                if len(keep) != len(active):  # selecting every row would copy the whole KV cache for nothing
                    index = torch.tensor(keep, dtype=torch.long, device=self.device)
                    out.past_key_values.batch_select_indices(index)
                    mask = mask[keep]
                mask = torch.cat([mask, torch.ones((len(keep), 1), dtype=torch.long)], dim=1)
                positions = torch.tensor([[p] for p in feed_positions])
                residual_final = bool(final_layers and finishing and extras.final_source == "residual")
                out = self.model(input_ids=torch.tensor([[t] for t in next_ids], device=self.device),
                                 attention_mask=mask.to(self.device), position_ids=positions.to(self.device),
                                 past_key_values=out.past_key_values, use_cache=True,
                                 output_attentions=extras.attention_layer is not None,
                                 output_hidden_states=extras.hidden_layer is not None or residual_final)
                self.forward_tokens += len(keep)
                if final_layers:
                    for j in finishing:
                        layers = [out.hidden_states[layer][j, -1] if residual_final else captured[layer][j]
                                  for layer in final_layers]
                        states[active[keep[j]]].final = torch.stack(layers).float().cpu().numpy()
                for j, i in enumerate(keep):
                    state = states[active[i]]
                    if extras.attention_layer is not None:
                        row = out.attentions[extras.attention_layer][j, :, -1, :].float().mean(0)
                        state.attentions.append(row[mask[j].bool()].cpu().numpy())
                    if extras.hidden_layer is not None:
                        state.hidden.append(out.hidden_states[extras.hidden_layer][j, -1].float().cpu().numpy())
                still = [i for i in keep if states[active[i]].finish is None]
                if still and len(still) != len(keep):
                    rows = [keep.index(i) for i in still]
                    out.past_key_values.batch_select_indices(torch.tensor(rows, dtype=torch.long, device=self.device))
                    out.logits = out.logits[rows]
                    mask = mask[rows]
                active = [active[i] for i in still]
        if final_layers:
            for state in states:  # a row cut by max_new_tokens=0 never ran: no final state exists
                if state.final is None:
                    raise RuntimeError("a sampled row finished without its final EOS feed")
        return states

    @property
    def final_eos_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return eos if isinstance(eos, int) else min(self.eos_ids)

    def _decoder_layers(self):
        """The model's list of decoder blocks (Llama/Mistral/Qwen, GPT-2, GPT-NeoX layouts)."""
        node = _first_attribute(self.model, ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"))
        if node is not None:
            return node
        raise InputError(f"{self.model_dir}: cannot find the decoder layers of a {type(self.model).__name__} "
                         f"(final states need model.layers, transformer.h or gpt_neox.layers)")

    @property
    def num_layers(self) -> int:
        return len(self._decoder_layers())

    def check_layers(self, layers: Sequence[int]) -> tuple[int, ...]:
        count = self.num_layers if layers else 0
        for layer in layers:
            if not 1 <= layer <= count:
                raise InputError(f"layer {layer} does not exist: {self.model_dir.name} has layers 1..{count}")
        return tuple(layers)

    def _mlp_hooks(self, layers: Sequence[int], captured: dict):
        """While active, `captured[layer]` holds the last position's MLP output of every row of the
        latest forward (the MLP output before the residual add, as the reference vLLM fork reads it)."""

        stack = contextlib.ExitStack()
        blocks = self._decoder_layers() if layers else ()
        for layer in layers:
            def keep(module, args, output, layer=layer):
                captured[layer] = output[:, -1, :]
            stack.callback(blocks[layer - 1].mlp.register_forward_hook(keep).remove)
        return stack

    # ---- scoring -------------------------------------------------------------------------------

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        """Log-probabilities of the continuation's tokens after the prompt (one forward pass)."""
        ids, start = self._with_continuation(prompt, continuation)
        torch = self.torch
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0].float()
        self.forward_tokens += len(ids)
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        return [float(logprobs[i - 1, ids[i]]) for i in range(start, len(ids))]

    def token_ranks(self, prompt: Prompt, token_ids: Sequence[int], target: int) -> list[int]:
        """For k = 0..n-1, how many tokens the model finds likelier than `target` after the prompt and
        `token_ids[:k + 1]` (0: `target` is its top token), from one forward pass over the prompt and the
        ids as they are (not re-tokenized). RaDIO's detector data asks whether an entity's next token is
        among the top k after each greedy step (generate_data.py)."""
        ids, _ = self.encode(prompt)
        full = ids + [int(t) for t in token_ids]
        torch = self.torch
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([full], device=self.device)).logits[0].float()
        self.forward_tokens += len(full)
        rows = logits[len(ids):len(full)]
        return [int(n) for n in (rows > rows[:, target:target + 1]).sum(dim=-1).tolist()]

    # ---- the input embedding table ---------------------------------------------------------------

    def input_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """[len(texts), d] float32: the mean of the input-embedding rows of each text's tokens (no special
        tokens added; a text with no tokens gets zeros). DioR's `similarity: lm-embeddings` reads word
        vectors from the generating model itself; one lookup, no forward pass."""
        torch = self.torch
        table = self.model.get_input_embeddings().weight
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        with torch.inference_mode():
            for row, text in enumerate(texts):
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                if ids:
                    out[row] = table[torch.tensor(ids, device=table.device)].float().mean(0).cpu().numpy()
        return out

    # ---- attention of tokens re-encoded alone --------------------------------------------------

    def received_attention(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        """[2, heads, n] float32 from one forward pass over `token_ids` alone (no prompt, nothing
        added): [0, h, i] is the largest attention any later token pays token i in head h (0 for the
        last token), [1, h, i] token i's attention to itself. The DRAGIN reference code scores its
        trigger from such a pass (each head's maximum, then the mean over heads), which the generation
        pass cannot give: its rows are head-averaged and read the prompt too. Two [heads, n] planes
        rather than the [heads, n, n] matrices keep a cached result small."""
        torch = self.torch
        ids = [int(t) for t in token_ids]
        if not ids:
            return np.zeros((2, self.model.config.num_attention_heads, 0), dtype=np.float32)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), output_attentions=True)
        self.forward_tokens += len(ids)
        attention = out.attentions[layer][0].float()  # [heads, query, key]
        later = torch.tril(attention, diagonal=-1).max(dim=1).values  # over queries j > i, per key i
        own = attention.diagonal(dim1=-2, dim2=-1)
        return torch.stack([later, own]).cpu().numpy()

    def attention_matrix(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        """[n, n] float32 from one forward pass over `token_ids` alone: layer `layer`'s attention,
        averaged over heads (row = query, column = key). The DRAGIN reference code ranks its query
        words by such a pass over the question, the text so far and the fired sentence
        (`AttnWeightRAG.keep_real_words`); `received_attention` keeps only two planes of it."""
        torch = self.torch
        ids = [int(t) for t in token_ids]
        if not ids:
            return np.zeros((0, 0), dtype=np.float32)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), output_attentions=True)
        self.forward_tokens += len(ids)
        return out.attentions[layer][0].float().mean(dim=0).cpu().numpy()

    # ---- Integrated Gradients of the prompt tokens ---------------------------------------------

    def attribution(self, prompt: Prompt, settings: IGSettings = IGSettings()) -> Attribution:
        """IG of every token of the encoded prompt for the model's greedy next token, reduced per token
        (`lm.integrated_gradients` computes it; DioR's reference feeds the bare question as raw text,
        so the tokenizer's BOS, where it adds one, is a token too). Costs settings.steps + 2 forward
        passes over the prompt (the steps with a backward), in chunks of `settings.batch` rows."""
        from .integrated_gradients import integrated_gradients, per_token

        ids, _ = self.encode(prompt)
        result = integrated_gradients(self.model, ids, settings,
                                      self.decoder.last_logits if self.decoder is not None else None)
        self.forward_tokens += (settings.steps + 2) * len(ids)
        l2, dot = per_token(result.attributions)
        return Attribution(tokens=self.token_texts(ids), token_ids=ids, target_id=result.target_id,
                           target=self.tokenizer.decode([result.target_id]), value=result.value,
                           baseline_value=result.baseline_value, l2=l2, dot=dot)

    # ---- the first generated token's distribution and MLP activations -------------------------

    def first_token(self, prompt: Prompt, layer: int = -2) -> FirstToken:
        """One forward pass over the prompt: the next-token distribution (float32 softmax) and decoder
        layer `layer`'s MLP up-projection at the last position (Python indexing: -2 is the second to last,
        Snyder et al.'s choice for their activation-entropy figure; `mlp.up_proj` in Llama layouts, the
        module they hook). Not cached: the distribution is vocabulary-wide, and the pass costs one forward
        over a short prompt."""
        blocks = self._decoder_layers()
        if not -len(blocks) <= layer < len(blocks):
            raise InputError(f"layer {layer} does not exist: {self.model_dir.name} has {len(blocks)} decoder "
                             f"layers (0..{len(blocks) - 1}, or -1..-{len(blocks)} from the last)")
        index = layer % len(blocks)
        up = _up_projection(blocks[index])
        if up is None:
            raise InputError(f"{self.model_dir}: cannot find the MLP up-projection of a {type(self.model).__name__} "
                             f"layer (mlp.up_proj, mlp.c_fc, mlp.dense_h_to_4h or fc1)")
        captured = {}

        def keep(module, args, output):
            captured["up"] = output[0, -1].float().cpu().numpy()

        ids, _ = self.encode(prompt)
        torch = self.torch
        handle = up.register_forward_hook(keep)
        try:
            with torch.inference_mode():
                logits = self.model(input_ids=torch.tensor([ids], device=self.device), logits_to_keep=1).logits
        finally:
            handle.remove()
        self.forward_tokens += len(ids)
        probabilities = torch.softmax(logits[0, -1].float(), dim=-1).cpu().numpy()
        return FirstToken(token_id=int(probabilities.argmax()), probabilities=probabilities,
                          activations=captured["up"], layer=index)

    @property
    def end_of_turn_text(self) -> str | None:
        """The text of the model's end-of-sequence token, as a decoder that keeps special tokens writes it."""
        return self.tokenizer.eos_token

    def _with_continuation(self, prompt: Prompt, continuation: str) -> tuple[list[int], int]:
        ids, _ = self.encode(prompt.with_prefix(prompt.prefix + continuation))
        prompt_ids, _ = self.encode(prompt)
        start = len(prompt_ids)
        if ids[:start] != prompt_ids or start >= len(ids):
            # The boundary token merged with the continuation's first characters: score from the first
            # token that differs, which is what a model reading this text actually predicts.
            start = next((i for i, (a, b) in enumerate(zip(ids, prompt_ids)) if a != b), len(prompt_ids))
            if start >= len(ids):
                raise InputError("the continuation adds no tokens to the prompt")
        return ids, max(start, 1)

    def _eos_ids(self) -> set[int]:
        ids = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(v for v in value if isinstance(v, int))
        return ids

    # ---- token texts ----------------------------------------------------------------------------

    def token_texts(self, ids: list[int]) -> list[str]:
        return token_texts(self.tokenizer, ids, self.skip_special)


def _up_projection(block):
    """The module whose output is a decoder block's MLP up-projection (the wide pre-activation half)."""
    return _first_attribute(block, ("mlp.up_proj", "mlp.c_fc", "mlp.dense_h_to_4h", "fc1"))


def _first_attribute(root, paths: Sequence[str]):
    """The first of the dotted attribute paths that `root` has (architectures name the same part
    differently), or None."""
    for path in paths:
        node = root
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if node is not None:
            return node
    return None


def token_texts(tokenizer, ids: list[int], skip_special: bool = True) -> list[str]:
    """Each token's contribution to the decoded text; they always join to exactly `decode(ids)`
    (special tokens written as their text when not `skip_special`).

    Decoding growing prefixes handles SentencePiece's leading spaces; a token holding only part of
    a multi-byte character decodes to U+FFFD until the character completes, so earlier texts are
    trimmed back to the common prefix and the completing token gets the character.
    """
    texts: list[str] = []
    joined = ""
    for n in range(1, len(ids) + 1):
        current = tokenizer.decode(ids[:n], skip_special_tokens=skip_special)
        common = len(joined) if current.startswith(joined) else 0  # the usual case, checked in one call
        while common < min(len(joined), len(current)) and joined[common] == current[common]:
            common += 1
        excess = len(joined) - common
        for back in range(len(texts) - 1, -1, -1):
            if excess <= 0:
                break
            cut = min(excess, len(texts[back]))
            texts[back] = texts[back][:len(texts[back]) - cut]
            excess -= cut
        texts.append(current[common:])
        joined = current
    return texts
