"""Adaptive Retrieval's corpus-frequency popularity: mention counts on a hand-made corpus (hand-counted),
the question's entity (spaCy's NER, its proper-noun fallback, the rarest of several), the popularity
file and its per-question record, and a scan split over processes giving the same counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.methods.adaptive_retrieval.adaptive_retrieval import load_popularity
from adaptive_rag.methods.adaptive_retrieval.corpus_frequency import (Candidate, count_in_collection, count_mentions,
                                                         corpus_frequency, entities_path, phrase, pick,
                                                         question_entities, words, write)

# Hand-made passages (title, text); the counts below were made by reading them.
PASSAGES = [
    ("Lyon", "Lyon is a city in France. Lyon lies on the Rhone."),              # lyon once (named twice)
    ("Paris", "The Parisian museums draw visitors to PARIS every year."),        # paris, not in "parisian"
    ("New York City", "New York City is the largest city of the U.S. state of New York."),
    ("Vessey", "Yannick  Vessey's workshop stood by the quay."),                # two spaces, a possessive
    ("Quay", "The quay was rebuilt; Lyon-based masons did the work."),          # lyon before a hyphen
    ("Lyon", "A passage whose title alone names the city."),                    # the title is not its text
]
COUNTS = {"lyon": 2, "paris": 1, "parisian": 1, "new york": 1, "new york city": 1, "u.s.": 1, "u.s. state": 1,
          "us": 0, "yannick vessey": 1, "vessey": 1, "quay": 2, "lyon-based": 1, "lyon based": 0, "france lyon": 0,
          "france. lyon": 1, "york city is": 1, "ork": 0, "city": 3}


def collection(tmp_path: Path, passages=PASSAGES, shard_size: int = 100) -> Path:
    """A JsonCollection as the corpus step writes it (docs00000.jsonl, ...)."""
    out = tmp_path / "corpus"
    out.mkdir()
    for start in range(0, len(passages), shard_size):
        with open(out / f"docs{start // shard_size:05d}.jsonl", "w", encoding="utf-8") as handle:
            for i, (title, text) in enumerate(passages[start:start + shard_size], start):
                handle.write(json.dumps({"id": str(i), "contents": f"{title}\n{text}", "title": title,
                                         "text": text}) + "\n")
    return out


def test_words_are_casefolded_runs_of_letters_and_digits_and_a_phrase_has_single_spaces():
    assert words("Yannick Vessey's U.S. trip, 1,000 km — Lyon-based") == (
        "yannick", "vessey", "s", "u", "s", "trip", "1", "000", "km", "lyon", "based")
    assert phrase(" The  Varnham\nPRESS ") == "the varnham press"


def test_a_passage_counts_once_when_its_text_names_the_phrase_at_word_boundaries():
    texts = [text for _, text in PASSAGES]
    assert dict(count_mentions(COUNTS, texts)) == COUNTS


def test_the_collection_scan_counts_passage_text_only_and_every_passage(tmp_path):
    counts, passages = count_in_collection(list(COUNTS), collection(tmp_path))  # "lyon": not passage 5's title
    assert passages == len(PASSAGES) and dict(counts) == COUNTS


def test_shards_scanned_by_several_processes_give_the_same_counts(tmp_path):
    counts, passages = count_in_collection(list(COUNTS), collection(tmp_path, shard_size=2), threads=2)
    assert passages == len(PASSAGES) and dict(counts) == COUNTS


def test_a_collection_without_shards_or_with_a_broken_record_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: no JsonCollection shards \(docs\*\.jsonl\); run the corpus step"):
        count_in_collection(["lyon"], tmp_path / "empty")
    broken = collection(tmp_path)
    (broken / "docs00000.jsonl").write_text('{"id": "0", "contents": "x"}\n')
    with pytest.raises(InputError, match=r"docs00000\.jsonl: line 1: not a passage record with a `text` field"):
        count_in_collection(["lyon"], broken)


def test_the_entity_leaves_out_numbers_and_dates_a_leading_the_and_a_possessive():
    assert [c.text for c in question_entities("In what year did the Varnham Press close?")] == ["Varnham Press"]
    assert question_entities("What was Yannick Vessey's occupation?") == [Candidate("Yannick Vessey", "yannick vessey")]
    assert [c.text for c in question_entities("Who was born first, Wystan Carlyon or Idris Thrippen?")] == [
        "Wystan Carlyon", "Idris Thrippen"]


def test_proper_nouns_stand_in_when_ner_finds_no_entity_and_a_question_may_have_none():
    # spaCy's NER finds nothing in either question; their runs of proper nouns are the names
    assert [c.text for c in question_entities("What did the fishing fleet of Quillhaven catch?")] == ["Quillhaven"]
    assert [c.text for c in question_entities("Were Garrow Roskilly and Perrin Nancarrow both poets?")] == [
        "Garrow Roskilly", "Perrin Nancarrow"]
    assert question_entities("How many are there?") == []


def test_the_rarest_entity_is_picked_ties_to_the_first_in_the_question():
    a, b, c = (Candidate(t, t) for t in ("a", "b", "c"))
    counts = {"a": 5, "b": 2, "c": 2}
    assert pick([a, b, c], counts) == b
    assert pick([c, b], counts) == c
    assert pick([], counts) is None


def test_each_question_gets_its_rarest_entity_count_and_zero_without_one(tmp_path):
    passages = [("", "Lyon is old."), ("", "Lyon and Paris trade."), ("", "Wystan Carlyon was born in Lyon."),
                ("", "Idris Thrippen met Wystan Carlyon.")]
    questions = [("q1", "Who was born first, Wystan Carlyon or Idris Thrippen?"),  # Carlyon 2, Thrippen 1
                 ("q2", "How many are there?"),                                   # no entity: 0
                 ("q3", "What was Wystan Carlyon's occupation?")]                  # Carlyon 2
    records, read = corpus_frequency(questions, collection(tmp_path, passages))
    assert read == 4
    assert [(r["id"], r["entity"], r["popularity"]) for r in records] == [
        ("q1", "Idris Thrippen", 1), ("q2", None, 0), ("q3", "Wystan Carlyon", 2)]
    assert records[0]["candidates"] == [{"entity": "Wystan Carlyon", "passages": 2},
                                        {"entity": "Idris Thrippen", "passages": 1}]
    out = tmp_path / "popularity" / "demo.json"
    assert write(records, out) == entities_path(out) == tmp_path / "popularity" / "demo.entities.jsonl"
    assert load_popularity(out) == {"q1": 1.0, "q2": 0.0, "q3": 2.0}  # the file Adaptive Retrieval reads
    assert [json.loads(line)["entity"] for line in entities_path(out).read_text().splitlines()] == [
        "Idris Thrippen", None, "Wystan Carlyon"]
