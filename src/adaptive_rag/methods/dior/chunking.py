"""DioR's chunking of retrieved passages (paper §3.3.2; spec §1.4): cut each passage into short blocks
that each read well with the query, and number them in the prompt.

Why: "if any individual document is too long, it may hinder the model's understanding", and cutting
at every sentence "may lead to semantic breaks". So units are regrouped into blocks: a block grows by
the next unit while the block's score rises, and is closed when the score falls.

Readings:
- **Paper.** Each sentence is split into sub-clauses x1..xn; x1 x2 is kept if it scores higher than
  x1, then x1 x2 x3 against x1 x2, "until the score decreases. At that point, the sub-clauses are
  grouped into a block." Neither the clause splitter nor the score is specified, nor whether the
  clause that lowered the score belongs to the block.
- **Reference code** (`TextChunk.py`, `chunk_text`): the units are spaCy *sentences* of the whole
  passage, not clauses; the score is the TF-IDF cosine of the block with the retrieval query (a
  vectorizer fitted on the pair, English stop words removed, unigrams). Each unit is appended to the
  block *before* it is scored; on a decrease (or a tie: the test is a strict `>`) the block is
  closed *with* the unit that lowered the score, and the next block starts from that same unit, so
  the unit is in both blocks (a last unit that lowers the score also ends up alone in a block of its
  own). A block's first unit is always taken (its score is compared with -1).

Ours: grow while strictly higher, then close; `chunk_close` says where:
- `before-drop` (default): the block closes before the unit that lowered the score, and that unit
  starts the next block, so every unit lands in exactly one block, in order (the block is the
  combination whose score last rose: the paper's "if the combination score improves, we proceed");
- `with-drop`: the reference code's, the unit that lowered the score ends the block and starts the
  next one again (repeated).
`chunk: sentence` (default; the code's units, and the paper's splitter is unspecified), `clause`
(the paper's units) or `none` (the passage whole). The score is `relevance`: TF-IDF cosine with
1-2-grams, the reference code's document-relevance score (`document_RAG.py`); its chunker uses
unigrams. With a query that shares no term with the passage every score is 0, nothing rises, and
every unit is its own block (`before-drop`), or each unit and the next make a block and the last
unit is one alone (`with-drop`, as in the code).

With `chunk: clause` a block stays inside its sentence, since the paper groups the sub-clauses of
"each sentence x"; with `chunk: sentence` blocks run across sentences, as in the code.

Clauses: spaCy's dependency parse (the project's pipeline, `text.py`, which keeps the parser) splits
a sentence before a subordinating conjunction (`mark`: "because", "although", "that"), before a
coordinating conjunction that joins verbs (`cc` whose head is a VERB or AUX: "born in Paris | and
died in Rome", while "Tom and Jerry" stays whole, since a noun phrase is not a clause), and after a
"," or ";" token. Blocks are slices of the passage, so its own spacing and punctuation are kept.
"""

from __future__ import annotations

from typing import Callable

from . import tfidf
# `_parse` is text.py's cached parse of a whole text: clauses read the same Doc that `sentences` splits.
from ..parts.text import Span, _parse, sentences

CHUNKS = ("sentence", "clause", "none")
CLOSES = ("before-drop", "with-drop")
RELEVANCE_NGRAMS = 2  # the reference code's relevance vectorizer: ngram_range=(1, 2)
CLAUSE_MARKERS = ("mark",)
CLAUSE_CONJUNCTION = "cc"
VERBAL = ("VERB", "AUX")
CLAUSE_END = (",", ";")


def relevance(text: str, query: str) -> float:
    """TF-IDF (1-2-gram, English stop words removed) cosine of `text` with `query`, the idf fitted on
    the pair, as the reference code's `DocumentEvaluator` computes it (`tfidf.py` says why it is not
    a `TfidfVectorizer` call). 0 when either side has no term."""
    text_vector, query_vector = tfidf.vectors([text, query], RELEVANCE_NGRAMS)
    return tfidf.cosine(text_vector, query_vector)


def clauses(text: str) -> list[Span]:
    """Clause spans of `text`, in order (see the module docstring for the boundaries)."""
    return [span for run in _clause_runs(text) for span in run]


def _clause_runs(text: str) -> list[list[Span]]:
    """The clause spans of each sentence: a clause never crosses a sentence boundary."""
    runs: list[list[Span]] = []
    for sent in _parse(text).sents:
        run: list[Span] = []
        start = end = None
        for token in sent:
            if token.is_space:
                continue
            opens = (token.dep_ in CLAUSE_MARKERS
                     or (token.dep_ == CLAUSE_CONJUNCTION and token.head.pos_ in VERBAL))
            if opens and start is not None:
                run.append(Span(start, end, text[start:end]))
                start = None
            if start is None:
                start = token.idx
            end = token.idx + len(token.text)
            if token.text in CLAUSE_END:
                run.append(Span(start, end, text[start:end]))
                start = None
        if start is not None:
            run.append(Span(start, end, text[start:end]))
        if run:
            runs.append(run)
    return runs


def check_mode(mode: str) -> None:
    if mode not in CHUNKS:
        raise ValueError(f"chunk must be one of {', '.join(CHUNKS)}; got {mode!r}")


def group(texts: list[str], query: str, score: Callable[[str, str], float],
          join: Callable[[int, int], str] | None = None, close: str = "before-drop") -> list[tuple[int, int]]:
    """Blocks as [first, last] unit ranges: grow while the block's score strictly rises; on a drop or a
    tie close the block (`before-drop`: without the unit; `with-drop`: with it) and start the next
    block from the same unit. `join(i, j)` gives the text of units i..j (default: the unit texts
    joined by a space)."""
    if close not in CLOSES:
        raise ValueError(f"chunk_close must be one of {', '.join(CLOSES)}; got {close!r}")
    join = join or (lambda i, j: " ".join(texts[i:j + 1]))
    blocks: list[tuple[int, int]] = []
    first, best = None, 0.0
    i = 0
    while i < len(texts):
        value = score(join(i if first is None else first, i), query)
        if first is None:
            first, best = i, value
            i += 1
        elif value > best:
            best = value
            i += 1
        else:
            blocks.append((first, i if close == "with-drop" else i - 1))
            first = None
    if first is not None:
        blocks.append((first, len(texts) - 1))
    return blocks


def chunk_passage(text: str, query: str, mode: str, score: Callable[[str, str], float] = relevance,
                  close: str = "before-drop") -> list[str]:
    """`text` cut into blocks (mode `sentence` or `clause`; `close` as in `group`), or `[text]` (mode
    `none`). Each block is the slice of `text` from its first unit to its last; a text without a unit
    gives no block."""
    check_mode(mode)
    if mode == "none":
        return [text]
    # A clause block stays inside its sentence: the paper groups "the sub-clauses" of "each sentence x".
    runs = [sentences(text)] if mode == "sentence" else _clause_runs(text)
    return [block for spans in runs for block in _blocks(text, spans, query, score, close)]


def _blocks(text: str, spans: list[Span], query: str, score: Callable[[str, str], float], close: str) -> list[str]:
    def join(i: int, j: int) -> str:
        return text[spans[i].start:spans[j].end]

    return [join(i, j) for i, j in group([s.text for s in spans], query, score, join, close)]


def render_chunks(chunks: list[str]) -> str:
    """One passage's blocks as the paper's prompt shows them (§3.3.2: "d1[(1).d11, (2).d12, ...]"):
    "(1).c1 (2).c2 ...", numbered from 1, one space between blocks."""
    return " ".join(f"({number}).{chunk}" for number, chunk in enumerate(chunks, 1))
