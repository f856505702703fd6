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
# `dense:<name>` searches the index of one named encoder of `retrieval.dense` (several dense retrievers in
# one study, e.g. SBERT and SGPT in DioR's Table 1); the name picks the encoder and its index directory.
NAMED_DENSE = "dense:"
# How an encoder turns text into a vector (`retrieval.dense[.<name>].type`): a sentence-transformers model,
# or SGPT's bi-encoder recipe over a causal LM (bracket tokens, position-weighted mean pooling).
ENCODER_TYPES = ("sentence-transformers", "sgpt-be")


def encoder_name(kind: str) -> str | None:
    """The encoder a `dense:<name>` kind names, or None for `bm25`, `dense` and anything else."""
    return kind[len(NAMED_DENSE):] if isinstance(kind, str) and kind.startswith(NAMED_DENSE) else None
