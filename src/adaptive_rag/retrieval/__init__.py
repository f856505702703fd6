"""Retrievers behind one small interface (`Retriever.search(query, k)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    score: float


class Retriever(Protocol):
    def search(self, query: str, k: int) -> list[Hit]: ...

    def identity(self) -> dict: ...



KINDS = ("bm25", "dense")  # the index kinds a run can search (`retrieval.type`, a method's `retriever:`)
