"""DioR's stepwise retrieval (paper §3.3.2; spec §1.4): choose the documents a trigger needs a few at a
time, and widen the query after each step with what the chosen ones say.

Why: dynamic RAG methods "retrieve all documents in a single batch per query trigger", so a query
that misses a concept misses it for every document. Retrieving in steps lets the first documents
contribute terms ("newly emerging keywords or concepts") that find the later ones.

Readings:
- **Paper.** n documents are needed (App. B.3: top-k = 3; the §3.3.2 example uses 5). From the
  "candidate area" the pre-retrieval search filled, take the ⌊n_rem / 2⌋ most relevant (n_rem: how
  many are still missing), extract the new keywords of the chosen documents, merge them into the
  query, retrieve again, and repeat until n are chosen. Relevance, how keywords are extracted and
  how many candidates a search brings are not given.
- **Reference code** (`new_generate.py`, `document_RAG.py`, `New_keyRAG.py`):
  - the first search brings k = 3 passages, each later one 3 × 5 = 15;
  - relevance is the TF-IDF (1-2-gram, English stop words removed) cosine of a passage with the
    *original* query of the trigger (the evaluator is built once, before the query grows);
  - it keeps *every* passage scoring at least the mean of its search, in retrieval order, until k
    are kept: not ⌊n_rem / 2⌋;
  - keywords: a `TfidfVectorizer(max_features=10)` fitted on the chunks kept so far, each chunk's
    top 10 terms pooled through a Python `set` and the first 10 taken. Set order follows string
    hashes, which Python randomises per process, so the query differs between runs. Terms already
    in the query are not excluded;
  - the keywords are appended **without a space** (`query + " ".join(keywords)`), which fuses the
    query's last word with the first keyword ("... Yarrowick" + "glass" gives "Yarrowickglass");
  - duplicates are dropped by comparing passage texts with the kept *chunks*, so a passage that was
    cut into several chunks can be kept twice;
  - after 10 searches, one search of the k still missing, with the grown query, fills the rest
    (duplicates not dropped);
  - every search counts one retrieval (Rc), which is why Table 4's Rc is about 3 per trigger.

Ours (`StepwiseSettings`): the paper's counts (round r takes ⌊n_rem × step_fraction⌋, at least 1:
rounds of 2, 1, 1, 1 for 5 documents, 1, 1, 1 for 3) with the code's relevance, scored against the
original query (`relevance: tfidf`), or the search's own score (`relevance: bm25`). Every search
brings `candidate_pool` hits (the first too). A document is chosen at most once (by id). The new
keywords are the top `new_keywords` terms of all documents chosen so far, by their summed TF-IDF
weight (unigrams, English stop words removed, idf fitted on the chosen documents), leaving out terms
already in the query, appended after one space; we do not copy the missing space. After
`max_rounds` rounds, or as soon as a round chose nothing and found no new keyword (the next search
would repeat it exactly), one plain search of `docs` hits with the original query fills what is left,
in retrieval order, skipping chosen documents. `searches` counts every search (Rc under DioR).

Determinism: every tie is broken by position, never by set or dict-hash order. Documents with equal
relevance keep their retrieval rank; keywords with equal weight keep the order in which they first
occur in the chosen documents, taken in selection order.

The caller's `search` may cut a long query to its last words (`retrieval.query_max_words`), as the
reference code's BM25 keeps the last 64 tokens. A query grown by many keywords then loses the
original words first, in both. Relevance is still scored against the original query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ...retrieval import Hit
from . import tfidf
from .chunking import relevance as tfidf_relevance

RELEVANCE = ("tfidf", "bm25")
KEYWORD_NGRAMS = 1  # the reference code's keyword vectorizer: unigrams
FLOOR_SLACK = 1e-9  # 0.29 * 100 is 28.999999999999996 in floating point; the floor must still say 29


@dataclass(frozen=True)
class StepwiseSettings:
    docs: int = 3  # documents finally selected (the paper's top-k, App. B.3)
    step_fraction: float = 0.5  # each round takes floor(remaining * step_fraction), at least 1
    new_keywords: int = 10  # TF-IDF top terms of the chosen docs not already in the query, appended per round
    candidate_pool: int = 15  # hits fetched per search (3 x 5 in the reference code)
    max_rounds: int = 10  # then a plain search fills what is left
    # tfidf: TF-IDF (1-2 gram) cosine of doc text with the query (code); bm25: the search score
    relevance: str = "tfidf"

    def __post_init__(self):
        for name, low in (("docs", 1), ("new_keywords", 0), ("candidate_pool", 1), ("max_rounds", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"stepwise setting {name} must be an integer >= {low}; got {value!r}")
        fraction = self.step_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"stepwise setting step_fraction must be a number in (0, 1]; got {fraction!r}")
        if self.relevance not in RELEVANCE:
            raise ValueError(f"stepwise setting relevance must be one of {', '.join(RELEVANCE)}; "
                             f"got {self.relevance!r}")


@dataclass
class StepwiseResult:
    hits: list[Hit]  # the selected documents, in selection order, no duplicates, len <= docs
    queries: list[str]  # the query of every search, in order
    searches: int  # number of search calls made (Rc under DioR)
    rounds: list[dict]  # per round, for the trace: {"query", "pool": [ids], "chosen": [ids], "fallback"}


def round_size(remaining: int, step_fraction: float) -> int:
    """How many documents a round takes: ⌊remaining × step_fraction⌋, at least 1, at most remaining."""
    return min(remaining, max(1, math.floor(remaining * step_fraction + FLOOR_SLACK)))


def new_keywords(texts: list[str], query: str, n: int) -> list[str]:
    """The `n` terms of `texts` with the highest summed TF-IDF weight (idf fitted on `texts`) that the
    query does not already hold; equal weights keep the order of first occurrence in `texts`."""
    if n <= 0 or not texts:
        return []
    analyse = tfidf.analyzer(KEYWORD_NGRAMS)
    in_query = set(analyse(query))
    totals: dict[str, float] = {}  # first-occurrence order: dicts keep insertion order
    for vector in tfidf.vectors(texts, KEYWORD_NGRAMS):
        for term, weight in vector.items():
            totals[term] = totals.get(term, 0.0) + weight
    first = {}
    for text in texts:
        for term in analyse(text):
            first.setdefault(term, len(first))
    ranked = sorted((term for term in totals if term not in in_query), key=lambda t: (-totals[t], first[t]))
    return ranked[:n]


def expand(query: str, keywords: list[str]) -> str:
    """The query with the keywords appended after a space (the reference code omits the space)."""
    return " ".join([query, *keywords]) if keywords else query


def _rank(pool: list[Hit], query: str, relevance: str) -> list[Hit]:
    scores = [tfidf_relevance(h.text, query) if relevance == "tfidf" else h.score for h in pool]
    order = sorted(range(len(pool)), key=lambda i: (-scores[i], i))  # ties: retrieval rank
    return [pool[i] for i in order]


def _new(hits: list[Hit], chosen: set[str]) -> list[Hit]:
    """Hits not chosen before, each id once, in retrieval order."""
    seen = set(chosen)
    out = []
    for hit in hits:
        if hit.id not in seen:
            seen.add(hit.id)
            out.append(hit)
    return out


def stepwise_retrieve(query: str, search: Callable[[str, int], list[Hit]],
                      settings: StepwiseSettings) -> StepwiseResult:
    """Choose `settings.docs` documents in rounds, growing the query after each (module docstring)."""
    selected: list[Hit] = []
    chosen_ids: set[str] = set()
    queries: list[str] = []
    rounds: list[dict] = []
    current = query
    for _ in range(settings.max_rounds):
        remaining = settings.docs - len(selected)
        queries.append(current)
        pool = _new(search(current, settings.candidate_pool), chosen_ids)
        chosen = _rank(pool, query, settings.relevance)[:round_size(remaining, settings.step_fraction)]
        selected.extend(chosen)
        chosen_ids.update(h.id for h in chosen)
        rounds.append({"query": current, "pool": [h.id for h in pool], "chosen": [h.id for h in chosen],
                       "fallback": False})
        if len(selected) >= settings.docs:
            break
        keywords = new_keywords([h.text for h in selected], current, settings.new_keywords)
        if not chosen and not keywords:
            break  # the next search would be this one again
        current = expand(current, keywords)
    remaining = settings.docs - len(selected)
    if remaining > 0:
        queries.append(query)
        pool = _new(search(query, settings.docs), chosen_ids)
        fill = pool[:remaining]
        selected.extend(fill)
        rounds.append({"query": query, "pool": [h.id for h in pool], "chosen": [h.id for h in fill],
                       "fallback": True})
    return StepwiseResult(hits=selected, queries=queries, searches=len(queries), rounds=rounds)


def single_retrieve(query: str, search: Callable[[str, int], list[Hit]], docs: int) -> StepwiseResult:
    """The "w/o Post-R" ablation (paper §4.2.3, App. F): one search of `docs`, all of them in the prompt."""
    if not isinstance(docs, int) or isinstance(docs, bool) or docs < 1:
        raise ValueError(f"docs must be an integer >= 1; got {docs!r}")
    hits = _new(search(query, docs), set())[:docs]
    ids = [h.id for h in hits]
    return StepwiseResult(hits=hits, queries=[query], searches=1,
                          rounds=[{"query": query, "pool": ids, "chosen": ids, "fallback": False}])
