"""RaDIO's query words ("contextual index optimized query formulation"): DRAGIN's real-word query with
each word's attention multiplied by a TF-IDF term and a similarity term (github ghh1125/RaDIO,
src/generate.py `AttnWeightRAG.keep_real_words`; src/main.py imports this file, so this is what runs).

The reference ranks the units of `all_text` = question, text so far, the look-ahead before the fired
sentence and the fired sentence's tokens, joined with spaces; a unit is a whitespace-delimited chunk
(the tokens merged at the space marker). For the unit at index i with text w:
- TF-IDF: `TfidfVectorizer().fit_transform([all_text])`, flattened: one entry per distinct term of
  `all_text` in the vectorizer's (alphabetical) order, read at index i (0 when i is past the end). The
  entry is therefore the weight of the i-th term alphabetically, not of w; the reference reads it so,
  and so does `tfidf_factors`. With one document every idf is equal, so an entry is the term's count
  over the L2 norm of all counts.
- similarity: spaCy's vector of each token of `all_text` (`token.vector`: en_core_web_sm has no word
  vectors, so this is the token-to-vector layer's context vector), kept by token text (a later token of
  the same text replaces an earlier); w's vector is that of a spaCy token with exactly w's text, else
  the mean of the kept vectors; the term is the mean cosine of w's vector with every unit's vector
  (looked up the same way), itself included. A zero vector makes a cosine undefined: it counts 0 here
  (the reference's NaN has no order in its sort).
The word's score is attention * TF-IDF * similarity; the top `top_n` are kept in text order.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

_CHUNK = re.compile(r"\S+")


def units(virtual: str, regions: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The whitespace chunks of the regions, in order, as character spans of `virtual`."""
    return [(start + m.start(), start + m.end()) for start, end in regions for m in _CHUNK.finditer(virtual[start:end])]


def tfidf_factors(all_text: str, count: int) -> list[float]:
    """The flattened single-document TF-IDF vector of `all_text` read at unit indices 0..count-1."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        row = TfidfVectorizer().fit_transform([all_text]).toarray().reshape(-1)
    except ValueError:  # no term of two or more word characters: an empty vocabulary
        row = np.zeros(0)
    return [float(row[i]) if i < row.size else 0.0 for i in range(count)]


def similarity_factors(texts: Sequence[str], vectors: dict[str, np.ndarray]) -> list[float]:
    """Each unit's mean cosine with every unit, a unit's vector being `vectors[text]` or their mean."""
    if not vectors:
        return [0.0] * len(texts)
    mean = np.mean(np.stack(list(vectors.values())), axis=0)
    matrix = np.stack([np.asarray(vectors.get(t, mean), dtype=np.float64) for t in texts])
    norms = np.linalg.norm(matrix, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = matrix @ matrix.T / np.outer(norms, norms)
    cosine = np.nan_to_num(cosine, nan=0.0, posinf=0.0, neginf=0.0)
    return [float(v) for v in cosine.mean(axis=1)]


def token_vectors(text: str) -> dict[str, np.ndarray]:
    """spaCy's `token.vector` of each token of `text`, by token text (the last of equal texts wins)."""
    from ..parts.text import _parse

    return {t.text: np.asarray(t.vector, dtype=np.float64) for t in _parse(text)}


def radio_factors(virtual: str, regions: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                  vectors=token_vectors) -> list[float]:
    """TF-IDF * similarity of the unit holding each candidate span (a `real_words_query` reweight)."""
    found = units(virtual, regions)
    texts = [virtual[a:b] for a, b in found]
    all_text = " ".join(virtual[a:b] for a, b in regions)
    tfidf = tfidf_factors(all_text, len(found))
    similarity = similarity_factors(texts, vectors(all_text))
    out = []
    for a, _ in spans:
        k = next((k for k, (s, e) in enumerate(found) if s <= a < e), None)
        out.append(0.0 if k is None else tfidf[k] * similarity[k])
    return out
