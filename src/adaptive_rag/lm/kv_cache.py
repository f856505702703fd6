"""The fast path's KV cache: one shared prefix held once, and preallocated per-row slots.

Why it is built this way:
- Every question of a dataset starts with the same few-shot prefix, and the k samples of one prompt
  start with the same prompt. That prefix's keys and values are stored once ([kv heads, P, head dim]
  per layer, no batch dimension) and every row reads the same memory: nothing is copied per row, and a
  decode step reads the prefix once for all rows (`fast_decoder.cascade_attention`).
- What differs per row (its own prompt suffix, then its generated tokens) lives in slots preallocated
  for the whole call ([slots, kv heads, length, head dim] per layer), written in place: the cache never
  grows by concatenation, and the shapes stay fixed, which is what a captured CUDA graph needs.
- Active rows are kept in slots 0..n-1: a row that leaves is replaced by the last active row (one
  row's valid part copied once), so a step reads a contiguous block and the batch can be refilled from
  the end (continuous batching).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PrefixKV:
    """Keys and values of a shared prefix: per layer [kv heads, P, head dim]; `ids` are its tokens and
    `logits` the next-token logits after its last token (float32, [vocab]) when they were kept."""

    ids: tuple[int, ...]
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    logits: object | None = None

    @property
    def length(self) -> int:
        return len(self.ids)

    def extended(self, keys: list, values: list, ids: tuple[int, ...], logits) -> "PrefixKV":
        """This prefix followed by more tokens (their per-layer [kv heads, n, head dim] keys and values):
        one copy into a new prefix, which k sample rows of one prompt then share."""
        import torch

        if not self.ids:
            return PrefixKV(ids, list(keys), list(values), logits)
        return PrefixKV(self.ids + ids, [torch.cat([a, b], dim=1) for a, b in zip(self.keys, keys)],
                        [torch.cat([a, b], dim=1) for a, b in zip(self.values, values)], logits)

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class SlotKV:
    """Per-row keys and values after the shared prefix, preallocated: per layer [slots, kv heads, length,
    head dim]. `lengths[s]` is how many positions slot s holds."""

    def __init__(self, layers: int, slots: int, kv_heads: int, length: int, head_dim: int, dtype, device):
        import torch

        shape = (slots, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.lengths = [0] * slots
        self.capacity = length

    @staticmethod
    def bytes_per_position(layers: int, kv_heads: int, head_dim: int, element_size: int) -> int:
        """Memory one cached position of one row costs (keys and values of every layer)."""
        return 2 * layers * kv_heads * head_dim * element_size

    def move(self, source: int, target: int) -> None:
        """Slot `source`'s valid positions into slot `target` (the row that was there has left)."""
        n = self.lengths[source]
        if source != target and n:
            for tensors in (self.keys, self.values):
                for layer in tensors:
                    layer[target, :, :n] = layer[source, :, :n]
        self.lengths[target] = n
        self.lengths[source] = 0
