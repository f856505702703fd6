"""DioR's pre-retrieval keyword scoring (Guo et al. 2025, §3.2 Eq. 3 and §3.3.1; spec §1.3): which
words of the question and of the answer so far make the query, and in what order.

Why a scored query: DRAGIN ranks the context's words by one signal (the attention the hallucinated
token pays them). DioR adds three more and sums them, I_i = w_A·A_i + w_T·TFIDF_i + w_P·P_i + w_S·S_i,
each term min-max scaled to [0, 1] over the candidates (the spec; the paper says "weighted sum" and
gives no weights, so they default to 1, as the reference code's). The top `top_n` candidates by I
(ties: the earlier one first) make the query, joined in text order. `pre: sequential` takes the first
`top_n` candidates in text order instead, ignoring I: the paper's "w/o Pre-R" ablation ("retrieval
performed sequentially based on the order of token appearances").

Candidates, each a span of one scoring context, the question followed by the generated text
(`KeywordContext`; the answer kept, then the look-ahead through the sentence judged). Two readings
(`candidates:` in `dior.py`):
- `real-words` (default; the reference code's `keep_real_words`, `new_generate.py`): every real
  word (DRAGIN's POS filter: NOUN, ADJ, VERB, PROPN, NUM) of the question and of the generated text,
  minus those that overlap a token real-time detection flagged (`real_word_candidates`). The paper
  ranks "each candidate keyword (token)" of "the entire text generated" and keeps the top ones, and
  its Table 3 has w/o Pre-R below DioR: the ranking must select, which with `top_n` 25/35 (the
  reference code's values) needs a candidate set this wide;
- `eq3-entities` (the narrow reading of §3.2-3.3.1): the question's Eq. 3 candidates, tokens whose
  normalised IG attribution is above the mean (`ig_candidates`), mapped to the words they overlap
  (`question_candidates`; stop words dropped: they carry no retrieval signal, and BM25's analyzer
  drops them from a query anyway), and the spaCy entities of the generated text that overlap no
  flagged token (`entity_candidates`). Usually fewer than 15, so `top_n` keeps them all and
  `pre: scored` equals `pre: sequential`.
In both, a candidate repeated (case-insensitively) keeps its first occurrence (`merge`; the
reference code scores every occurrence).

The terms, each computed by a function here:
- A (`attention_term`): the attention the flagged tokens pay a candidate's tokens (the last layer's
  head-averaged rows of the look-ahead, as DRAGIN's QFS reads them), summed over its tokens and
  averaged over the flagged tokens: the reference code's A;
- TF-IDF (`tfidf_term`): tf counts the candidate's words in the scoring context; idf is the corpus's
  (`tfidf: corpus`, default, spec: "information density" is only meaningful against the corpus)
  through an `idf` function (`CorpusIdf` over BM25's index), or 1 (`tfidf: context`, the reference
  code's TF-IDF fitted on the one context text, where every idf is equal); a multi-word candidate
  takes the mean over its words. The reference indexes its TF-IDF by vocabulary order, not token
  position (spec §1.3); this one is aligned;
- P (`position_term`): Pos(i)/N, the 1-based index of the candidate's first word among the scoring
  context's N words (the paper's formula; the reference code has no positional term);
- S (`similarity_term`): the cosine of the candidate's embedding and the question's, from any
  `similarity(anchor, texts)` function (MiniLM or the LM's input embeddings; `dior.py` picks).

Pure functions where possible (numpy and the text helpers); nothing here loads a model.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ..parts.lookahead import LookAhead, token_spans
from ..parts.text import entities, real_words, stop_words, words

TERMS = ("attention", "tfidf", "position", "similarity")
PRE = ("scored", "sequential")
CANDIDATES = ("real-words", "eq3-entities")
TFIDF = ("corpus", "context")
SIMILARITY = ("minilm", "lm-embeddings")
DEFAULT_WEIGHTS: dict[str, float] = {term: 1.0 for term in TERMS}
QUESTION, GENERATED = "question", "generated"
TIE_DIGITS = 12  # importances equal to 12 decimals are a tie (broken by position), whatever the float sums did


# ---- the scoring itself (spec acceptance tests 3 and 4) -----------------------------------------

def ig_candidates(scores: Sequence[float]) -> list[int]:
    """Eq. 3: the indices of the tokens whose attribution is above the mean of all tokens'."""
    a = np.asarray(scores, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"attribution scores must be a 1-D sequence; got shape {a.shape}")
    if a.size == 0:
        return []
    return [int(i) for i in np.flatnonzero(a > a.mean())]


