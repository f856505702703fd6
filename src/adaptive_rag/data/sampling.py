"""Deterministic question samples.

`random` draws one seeded permutation of the whole file and takes its first N, so a 300-sample is
always a prefix of the 500- and 1000-samples drawn with the same seed (papers report all three).
`first` takes the first N in file order, as the DRAGIN lineage does.
`skip` drops the first items of either order before taking N: with the same seed and mode, a split
skipping 16 shares no question with the 16-sample, which is how a calibration split is kept apart
from the evaluation split. `disjoint_from` (seed, size) leaves out, before anything else, the questions
a random sample of that seed and size takes: a second split drawn with another seed then shares no
question with the first.
"""

from __future__ import annotations

import random
from typing import Sequence, TypeVar

T = TypeVar("T")


def sample(items: Sequence[T], size: int | None, seed: int, mode: str = "random", skip: int = 0,
           disjoint_from: tuple[int, int] | None = None) -> list[T]:
    order = _order(len(items), seed, mode)
    if disjoint_from is not None:
        other_seed, other_size = disjoint_from
        taken = set(_order(len(items), other_seed, "random")[:other_size])
        order = [i for i in order if i not in taken]
    end = None if size is None else skip + size
    return [items[i] for i in order[skip:end]]


def _order(count: int, seed: int, mode: str) -> list[int]:
    order = list(range(count))
    if mode == "random":
        random.Random(seed).shuffle(order)
    elif mode != "first":
        raise ValueError(f"unknown sampling mode {mode!r}")
    return order
