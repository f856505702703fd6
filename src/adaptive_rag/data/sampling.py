"""Deterministic question samples.

`random` draws one seeded permutation of the whole file and takes its first N, so a 300-sample is
always a prefix of the 500- and 1000-samples drawn with the same seed (papers report all three).
`first` takes the first N in file order, as the DRAGIN lineage does.
"""

from __future__ import annotations

import random
from typing import Sequence, TypeVar

T = TypeVar("T")


def sample(items: Sequence[T], size: int | None, seed: int, mode: str = "random") -> list[T]:
    order = list(range(len(items)))
    if mode == "random":
        random.Random(seed).shuffle(order)
    elif mode != "first":
        raise ValueError(f"unknown sampling mode {mode!r}")
    if size is not None:
        order = order[:size]
    return [items[i] for i in order]