def positions(pos: Sequence[int], total: int) -> list[float]:
    """P_i = Pos(i)/N for 1-based positions among N tokens (words here)."""
    if total < 1 or any(not 1 <= p <= total for p in pos):
        raise ValueError(f"positions must lie in 1..{total}; got {list(pos)}")
    return [p / total for p in pos]


def min_max(values: Sequence[float]) -> list[float]:
    """Scaled to [0, 1] over the candidates; all equal (one candidate, or a term with no spread) gives 0
    for all, so the term then ranks nothing."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return []
    low, high = float(v.min()), float(v.max())
    if not high > low:
        return [0.0] * v.size
    return [float(x) for x in (v - low) / (high - low)]


def importance(terms: Mapping[str, Sequence[float]], weights: Mapping[str, float], count: int
               ) -> tuple[dict[str, list[float]], list[float]]:
    """Each term min-max scaled over the `count` candidates, and I_i = sum over terms of weight · scaled
    term. A term missing from `terms` (its weight is 0, so it was not computed) counts as 0."""
    scaled = {}
    for term in TERMS:
        values = terms.get(term)
        if values is None:
            scaled[term] = [0.0] * count
            continue
        if len(values) != count:
            raise ValueError(f"term {term!r}: {len(values)} values for {count} candidates")
        scaled[term] = min_max(values)
    total = [sum(weights.get(term, 0.0) * scaled[term][i] for term in TERMS) for i in range(count)]
    return scaled, total


def ranking(importances: Sequence[float]) -> list[int]:
    """Candidate indices by descending I, ties by position (candidates are in text order)."""
    return sorted(range(len(importances)), key=lambda i: (-round(importances[i], TIE_DIGITS), i))


def select(importances: Sequence[float], top_n: int, pre: str = "scored") -> list[int]:
    """The indices kept, in text order: the top `top_n` by I (`scored`), or the first `top_n` in text
    order (`sequential`, the "w/o Pre-R" ablation)."""
    if pre not in PRE:
        raise ValueError(f"pre must be one of {', '.join(PRE)}; got {pre!r}")
    if pre == "sequential":
        return list(range(min(top_n, len(importances))))
    return sorted(ranking(importances)[:top_n])


# ---- candidates ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeywordContext:
    """The text candidates are found in and scored over: the question, a newline, then the generated
    text (the answer kept so far, then the look-ahead through the judged sentence)."""

    question: str
    answer: str = ""
    lookahead: str = ""

    @property
    def answer_start(self) -> int:
        return len(self.question) + 1

    @property
    def lookahead_start(self) -> int:
        return self.answer_start + len(self.answer)

    @property
    def text(self) -> str:
        return f"{self.question}\n{self.answer}{self.lookahead}"


@dataclass(frozen=True)
class Candidate:
    text: str
    start: int  # character offsets into `KeywordContext.text`
    end: int
    source: str  # QUESTION or GENERATED


def question_candidates(question: str, tokens: Sequence[str], scores: Sequence[float]) -> list[Candidate]:
    """The words of `question` that hold an Eq. 3 candidate token, stop words left out. `tokens` are the
    attributed prompt's token texts (they join to the prompt, a BOS included as its empty text) and
    `scores` their normalised attributions; the question is found in the joined tokens, so tokens
    outside it (a BOS, a chat template's markup) are never candidates."""
    if len(tokens) != len(scores):
        raise ValueError(f"{len(tokens)} tokens but {len(scores)} attribution scores")
    joined = "".join(tokens)
    at = joined.find(question)
    if at < 0 or not question:
        return []
    picked = set(ig_candidates(scores))
    chosen = [span for k, span in enumerate(token_spans(list(tokens))) if k in picked]
    stop = stop_words()
    out = []
    for word in words(question):
        a, b = at + word.start, at + word.end
        if word.text.lower() not in stop and any(s < b and e > a for s, e in chosen):
            out.append(Candidate(word.text, word.start, word.end, QUESTION))
    return out


def question_real_words(question: str) -> list[Candidate]:
    """The question's real words (NOUN, ADJ, VERB, PROPN, NUM), as candidates of the scoring context."""
    return [Candidate(w.text, w.start, w.end, QUESTION) for w in real_words(question)]


def real_word_candidates(context: KeywordContext, flagged: Sequence[tuple[int, int]] = ()) -> list[Candidate]:
    """`candidates: real-words`: the real words of the question and of the generated text, the generated
    ones that overlap a flagged span left out (`flagged` as in `entity_candidates`), merged."""
    return merge(question_real_words(context.question), _generated(context, flagged, real_words))


def entity_candidates(context: KeywordContext, flagged: Sequence[tuple[int, int]] = ()) -> list[Candidate]:
    """The spaCy entities of the generated text (`context.answer + context.lookahead`) that overlap no
    flagged span (`flagged`: character spans into `context.lookahead`, the tokens real-time detection
    judged hallucinated)."""
    return _generated(context, flagged, entities)


def _generated(context: KeywordContext, flagged: Sequence[tuple[int, int]], find) -> list[Candidate]:
    """The spans `find(generated text)` gives, as candidates of the scoring context, minus those that
    overlap a flagged span."""
    generated = context.answer + context.lookahead
    if not generated.strip():
        return []
    shift = context.answer_start
    bad = [(context.lookahead_start + a, context.lookahead_start + b) for a, b in flagged]
    out = []
    for span in find(generated):
        a, b = shift + span.start, shift + span.end
        if not any(s < b and e > a for s, e in bad):
            out.append(Candidate(span.text, a, b, GENERATED))
    return out


def merge(*groups: Sequence[Candidate]) -> list[Candidate]:
    """All candidates in text order, a repeated one (same text, any case) kept at its first occurrence."""
    seen, out = set(), []
    for candidate in sorted((c for g in groups for c in g), key=lambda c: (c.start, c.end)):
        key = " ".join(candidate.text.lower().split())
        if key and key not in seen:
            seen.add(key)
            out.append(candidate)
    return out


# ---- the four terms -----------------------------------------------------------------------------

def position_term(candidates: Sequence[Candidate], context: KeywordContext) -> list[float]:
    """P = Pos/N: Pos the 1-based index of the candidate's first word among the context's N words."""
    spans = words(context.text)
    if not candidates:
        return []
    pos = []
    for c in candidates:
        index = next((k for k, w in enumerate(spans) if w.end > c.start), None)
        if index is None:
            raise ValueError(f"candidate {c.text!r} at {c.start} lies outside the context's words")
        pos.append(index + 1)
    return positions(pos, len(spans))


def context_idf(word: str) -> float:
    """`tfidf: context`: TF-IDF fitted on the one context text gives every word the same idf, so the
    term is the term frequency (the reference code's single-document TfidfVectorizer)."""
    return 1.0


def tfidf_term(candidates: Sequence[Candidate], context: KeywordContext, idf: Callable[[str], float]) -> list[float]:
    """tf (the word's count in the context, case-insensitive) times idf, the mean over a candidate's words."""
    counts = Counter(w.text.lower() for w in words(context.text))
    out = []
    for c in candidates:
        values = [counts[w.text.lower()] * idf(w.text) for w in words(c.text)]
        out.append(sum(values) / len(values) if values else 0.0)
    return out


class CorpusIdf:
    """`tfidf: corpus`: idf from the retrieval index's document frequencies, sklearn's smoothed form
    ln((1 + N) / (1 + df)) + 1. `statistics(word)` gives the word's analyzed terms with their document
    frequencies (`BM25Retriever.term_statistics`: Lucene's analyzer, so a stop word has no term and
    idf 0, and "walks" counts as "walk"); a word analysed into several terms takes their mean."""

    def __init__(self, statistics: Callable[[str], list[tuple[str, int]]], documents: int):
        self.statistics, self.documents = statistics, documents
        self.cache: dict[str, float] = {}

    def __call__(self, word: str) -> float:
        key = word.lower()
        if key not in self.cache:
            terms = self.statistics(word)
            self.cache[key] = (sum(math.log((1 + self.documents) / (1 + df)) + 1 for _, df in terms) / len(terms)
                               if terms else 0.0)
        return self.cache[key]


def attention_term(candidates: Sequence[Candidate], context: KeywordContext, lookahead: LookAhead,
                   flagged: Sequence[int]) -> list[float]:
    """A: for each flagged look-ahead token f, the attention its row pays the candidate's tokens
    (summed), averaged over the flagged tokens; 0 where no flagged token sees the candidate (it comes
    later, or it is not among the prompt's own tokens). The question is found in the prompt's own
    (non-shared) tokens, the answer so far at the prompt's end, the look-ahead in the generated tokens
    (as DRAGIN's QFS does, `attention.real_words_query`)."""
    if not candidates:
        return []
    if not flagged:
        return [0.0] * len(candidates)
    c = lookahead.c
    if c.attentions is None:
        raise RuntimeError("the attention term needs the look-ahead's attention rows (a white-box model, "
                           "Extras(attention_layer=-1))")
    prompt_tokens = list(c.meta.get("prompt_tokens") or [])
    prompt_text = "".join(prompt_tokens)
    spans = token_spans(prompt_tokens + list(c.tokens))
    columns = [c.prompt_tokens - len(prompt_tokens) + k for k in range(len(prompt_tokens))] + \
              [c.prompt_tokens + i for i in range(len(c.tokens))]
    regions = []  # (context start, context end, where it starts in prompt text + generated text)
    q_at = prompt_text.rfind(context.question) if context.question else -1
    if q_at >= 0:
        regions.append((0, len(context.question), q_at))
    answer = context.answer.strip()
    if answer and prompt_text.rstrip().endswith(answer):
        lead = len(context.answer) - len(context.answer.lstrip())
        regions.append((context.answer_start + lead, context.answer_start + lead + len(answer),
                        len(prompt_text.rstrip()) - len(answer)))
    regions.append((context.lookahead_start, context.lookahead_start + len(context.lookahead), len(prompt_text)))
    rows = [np.asarray(c.attentions[f], dtype=np.float64) for f in flagged]
    out = []
    for cand in candidates:
        region = next(((a, v) for a, b, v in regions if a <= cand.start and cand.end <= b), None)
        if region is None:
            out.append(0.0)
            continue
        va, vb = region[1] + cand.start - region[0], region[1] + cand.end - region[0]
        inside = [columns[k] for k, (s, e) in enumerate(spans) if s < vb and e > va]
        out.append(float(sum(sum(row[col] for col in inside if col < row.size) for row in rows) / len(rows)))
    return out


def similarity_term(candidates: Sequence[Candidate], anchor: str,
                    similarity: Callable[[str, list[str]], list[float]]) -> list[float]:
    """S: sim(anchor, candidate) for every candidate in one call (the anchor is the question)."""
    if not candidates:
        return []
    values = [float(v) for v in similarity(anchor, [c.text for c in candidates])]
    if len(values) != len(candidates):
        raise RuntimeError(f"the similarity gave {len(values)} values for {len(candidates)} candidates")
    return values


def cosines(anchor: np.ndarray, vectors: np.ndarray) -> list[float]:
    """Cosine of each row of `vectors` with `anchor` (0 for a zero vector)."""
    a = np.asarray(anchor, dtype=np.float64)
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1) * np.linalg.norm(a)
    dots = v @ a
    return [float(d / n) if n > 0 else 0.0 for d, n in zip(dots, norms)]


