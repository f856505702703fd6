"""TF-IDF vectors exactly as scikit-learn's `TfidfVectorizer` computes them, without its per-call cost.

DioR's post-retrieval scores many small texts with TF-IDF (paper §3.3.2; the reference code calls
`TfidfVectorizer().fit_transform([query, doc])` for every candidate passage and for every block
chunking tries, and fits a second vectorizer on the chosen passages for their keywords). Each of
those scores is one fit on two texts, and `fit_transform` spends most of its time validating its
parameters: 20-28 ms per call on this project's loaded 2-core machine, against 0.15 ms for the
vectorizer's analyzer on the same pair. A trigger scores 15 to 60 candidates and chunks 3 passages,
so fitting a vectorizer per score would cost seconds per trigger.

So this module takes the analyzer from `TfidfVectorizer` itself (lower-casing, its token pattern of
two or more word characters, its English stop-word list, n-grams built after stop words are dropped)
and applies the formula of the vectorizer's defaults: raw term counts times the smoothed idf
ln((1 + n) / (1 + df)) + 1 over the n texts fitted together, each row L2-normalised.
`tests/methods/dior/test_chunking.py` checks the results against `fit_transform` to 1e-12.

Vectors are dicts in first-occurrence order (the order the analyzer yields terms), never in set or
hash order, so every sum over them, and every tie broken by position, is the same in every process.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Callable, Sequence


@lru_cache(maxsize=None)
def analyzer(max_ngram: int = 1) -> Callable[[str], list[str]]:
    """The terms `TfidfVectorizer(stop_words="english", ngram_range=(1, max_ngram))` reads from a text,
    in text order (the reference code's settings for passages: stop words removed, 1-2-grams for
    relevance, unigrams for keywords)."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # not at import: params validation loads methods

    return TfidfVectorizer(stop_words="english", ngram_range=(1, max_ngram)).build_analyzer()


def vectors(texts: Sequence[str], max_ngram: int = 1) -> list[dict[str, float]]:
    """One L2-normalised TF-IDF vector per text, the idf fitted on `texts` together; a text without a
    single term (empty, or stop words only) gets an empty vector."""
    analyse = analyzer(max_ngram)
    counts = [Counter(analyse(text)) for text in texts]
    documents = Counter(term for count in counts for term in count)
    n = len(texts)
    idf = {term: math.log((1 + n) / (1 + df)) + 1.0 for term, df in documents.items()}
    out = []
    for count in counts:
        weights = {term: k * idf[term] for term, k in count.items()}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        out.append({term: w / norm for term, w in weights.items()} if norm else {})
    return out


def cosine(a: dict[str, float], b: dict[str, float]) -> float:
    """The dot product of two L2-normalised vectors (0 when either is empty)."""
    if len(b) < len(a):
        a, b = b, a
    return sum(w * b.get(term, 0.0) for term, w in a.items())
