"""Named entities from spaCy's English pipeline: spans, labels, and the second (NER-only) pipeline."""

from __future__ import annotations

from adaptive_rag.methods.parts import text

TEXT = ("Carrowmere is a village in County Sligo, Ireland. It was founded in 1820 by John Smith, "
        "had 1,204 people in 2011 and trades with the USA.")


def test_entities_have_char_offsets_and_labels():
    found = text.entities(TEXT)
    assert [(e.text, e.label) for e in found] == [
        ("County Sligo", "GPE"), ("Ireland", "GPE"), ("1820", "DATE"), ("John Smith", "PERSON"),
        ("1,204", "CARDINAL"), ("2011", "DATE"), ("USA", "GPE")]
    assert all(TEXT[e.start:e.end] == e.text for e in found)
    assert text.entities("") == [] and text.entities("it rained and then it stopped") == []


def test_the_ner_pipeline_is_separate_and_finds_what_the_full_pipeline_finds():
    """The NER component alone gives the full pipeline's entities (it has its own token vectors), and
    the sentence/POS pipeline stays without NER so its callers keep their speed."""
    assert text.ner_nlp().pipe_names == ["ner"]
    assert "ner" not in text.nlp().pipe_names and "parser" in text.nlp().pipe_names
    full = text._load(("lemmatizer",))
    assert "ner" in full.pipe_names and "parser" in full.pipe_names
    sample = TEXT + " Mary Jones of Acme Corp visited Paris on 4 July 1990 with 3 friends."
    assert [(e.start_char, e.end_char, e.label_) for e in full(sample).ents] == [
        (e.start, e.end, e.label) for e in text.entities(sample)]
