"""Corpus frequency: an offline popularity proxy for Adaptive Retrieval (`popularity_proxy: corpus-frequency`).

Mallen et al.'s popularity is the monthly Wikipedia page views of the question's subject entity, which
no dataset here carries and which cannot be fetched offline. This proxy counts instead how many
passages of the run's own corpus (the corpus step's JsonCollection, the passages the index holds)
mention the question's entity: a corpus count, not page views. Its scale is passages of this corpus,
so a threshold calibrated on it holds for it only.

The question's entity, one per question:
- the named entities spaCy's NER finds in the question (the project's English pipeline,
  `parts.text.entities`), less those of a numeric or temporal label (DATE, TIME, PERCENT, MONEY,
  QUANTITY, ORDINAL, CARDINAL: "what year", "first" name no thing whose popularity could be counted);
- when none is left, the question's runs of consecutive proper nouns (`parts.text.proper_noun_runs`),
  the names NER misses;
- each without a leading "the" and a trailing possessive "'s" ("the Varnham Press" is mentioned as
  "Varnham Press" too; "Yannick Vessey's" as "Yannick Vessey");
- of several, the one mentioned by the fewest passages (ties: the first in the question): the question
  is as long-tail as its rarest entity, and retrieval is what helps there. A comparison question
  ("Who was born first, A or B?") counts as rare when either of its entities is.
- A question with none of these has popularity 0: nothing says the model knows what it asks about, so
  it is treated as the least popular (it retrieves at every threshold above 0).

A mention: the entity's text occurs in the passage's text, compared casefolded (case-insensitive)
with runs of whitespace as one space, and neither starts nor ends inside a word (the characters
around it are no letters or digits): "Lyon" is mentioned by "Lyon-based" and "Lyon's", not by
"Lyonnais"; "U.S." by "the U.S. Navy", "Washington, D.C." not by "Washington D.C.". A passage
counts once however often it names the entity; the passage title is not its text.

Why a scan of the passages and not the BM25 index: Anserini's analyzer stems and drops stop words
(a phrase query for "Apple" also finds "apples") and the index holds title and text together, so a
Lucene phrase count is not this count. One pass over the collection checks every entity at once: a
passage's words are looked up in a table keyed by each entity's longest word, and only the entities
found there are searched in the passage's text, so the pass costs about one tokenisation per passage
whatever the number of questions (about 10 s per 100,000 demo-length passages on one core against
1,900 entities). The shards (100,000 passages each) are scanned in parallel over `threads`
processes, so the full DPR dump (21M passages) is one parallel read of the collection per split.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ...errors import InputError

# spaCy labels of numbers, amounts and times: no named thing to count
NUMERIC_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})
_WORD = re.compile(r"[^\W_]+")
_LEADING_THE = re.compile(r"^the\s+", re.IGNORECASE)
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)
SHARDS = "docs*.jsonl"  # the corpus step's JsonCollection shards


def words(text: str) -> tuple[str, ...]:
    """The casefolded words of `text`: maximal runs of letters and digits."""
    return tuple(_WORD.findall(text.casefold()))


def phrase(text: str) -> str:
    """`text` as a mention is compared: casefolded, runs of whitespace as one space."""
    return " ".join(text.casefold().split())


@dataclass(frozen=True)
class Candidate:
    """A name the question mentions: as written (cleaned) and as compared (`phrase`)."""

    text: str
    phrase: str


def question_entities(question: str) -> list[Candidate]:
    """The question's candidate entities in question order, without duplicates (see the module docstring)."""
    from ..parts.text import entities, proper_noun_runs

    names = [e.text for e in entities(question) if e.label not in NUMERIC_LABELS]
    if not names:
        names = [span.text for span in proper_noun_runs(question)]
    out: list[Candidate] = []
    for name in names:
        text = _POSSESSIVE.sub("", _LEADING_THE.sub("", name.strip())).strip()
        candidate = Candidate(text, phrase(text))
        if words(text) and all(c.phrase != candidate.phrase for c in out):
            out.append(candidate)
    return out


