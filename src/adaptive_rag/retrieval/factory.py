"""Opening a built index for search; `Params.retriever_kind` decides which kind a run uses."""

from __future__ import annotations

from . import KINDS, NAMED_DENSE, Retriever, encoder_name


def open_retriever(kind: str, index_dir, k1: float = 0.9, b: float = 0.4) -> Retriever:
    """A searcher over a built index of that kind (imports only that kind's backend). A named dense
    index (`dense:<name>`) is opened like the single one: its index.json says which encoder made it."""
    if kind == "dense" or encoder_name(kind):
        from .dense import DenseRetriever

        return DenseRetriever(index_dir)
    if kind == "bm25":
        from .bm25 import BM25Retriever

        return BM25Retriever(index_dir, k1, b)
    raise ValueError(f"unknown retriever kind {kind!r}; known: {', '.join(KINDS)}, {NAMED_DENSE}<name>")