# ---- the query ----------------------------------------------------------------------------------

@dataclass
class KeywordQuery:
    """The query and everything behind it, for the trace."""

    text: str
    pre: str
    candidates: list[Candidate]
    kept: list[int]
    terms: dict[str, list[float]] = field(default_factory=dict)
    scaled: dict[str, list[float]] = field(default_factory=dict)
    importance: list[float] = field(default_factory=list)

    def record(self) -> dict:
        kept = set(self.kept)
        rows = []
        for i, c in enumerate(self.candidates):
            row = {"text": c.text, "source": c.source, "kept": i in kept}
            if self.importance:
                row["terms"] = {t: round(v[i], 4) for t, v in self.terms.items()}
                row["scaled"] = {t: round(v[i], 4) for t, v in self.scaled.items() if t in self.terms}
                row["score"] = round(self.importance[i], 4)
            rows.append(row)
        return {"query": self.text, "pre": self.pre, "candidates": rows}


def keyword_query(candidates: Sequence[Candidate], terms: Mapping[str, Sequence[float]],
                  weights: Mapping[str, float], top_n: int, pre: str = "scored") -> KeywordQuery:
    """The kept candidates (`select`) joined in text order; `terms` holds the raw terms computed (by
    name; those left out count as 0), ignored under `pre: sequential`."""
    candidates = list(candidates)
    if pre == "sequential":
        kept = select([0.0] * len(candidates), top_n, pre)
        return KeywordQuery(" ".join(candidates[i].text for i in kept), pre, candidates, kept)
    scaled, total = importance(terms, weights, len(candidates))
    kept = select(total, top_n, pre)
    return KeywordQuery(" ".join(candidates[i].text for i in kept), pre, candidates, kept,
                        {t: [float(x) for x in v] for t, v in terms.items()}, scaled, total)