def mentions(needle: str, text: str) -> bool:
    """`needle` occurs in `text` (both compared as `phrase`) at no letter or digit on either side."""
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        if (start == 0 or not text[start - 1].isalnum()) and (end == len(text) or not text[end].isalnum()):
            return True
        start = text.find(needle, start + 1)
    return False


def count_mentions(phrases: Iterable[str], texts: Iterable[str]) -> Counter:
    """For each phrase (casefolded, as `phrase` makes it), how many of `texts` mention it."""
    table: dict[str, list[str]] = {}
    for needle in set(phrases):
        table.setdefault(max(words(needle), key=len), []).append(needle)
    keys = frozenset(table)
    counts: Counter = Counter({needle: 0 for needles in table.values() for needle in needles})
    for text in texts:
        folded = text.casefold()
        present = keys & set(_WORD.findall(folded))
        if not present:
            continue
        folded = " ".join(folded.split())
        for key in present:
            for needle in table[key]:
                if mentions(needle, folded):
                    counts[needle] += 1
    return counts


def shards(collection_dir: Path) -> list[Path]:
    found = sorted(Path(collection_dir).glob(SHARDS))
    if not found:
        raise InputError(f"{collection_dir}: no JsonCollection shards ({SHARDS}); run the corpus step first")
    return found


def passage_texts(shard: Path) -> Iterable[str]:
    with open(shard, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                yield json.loads(line)["text"]
            except (ValueError, KeyError, TypeError):
                raise InputError(f"{shard}: line {number}: not a passage record with a `text` field; rerun the "
                                 f"corpus step") from None


def _count_shard(job: tuple[Path, list[str]]) -> tuple[Counter, int]:
    shard, phrases = job
    texts = list(passage_texts(shard))  # one shard: 100,000 passages at most
    return count_mentions(phrases, texts), len(texts)


def count_in_collection(phrases: Sequence[str], collection_dir: Path, threads: int = 1) -> tuple[Counter, int]:
    """Passages of the collection mentioning each phrase, and how many passages were read; shards in
    parallel over `threads` processes."""
    jobs = [(shard, list(phrases)) for shard in shards(collection_dir)]
    if threads > 1 and len(jobs) > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(min(threads, len(jobs))) as pool:
            parts = pool.map(_count_shard, jobs)
    else:
        parts = [_count_shard(job) for job in jobs]
    total: Counter = Counter({phrase: 0 for phrase in phrases})
    for counts, _ in parts:
        total.update(counts)
    return total, sum(n for _, n in parts)


def pick(candidates: Sequence[Candidate], counts: Counter) -> Candidate | None:
    """The rarest candidate (fewest passages), the first in the question among equals; None for none."""
    return min(candidates, key=lambda c: counts[c.phrase]) if candidates else None


def corpus_frequency(questions: Sequence[tuple[str, str]], collection_dir: Path, threads: int = 1) -> tuple[list[dict], int]:
    """One record per (id, question): its candidates with their passage counts, the entity picked and
    its popularity (the picked entity's count; 0 without one); and the number of passages read."""
    candidates = [question_entities(question) for _, question in questions]
    phrases = list(dict.fromkeys(c.phrase for cs in candidates for c in cs))
    counts, passages = count_in_collection(phrases, collection_dir, threads)
    records = []
    for (qid, question), cs in zip(questions, candidates):
        chosen = pick(cs, counts)
        records.append({"id": qid, "question": question, "entity": chosen.text if chosen else None,
                        "popularity": counts[chosen.phrase] if chosen else 0,
                        "candidates": [{"entity": c.text, "passages": counts[c.phrase]} for c in cs]})
    return records, passages


def entities_path(out: Path) -> Path:
    """Where the per-question records go beside the popularity file: `<name>.entities.jsonl`."""
    return out.with_name(f"{out.stem}.entities.jsonl")


def write(records: Sequence[dict], out: Path) -> Path:
    """The popularity file Adaptive Retrieval reads (question id -> passages mentioning its entity) and,
    beside it, each question's candidates, counts and picked entity (to inspect the proxy)."""
    from ...io import write_json, write_jsonl

    out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(entities_path(out), records)
    write_json(out, {r["id"]: r["popularity"] for r in records})
    return entities_path(out)
