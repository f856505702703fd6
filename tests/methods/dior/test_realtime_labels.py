"""DioR's real-time detector labels (Alg. 2; spec §5 acceptance test 8): a scripted continuation, a
fake entity extractor and a fake encoder whose similarities we set, so every label is known by hand."""

from __future__ import annotations

import re

import pytest

from adaptive_rag.methods.dior.realtime_labels import (PROMPT, cut_points, label_continuation, match_entities,
                                                        normalise, token_labels, truncate, truncations)
from adaptive_rag.methods.parts.text import Entity

PASSAGE = "Ann Ure founded the village in 1820. She named it Carrowmere after the lake."
NAMES = ("Ann Ure", "1820", "1821", "Carrowmere", "Carrow mere")


def spot(text: str) -> list[Entity]:
    """A fake NER: every occurrence of a name in NAMES (the longest at a position), in order."""
    found = []
    for name in NAMES:
        found += [Entity(m.start(), m.end(), name, "X") for m in re.finditer(re.escape(name), text)]
    return sorted(found, key=lambda e: (e.start, -e.end))


class FakeEncoder:
    """cos(a, b) from a table (symmetric), 0.1 for any other pair; records each call."""

    name = "fake"
    TABLE = {frozenset({"Carrowmere", "Carrow mere"}): 0.9, frozenset({"1820", "1821"}): 0.6,
             frozenset({"Carrowmere", "1821"}): 0.2}

    def __init__(self):
        self.calls = []

    def similarities(self, anchor, variants):
        self.calls.append((anchor, list(variants)))
        return [self.TABLE.get(frozenset({anchor, v}), 0.1) for v in variants]


def cut_at_1820():
    (cut,) = [t for t in truncations("Carrowmere", PASSAGE, extract=spot) if t.entity.text == "1820"]
    return cut


def test_cuts_skip_entities_that_start_a_sentence_and_the_prompt_is_the_papers():
    assert [e.text for e in cut_points(PASSAGE, extract=spot)] == ["1820", "Carrowmere"]  # "Ann Ure" starts it
    cut = cut_at_1820()
    assert cut.prefix == "Ann Ure founded the village in"
    assert cut.suffix == "1820. She named it Carrowmere after the lake."
    assert cut.prompt == ("Below is the opening sentence from a Wikipedia article titled Carrowmere. Please "
                          "continue the passage from where the sentence ends. Ann Ure founded the village in")
    assert cut.prompt == PROMPT.format(title="Carrowmere", opening=cut.prefix)
    with pytest.raises(ValueError, match="not inside the passage"):
        truncate("Carrowmere", PASSAGE, Entity(0, 7, "Ann Ure", "PERSON"))  # at the very start: nothing to continue
    with pytest.raises(ValueError, match="not inside the passage"):
        truncate("Carrowmere", PASSAGE, Entity(31, 35, "1821", "DATE"))  # the span holds other text


def test_acceptance_8_matching_entities_label_their_tokens_1_a_wrong_year_0_the_rest_none():
    encoder = FakeEncoder()
    tokens = [" 1820", ".", " It", " is", " Carrow", " mere", " now", "."]
    labels = label_continuation(cut_at_1820(), "".join(tokens), tokens, encoder, extract=spot)
    assert [e.text for e in labels.reference_entities] == ["1820", "Carrowmere"]
    assert [(m.entity.text, m.matched, m.reference, m.score) for m in labels.matches] == [
        ("1820", True, "1820", 1.0),  # equal: no encoder call
        ("Carrow mere", True, "Carrowmere", 0.9)]  # cosine 0.9 >= 0.8
    assert encoder.calls == [("Carrow mere", ["1820", "Carrowmere"])]
    assert labels.token_labels == [1, None, None, None, 1, 1, None, None]
    assert labels.label == 1

    tokens = [" 1821", ".", " It", " is", " Carrow", " mere", "."]
    labels = label_continuation(cut_at_1820(), "".join(tokens), tokens, FakeEncoder(), extract=spot)
    assert [(m.entity.text, m.matched, m.reference, m.score) for m in labels.matches] == [
        ("1821", False, "1820", 0.6), ("Carrow mere", True, "Carrowmere", 0.9)]
    assert labels.token_labels == [0, None, None, None, 1, 1, None]  # only the wrong year's tokens are 0
    assert labels.label == 0  # Alg. 2: one hallucinated entity makes the continuation a hallucination


def test_threshold_is_inclusive_and_configurable():
    gen, ref = [Entity(0, 11, "Carrow mere", "X")], [Entity(0, 10, "Carrowmere", "X")]
    assert match_entities(gen, ref, FakeEncoder(), threshold=0.9)[0].matched
    assert not match_entities(gen, ref, FakeEncoder(), threshold=0.91)[0].matched
    with pytest.raises(ValueError, match=r"cosine in \[-1, 1\]"):
        match_entities(gen, ref, FakeEncoder(), threshold=1.5)


