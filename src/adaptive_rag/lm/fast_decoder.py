"""The fast attention path: a Llama-family decoder run layer by layer over the Hugging Face model's own
modules, on the shared-prefix cache of `kv_cache`.

Why it is built this way:
- Methods read the attention of one layer (DRAGIN, SCAAR's ATTN cell, DioR's A term) and the hidden state
  of one layer (SeaKR, DioR), never those of every layer. Transformers can return attentions only from
  its eager kernel in every layer, and copies grouped-query keys and values per head (`repeat_kv`) and a
  growing cache per step (`torch.cat`). Here prompt tokens go through `scaled_dot_product_attention`
  (grouped-query heads read in place) and a decode step through `cascade_attention`: the query of
  each row against the shared prefix (one matrix product for all rows) and against its own slot,
  merged in one softmax. The layer a method asks for returns its head-averaged probabilities from that
  same softmax: the attention row costs nothing extra and no other layer computes one.
- The modules are the model's own (norms, projections, rotary embedding, MLP, head), called in the
  order the model's `forward` calls them, so the weights, rotary scaling and activation are exactly the
  model's; `tests/test_fast_decoder.py` checks every output against the eager path.
- On the CPU every linear layer (and fused product) runs through the kernel `cpu_kernels` chose for
  this machine: at the few rows of a decode step MKL's plain GEMM reads the weights at a fraction of
  the machine's memory bandwidth, and a weight packed once for the kernel (oneDNN's inner product, or
  MKL's GEMM packed for the batch's rows) reads them up to 1.4 times as fast at 8 rows (the Xeon the
  demo is timed on, AVX-512; 1.7 times under forced AVX2: docs/performance.md), at the cost of a second
  copy of the linear weights. Where no packed kernel runs in this torch build, or its output
  disagrees with `torch.nn.functional.linear` on a probe, the modules run as they are.
- With `fused=True` (the default on a CUDA device, where a step is a thousand small kernels) a layer
  makes one q|k|v and one gate|up product (`fused_projections`), rotates queries and keys together,
  normalises with `torch.nn.functional.rms_norm`, and folds the attention's scale and mask into the
  score products (`baddbmm`): about half the kernels of the module-by-module layer, with the same terms
  summed in other kernels (bf16 results can move in the last bits; it is part of the model's identity).
- A greedy step also chooses its tokens (log-probabilities, entropies) on the device and returns them
  with the attention row and hidden state in one transfer: the host waits for the device once a step.
- Shapes: a decode step reads the rows' slots up to `window` positions. On the CPU the window is the
  longest row so far (nothing is read twice); with CUDA graphs it is the slot capacity, so one captured
  graph per batch size serves a whole call.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Sequence

from ..errors import InputError
from .capabilities import ATTENTION_PATHS  # noqa: F401  (re-exported: the paths this module is one of)
from .fused_projections import fuse_layer, is_rms_norm
from .kv_cache import PrefixKV, SlotKV
from .rows import choice_columns

# Decoder-only architectures whose layers are (input norm, q/k/v/o attention with rotary positions,
# post-attention norm, MLP) as Llama's; Qwen3 adds per-head q/k norms, Qwen2 biases on q/k/v.
FAST_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def unsupported(model) -> str | None:
    """Why `model` cannot run on the fast path, or None when it can."""
    config = model.config
    kind = getattr(config, "model_type", None)
    if kind not in FAST_MODEL_TYPES:
        return f"the fast attention path runs {', '.join(FAST_MODEL_TYPES)} decoders; this model is {kind!r}"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", kind == "mistral"):
        return (f"the fast attention path has no sliding-window attention (config.sliding_window = "
                f"{config.sliding_window})")
    return None


@dataclass
class StepOutput:
    """What one decode step returns for its rows (in slot order). `FastDecoder.step` hands back host
    arrays for everything but the logits; `_step` (what a graph records) device tensors."""

    logits: object  # [rows, vocab] float32 on the device; None when the step chose the tokens itself
    attention: object | None = None  # [rows, P + window] float32: head-averaged probabilities of the asked layer
    hidden: object | None = None  # [rows, hidden] float32 at the asked hidden-state index
    finals: dict | None = None  # 1-based layer -> [rows, hidden] float32
    chosen: list | None = None  # per row, `rows.choice_columns`' values when the step chose the tokens
    packed: object | None = None  # _step only: [rows, choice | attention | hidden] float64, one transfer


@dataclass
class TimeSpent:
    """What one decoder ran and the wall seconds it took: prompt tokens prefilled (the shared prefix's and
    each row's own) and decode steps (with the rows they advanced). Prefill is compute-bound and a decode
    step bound by reading the weights, so the split says which one a run's answering time went to. On a
    GPU a prefill is waited for before its clock stops; a step's clock stops when its results reach the
    host (every greedy step's do)."""

    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_steps: int = 0
    decode_rows: int = 0
    decode_s: float = 0.0

    def as_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


class FastDecoder:
    """Prefix encoding, per-row prompt prefill and batched decode steps of one causal LM.

    `static=True` keeps one prefix buffer and one set of slots for the model's lifetime (grown when a
    call needs more) and pads each step to a power-of-two number of rows, so every step of a bucket has
    the same shapes and addresses; with `cuda_graphs=True` (CUDA only) each bucket's step is captured
    once as a CUDA graph and replayed. On the CPU, static mode runs the same padded step without
    capture: that is how the tests check it. `fused` (default: on a CUDA device) runs the layers with
    fused projections and fewer kernels (module docstring)."""

    def __init__(self, model, static: bool = False, cuda_graphs: bool = False, rows_hint: int = 8,
                 fused: bool | None = None, cpu_kernels: str = "auto"):
        reason = unsupported(model)
        if reason:
            raise InputError(f"model.attention: fast: {reason}; set model.attention: eager")
        base = model.model
        self.model = model
        self.embed = base.embed_tokens
        self.layers = list(base.layers)
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.head = model.lm_head
        attention = self.layers[0].self_attn
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = attention.head_dim
        self.scaling = attention.scaling
        parameter = next(model.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device
        if cuda_graphs and self.device.type != "cuda":
            raise InputError(f"model.cuda_graphs: true needs the model on a CUDA device; it is on {self.device}")
        self.static = static or cuda_graphs
        self.fused = self.device.type == "cuda" if fused is None else fused
        # layer -> its fused q|k|v and gate|up weights (fused mode)
        self._fused = {layer: fuse_layer(layer) for layer in self.layers} if self.fused else {}
        self._rms = self.fused and all(is_rms_norm(m) for layer in self.layers
                                       for m in (layer.input_layernorm, layer.post_attention_layernorm))
        # On the CPU: the linear kernel (`cpu_kernels`: auto times the candidates on this machine) and
        # {module or fused product: its weight packed for that kernel}; empty elsewhere and for `modules`
        self.packed, self.kernel_choice, self._run = {}, None, None
        if self.device.type == "cpu":
            from .cpu_kernels import choose, runner

            self.kernel_choice, self.packed = choose(self.products(), cpu_kernels, rows_hint)
            self._run = runner(self.kernel_choice.kernel, rows_hint)
        self.cuda_graphs = cuda_graphs
        self._slots: SlotKV | None = None  # static mode: the slots every call reuses
        self._prefix_keys: list = []  # static mode: [kv heads, capacity, head dim] per layer
        self._prefix_values: list = []
        self._prefix_source: PrefixKV | None = None  # the prefix the static buffer holds now
        self._prefix_length = None  # static mode: [1] long tensor, the valid prefix positions
        self._graphs: dict = {}  # (rows, extras) -> (graph, static inputs, static outputs)
        self._pool = None
        self.spent = TimeSpent()

    def products(self) -> list:
        """Every matrix product of a forward pass in reading order: per layer its linear modules, with a
        fused layer's q|k|v and gate|up products in place of theirs, then the head."""
        import torch

        products = []
        for layer in self.layers:
            fused = self._fused.get(layer)
            replaced = {} if fused is None else {layer.self_attn.q_proj: fused.qkv, layer.mlp.gate_proj: fused.gate_up}
            skipped = () if fused is None else (layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.up_proj)
            products += [replaced.get(m, m) for m in layer.modules()
                         if isinstance(m, torch.nn.Linear) and m not in skipped]
        return [*products, self.head]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def new_slots(self, slots: int, length: int) -> SlotKV:
        """Slots for one call: fresh ones, or in static mode the model's own (reset; grown, in steps of 256
        positions and powers of two of rows, when this call needs more, which drops captured graphs)."""
        if not self.static:
            return SlotKV(self.num_layers, slots, self.kv_heads, length, self.head_dim, self.dtype, self.device)
        held = self._slots
        if held is None or len(held.lengths) < slots or held.capacity < length:
            rows = max(_bucket(slots), len(held.lengths) if held else 0)
            capacity = max(-(-length // 256) * 256, held.capacity if held else 0)
            held = self._slots = SlotKV(self.num_layers, rows, self.kv_heads, capacity, self.head_dim, self.dtype,
                                        self.device)
            self._graphs.clear()
        held.lengths = [0] * len(held.lengths)
        return held

    def position_bytes(self) -> int:
        return SlotKV.bytes_per_position(self.num_layers, self.kv_heads, self.head_dim, self.dtype.itemsize)

    # ---- prompt tokens ----------------------------------------------------------------------------

    def encode_prefix(self, ids: tuple[int, ...], base: PrefixKV | None = None, logits: bool = False) -> PrefixKV:
        """The prefix `base.ids + ids` (base may be None): only `ids` are run, reading base's cache."""
        base = base or PrefixKV(())
        keys, values, last = self._prompt_pass(ids, base)
        return base.extended(keys, values, tuple(ids), self._logits(last) if logits else None)

    def prefill(self, prefix: PrefixKV, slots: SlotKV, slot: int, ids) -> object:
        """Write a row's own prompt tokens (after the prefix) into `slot`; the next-token logits [vocab]."""
        keys, values, last = self._prompt_pass(ids, prefix)
        n = len(ids)
        if n > slots.capacity:
            raise ValueError(f"a prompt suffix of {n} tokens does not fit a slot of {slots.capacity}")
        for layer, (k, v) in enumerate(zip(keys, values)):
            slots.keys[layer][slot, :, :n] = k
            slots.values[layer][slot, :, :n] = v
        slots.lengths[slot] = n
        return self._logits(last)[0]

    def _prompt_pass(self, ids, prefix: PrefixKV):
        """Run `ids` (one sequence) after `prefix`: per-layer [kv heads, n, head dim] keys and values, and
        the final normalised hidden state of the last position ([1, hidden])."""
        import torch

        start = time.perf_counter()
        tokens = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        keys, values = [], []
        hidden = self._layers(self.embed(tokens), prefix, keys, values)
        last = self._norm(self.norm, hidden[:, -1:])[:, 0]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.spent.prefill_tokens += len(ids)
        self.spent.prefill_s += time.perf_counter() - start
        return keys, values, last

    def last_logits(self, embeddings):
        """Float32 next-token logits [rows, vocab] after input embeddings [rows, n, hidden], every row from
        position 0: the batched, differentiable pass Integrated Gradients runs (`lm.integrated_gradients`)."""
        return self._logits(self._norm(self.norm, self._layers(embeddings, PrefixKV(()))[:, -1]))

    def _layers(self, hidden, prefix: PrefixKV, keys: list | None = None, values: list | None = None):
        """The decoder layers over [rows, n, hidden] inputs at positions prefix.length.., each query attending
        to the whole prefix and causally to its own row (`scaled_dot_product_attention`, grouped-query
        heads in place); each layer's own keys and values ([kv heads, n, head dim], one row) are appended
        to `keys`/`values` when given."""
        import torch
        import torch.nn.functional as F

        rows, n, _ = hidden.shape
        start = prefix.length
        positions = torch.arange(start, start + n, device=self.device)[None].expand(rows, n)
        rotation = self._rotation(hidden, positions)
        mask = None
        if start:  # query i sees the whole prefix and its own tokens up to i
            mask = torch.ones((n, start + n), dtype=torch.bool, device=self.device).tril(diagonal=start)
        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, self._norm(layer.input_layernorm, hidden), rotation)
            if keys is not None:  # fused: k and v are views into the layer's q|k|v output; keep only them
                keys.append(k[0].contiguous() if self.fused else k[0])
                values.append(v[0].contiguous() if self.fused else v[0])
            if start:
                k = torch.cat([prefix.keys[index][None].expand(rows, -1, -1, -1), k], dim=2)
                v = torch.cat([prefix.values[index][None].expand(rows, -1, -1, -1), v], dim=2)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not start, scale=self.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)
            hidden, _ = self._rest_of_layer(layer, hidden, out)
        return hidden

    # ---- one decode step ----------------------------------------------------------------------------

    def step(self, prefix: PrefixKV, slots: SlotKV, tokens: Sequence[int], positions: Sequence[int],
             attention_layer: int | None = None, hidden_index: int | None = None,
             final_layers: tuple[int, ...] = (), final_source: str = "mlp", chooser=None) -> StepOutput:
        """Feed one token to each of the first len(tokens) slots (token ids and their positions): each
        token's keys and values go to the end of its slot, then every row attends over the prefix and its
        slot (the dynamic path reads the slots up to the longest row, the static one all of them).
        `attention_layer` and `hidden_index` are in transformers' indexing (attentions[i] for layer i,
        from 0 or from the end; hidden_states[0] is the embedding output, hidden_states[-1] the final
        normalised state), `final_layers` 1-based. With `chooser` (the call's `Extras`; greedy calls
        without watched ids) the step also chooses each row's next token (`rows.choice_columns`) and
        returns those values in `chosen` instead of the logits. Attention rows, hidden and final states
        come back as host arrays."""
        import torch

        start = time.perf_counter()
        rows = len(tokens)
        final_layers = tuple(final_layers)
        write = slots.lengths[:rows]
        if self.static:  # padded to a power-of-two bucket; padding rows write into a free slot's last position
            bucket = min(_bucket(rows), len(slots.lengths))
            pad = bucket - rows
            host = torch.tensor([[*tokens, *[0] * pad], [*positions, *[0] * pad],
                                 [*write, *[slots.capacity - 1] * pad]], dtype=torch.long)
            self._hold_prefix(prefix)
            window, prefix_columns = slots.capacity, self._prefix_keys[0].shape[1]
            keys, values, length = self._prefix_keys, self._prefix_values, self._prefix_length
        else:
            bucket = rows
            host = torch.tensor([list(tokens), list(positions), write], dtype=torch.long)
            window, prefix_columns = max(write) + 1, prefix.length
            keys, values, length = (prefix.keys, prefix.values, None) if prefix.length else (None, None, None)
        choice = None if chooser is None else (chooser.entropy, chooser.logsumexp)

        def run(inputs):
            return self._step(keys, values, length, slots, inputs, window, attention_layer, hidden_index,
                              final_layers, final_source, choice)

        if self.cuda_graphs:
            out = self._replay((bucket, attention_layer, hidden_index, final_layers, final_source, choice), run,
                               host)
        else:
            out = run(host.to(self.device))
        for row in range(rows):
            slots.lengths[row] += 1
        result = self._to_host(out, rows, prefix.length, prefix_columns, choice)
        self.spent.decode_steps += 1
        self.spent.decode_rows += rows
        self.spent.decode_s += time.perf_counter() - start
        return result

    def _to_host(self, out: StepOutput, rows: int, prefix: int, prefix_columns: int, choice) -> StepOutput:
        """The first `rows` rows of a step's output, off the device (one transfer when the step chose its
        tokens), attention rows laid out as [the prefix's positions | the slot's positions]."""
        attention, hidden, chosen, logits = out.attention, out.hidden, None, None
        if choice is not None:
            packed = out.packed[:rows].cpu().numpy()
            width = 2 + sum(choice)
            chosen = packed[:, :width].tolist()
            if attention is not None:
                attention = packed[:, width:width + attention.shape[1]]
                width += attention.shape[1]
            if hidden is not None:
                hidden = packed[:, width:]
        else:
            logits = out.logits[:rows].clone()
            attention = None if attention is None else attention[:rows].cpu().numpy()
            hidden = None if hidden is None else hidden[:rows].cpu().numpy()
        if attention is not None:
            import numpy as np

            attention = np.concatenate([attention[:, :prefix], attention[:, prefix_columns:]], axis=1)
            attention = attention.astype(np.float32, copy=False)
        if hidden is not None:
            hidden = hidden.astype("float32", copy=False)
        finals = None if out.finals is None else {k: v[:rows].cpu().numpy() for k, v in out.finals.items()}
        return StepOutput(logits=logits, attention=attention, hidden=hidden, finals=finals, chosen=chosen)

    def _hold_prefix(self, prefix: PrefixKV) -> None:
        """Copy `prefix` into the static prefix buffer (grown in steps of 256 positions) unless it is there."""
        import torch

        if prefix is self._prefix_source:
            return
        capacity = self._prefix_keys[0].shape[1] if self._prefix_keys else 0
        if prefix.length > capacity or not self._prefix_keys:
            capacity = max(-(-max(prefix.length, 1) // 256) * 256, capacity)
            shape = (self.kv_heads, capacity, self.head_dim)
            self._prefix_keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
            self._prefix_values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
            self._prefix_length = torch.zeros(1, dtype=torch.long, device=self.device)
            self._graphs.clear()
        for target, source in ((self._prefix_keys, prefix.keys), (self._prefix_values, prefix.values)):
            for layer, values in zip(target, source):
                layer[:, :prefix.length] = values
        self._prefix_length.fill_(prefix.length)
        self._prefix_source = prefix

    def _replay(self, key, run, host) -> StepOutput:
        """Run the step of bucket `key` as its CUDA graph, capturing it on first use. Capturing runs the
        step twice on a side stream first (the same inputs, so its cache writes are the ones replay
        makes), then records it; the static input (tokens, positions, write positions) is refilled from
        `host` before each replay."""
        import torch

        held = self._graphs.get(key)
        if held is None:
            static = host.to(self.device)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    run(static)
            torch.cuda.current_stream().wait_stream(stream)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                output = run(static)
            held = self._graphs[key] = (graph, static, output)
        graph, static, output = held
        static.copy_(host)
        graph.replay()
        return output

    def _step(self, prefix_keys, prefix_values, prefix_length, slots, inputs, window, attention_layer,
              hidden_index, final_layers, final_source, choice) -> StepOutput:
        """The step itself, on tensors only (no host synchronisation: what a CUDA graph records).
        `inputs`: [3, rows] long (tokens, positions, write positions). `prefix_length` (a [1] tensor)
        masks a static prefix buffer's unused tail; None: all of it is used. `choice`: None, or
        (entropy, logsumexp) to choose greedily here and pack the host's values into `packed`."""
        import torch

        tokens, positions, write = inputs[0], inputs[1], inputs[2]
        rows = tokens.shape[0]
        # Masks as additive biases, made once a step: 0 where a position counts, -inf where not (adding 0
        # leaves a score as it is, so this equals masking each layer's scores).
        valid = torch.arange(window, device=self.device)[None, :] <= write[:, None]  # [rows, window]
        own_bias = torch.zeros((rows, self.kv_heads, 1, window), dtype=self.dtype, device=self.device)
        own_bias = own_bias.masked_fill(~valid[:, None, None, :], float("-inf"))
        prefix_bias = None
        if prefix_keys is not None and (prefix_length is not None or self.fused):
            prefix_bias = torch.zeros(prefix_keys[0].shape[1], dtype=self.dtype, device=self.device)
            if prefix_length is not None:
                columns = torch.arange(prefix_keys[0].shape[1], device=self.device)
                prefix_bias = prefix_bias.masked_fill(columns >= prefix_length, float("-inf"))
        layers = self.num_layers
        attention_layer = None if attention_layer is None else attention_layer % layers
        hidden_index = None if hidden_index is None else hidden_index % (layers + 1)
        residual = {i for i in final_layers} if final_source == "residual" else set()
        mlp = set(final_layers) - residual
        hidden = self.embed(tokens[:, None])
        rotation = self._rotation(hidden, positions[:, None])
        out = StepOutput(logits=None, finals={} if final_layers else None)
        if hidden_index == 0:
            out.hidden = hidden[:, 0].float()
        order = torch.arange(rows, device=self.device)
        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, self._norm(layer.input_layernorm, hidden), rotation)
            own_k, own_v = slots.keys[index], slots.values[index]
            own_k[order, :, write] = k[:, :, 0]
            own_v[order, :, write] = v[:, :, 0]
            attended, probs = cascade_attention(
                q, None if prefix_keys is None else prefix_keys[index],
                None if prefix_values is None else prefix_values[index],
                own_k[:rows, :, :window], own_v[:rows, :, :window], own_bias, self.scaling, index == attention_layer,
                prefix_bias, self.fused)
            if probs is not None:
                out.attention = probs.float().mean(dim=(1, 2))
            hidden, mlp_out = self._rest_of_layer(layer, hidden, attended)
            if index + 1 in mlp:
                out.finals[index + 1] = mlp_out[:, -1].float()
            if index + 1 < layers:
                if index + 1 in residual:
                    out.finals[index + 1] = hidden[:, -1].float()
                if hidden_index == index + 1:
                    out.hidden = hidden[:, -1].float()
        last = self._norm(self.norm, hidden[:, -1])
        if layers in residual:
            out.finals[layers] = last.float()
        if hidden_index == layers:
            out.hidden = last.float()
        out.logits = self._logits(last)
        if choice is not None:
            entropy, logsumexp = choice
            parts = [choice_columns(out.logits, entropy=entropy, logsumexp=logsumexp)]
            parts += [t.double() for t in (out.attention, out.hidden) if t is not None]
            out.packed = torch.cat(parts, dim=1)
        return out

    # ---- pieces of a layer ----------------------------------------------------------------------------

    def _rotation(self, hidden, positions):
        """The rotary embedding's (cos, sin) at `positions` ([rows, n]): as the model computes them, or in
        fused mode shaped for rotating all heads of queries and keys at once ([rows, n, 1, d], sin's first
        half negated, for x * cos + roll(x, d/2) * sin)."""
        import torch

        cos, sin = self.rotary(hidden, positions)
        if not self.fused:
            return cos, sin
        half = sin.shape[-1] // 2
        return cos[:, :, None], torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)[:, :, None]

    def _norm(self, module, x):
        """`module(x)` for an RMSNorm; in fused mode as one `rms_norm` kernel and the weight (the model's
        own order: normalise in float32, cast back, then scale)."""
        if not self._rms:
            return module(x)
        import torch.nn.functional as F

        return F.rms_norm(x, (x.shape[-1],), eps=module.variance_epsilon) * module.weight

    def _qkv(self, layer, normed, rotation):
        """Queries [b, heads, n, d], keys and values [b, kv heads, n, d] of a normalised input [b, n, hidden]."""
        import torch

        attention = layer.self_attn
        b, n, _ = normed.shape
        cos, sin = rotation
        fused = self._fused.get(layer)
        if fused is not None:  # one product, queries and keys rotated together
            qkv = self.linear(fused.qkv, normed).view(b, n, -1, self.head_dim)
            heads, both = self.heads, self.heads + self.kv_heads
            qk = qkv[:, :, :both]
            if hasattr(attention, "q_norm"):  # Qwen3: RMSNorm over each head before the rotation
                qk = torch.cat([attention.q_norm(qk[:, :, :heads]), attention.k_norm(qk[:, :, heads:])], dim=2)
            qk = torch.addcmul(qk * cos, qk.roll(self.head_dim // 2, dims=-1), sin)
            return qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2), qkv[:, :, both:].transpose(1, 2)
        q = self.linear(attention.q_proj, normed).view(b, n, -1, self.head_dim)
        k = self.linear(attention.k_proj, normed).view(b, n, -1, self.head_dim)
        v = self.linear(attention.v_proj, normed).view(b, n, -1, self.head_dim).transpose(1, 2)
        if hasattr(attention, "q_norm"):  # Qwen3: RMSNorm over each head before the rotation
            q, k = attention.q_norm(q), attention.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def _rest_of_layer(self, layer, hidden, attended):
        """Output projection and residual, then the MLP block; (the layer's output, the MLP's output)."""
        b, heads, n, d = attended.shape
        hidden = hidden + self.linear(layer.self_attn.o_proj, attended.transpose(1, 2).reshape(b, n, heads * d))
        mlp, normed = layer.mlp, self._norm(layer.post_attention_layernorm, hidden)
        fused = self._fused.get(layer)
        if fused is not None:
            gate_up = self.linear(fused.gate_up, normed)
            inner = mlp.act_fn(gate_up[..., :fused.intermediate]) * gate_up[..., fused.intermediate:]
        else:
            inner = mlp.act_fn(self.linear(mlp.gate_proj, normed)) * self.linear(mlp.up_proj, normed)
        mlp_out = self.linear(mlp.down_proj, inner)
        return hidden + mlp_out, mlp_out

    def linear(self, module, x):
        """`module(x)` for a linear layer or fused product, through the CPU kernel's packed weight where
        there is one (not while gradients are recorded: the packed kernels have no backward)."""
        import torch

        packed = self.packed.get(module)
        if packed is None or torch.is_grad_enabled():
            return module(x)
        return self._run(module, packed, x)

    def _logits(self, normed):
        return self.linear(self.head, normed).float()


def cascade_attention(q, prefix_k, prefix_v, own_k, own_v, own_bias, scaling: float, keep_probs: bool,
                      prefix_bias=None, fused: bool = False):
    """Attention of one query per row over a shared prefix and the row's own positions.

    q: [rows, heads, 1, d]; prefix_k/v: [kv heads, P, d] shared by every row (or None); own_k/v:
    [rows, kv heads, W, d]; own_bias: [rows, kv heads, 1, W], 0 where a position counts and -inf where
    not; prefix_bias: [P] the same for the prefix, or None when every prefix position counts. Grouped-query
    heads are read in place (the g query heads of a kv head form a [g, d] block), and the prefix enters as
    one product for all rows. Scores are scaled as transformers' eager kernel scales them and normalised
    in float32 over prefix and own positions together; `fused` folds scale and bias into the products
    (`baddbmm`) and lets the softmax write the query's dtype directly (fewer kernels, other roundings; the
    fused path needs `prefix_bias` whenever there is a prefix). Returns ([rows, heads, 1, d],
    probabilities [rows, kv heads, g, P + W] in the query's dtype when `keep_probs`)."""
    import torch

    rows, heads, _, d = q.shape
    kv_heads, window = own_k.shape[1], own_k.shape[2]
    group = heads // kv_heads
    grouped = q.reshape(rows, kv_heads, group, d)
    prefix = 0 if prefix_k is None else prefix_k.shape[1]
    if fused:
        flat_own = grouped.reshape(rows * kv_heads, group, d)
        scores = torch.baddbmm(own_bias.view(rows * kv_heads, 1, window), flat_own,
                               own_k.reshape(rows * kv_heads, window, d).transpose(1, 2),
                               alpha=scaling).view(rows, kv_heads, group, window)
    else:
        scores = torch.matmul(grouped, own_k.transpose(-1, -2)) * scaling + own_bias  # [rows, kv, g, W]
    if prefix:
        flat = grouped.permute(1, 0, 2, 3).reshape(kv_heads, rows * group, d)
        if fused:
            shared = torch.baddbmm(prefix_bias.view(1, 1, prefix), flat, prefix_k.transpose(-1, -2), alpha=scaling)
        else:
            shared = torch.matmul(flat, prefix_k.transpose(-1, -2)) * scaling
            if prefix_bias is not None:
                shared = shared + prefix_bias
        scores = torch.cat([shared.view(kv_heads, rows, group, prefix).permute(1, 0, 2, 3), scores], dim=-1)
    if fused:
        probs = torch.softmax(scores, dim=-1)
    else:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs[..., prefix:], own_v)
    if prefix:
        weights = probs[..., :prefix].permute(1, 0, 2, 3).reshape(kv_heads, rows * group, prefix)
        out = out + torch.matmul(weights, prefix_v).view(kv_heads, rows, group, d).permute(1, 0, 2, 3)
    return out.reshape(rows, heads, 1, d), (probs if keep_probs else None)


def _bucket(rows: int) -> int:
    """The power of two a step of `rows` rows is padded to in static mode."""
    return 1 << max(rows - 1, 0).bit_length()


def _rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