def test_reference_suffix_or_whole_passage():
    """A continuation naming the founder again: the suffix (the paper's "same truncated portion")
    does not name her, the whole passage does."""
    tokens = [" 1820", " by", " Ann", " Ure", "."]
    text = "".join(tokens)
    suffix = label_continuation(cut_at_1820(), text, tokens, FakeEncoder(), extract=spot)
    assert [m.matched for m in suffix.matches] == [True, False] and suffix.token_labels == [1, None, 0, 0, None]
    passage = label_continuation(cut_at_1820(), text, tokens, FakeEncoder(), reference="passage", extract=spot)
    assert [m.matched for m in passage.matches] == [True, True] and passage.label == 1
    with pytest.raises(ValueError, match="suffix, passage"):
        label_continuation(cut_at_1820(), text, tokens, FakeEncoder(), reference="article", extract=spot)


def test_no_entities_on_either_side():
    encoder = FakeEncoder()
    cut = truncate("T", "It was built in 1820 here.", Entity(16, 20, "1820", "DATE"))
    labels = label_continuation(cut, " 1821 here.", [" 1821", " here", "."], encoder,
                                extract=lambda text: spot(text) if text.startswith(" ") else [])
    assert [(m.matched, m.reference, m.score) for m in labels.matches] == [(False, None, None)]
    assert encoder.calls == [] and labels.label == 0 and labels.token_labels == [0, None, None]
    labels = label_continuation(cut, " long ago.", [" long", " ago", "."], encoder, extract=spot)
    assert labels.matches == [] and labels.label is None and labels.token_labels == [None, None, None]


def test_token_labels_overlaps_and_empty_tokens():
    good = match_entities([Entity(1, 5, "1820", "X")], [Entity(0, 4, "1820", "X")], FakeEncoder())
    bad = match_entities([Entity(6, 10, "1821", "X")], [Entity(0, 4, "1820", "X")], FakeEncoder())
    # " 1820-1821": one token spans both entities -> 0; an empty token inside an entity belongs to it
    assert token_labels([" 18", "", "20-18", "21"], good + bad) == [1, 1, 0, 0]
    assert token_labels([" 1820", "", " x"], good) == [1, None, None]  # empty token at an entity's end: outside


def test_tokens_must_spell_the_continuation():
    with pytest.raises(ValueError, match="do not spell"):
        label_continuation(cut_at_1820(), " 1820.", [" 1821", "."], FakeEncoder(), extract=spot)
    # tokens past a stop string the text was cut at are fine
    labels = label_continuation(cut_at_1820(), " 1820.", [" 1820", ".", "\n"], FakeEncoder(), extract=spot)
    assert labels.token_labels == [1, None, None]


@pytest.mark.parametrize("a, b", [("The USA", "U.S.A"), ("People's Party", "Peoples party"),
                                  ("New  York", "new york"), ("the Hague", "Hague")])
def test_normalised_equal(a, b):
    assert normalise(a) == normalise(b)


@pytest.mark.parametrize("a, b", [("1,204", "1204"), ("The", "the end"), ("Carrow mere", "Carrowmere")])
def test_normalised_different(a, b):
    assert normalise(a) != normalise(b)


def test_real_ner_cuts_and_labels_with_the_real_pipeline():
    """spaCy's NER end to end (the fake encoder only scores what is not equal)."""
    passage = "Carrowmere is a village in Ireland. It was founded in 1820 by John Smith."
    cuts = truncations("Carrowmere", passage)
    assert [c.entity.text for c in cuts] == ["Ireland", "1820", "John Smith"]
    cut = cuts[1]
    tokens = [" 1820", " by", " John", " Smith", " of", " Ireland", "."]
    labels = label_continuation(cut, "".join(tokens), tokens, FakeEncoder())
    assert [(m.entity.text, m.matched) for m in labels.matches] == [("1820", True), ("John Smith", True),
                                                                    ("Ireland", False)]
    assert labels.token_labels == [1, None, 1, 1, None, 0, None]


def test_the_offline_encoder_on_the_papers_examples():
    """What the bundled all-MiniLM-L6-v2 does at the 0.8 threshold (docs/dior.md): it matches "US"
    and "USA", keeps 1820 and 1821 apart, and misses the paper's own "USA" = "United States of
    America" (0.75), which the paper's manual check would have caught."""
    from adaptive_rag.methods.parts.contribution import DEFAULT_SIMILARITY, load_similarity

    encoder = load_similarity(DEFAULT_SIMILARITY)
    us, full = encoder.similarities("USA", ["US", "United States of America"])
    (year,) = encoder.similarities("1820", ["1821"])
    assert us >= 0.8 > full > 0.7 and year < 0.8
