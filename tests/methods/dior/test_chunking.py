"""DioR's chunking (spec §1.4, acceptance test 6) and the TF-IDF it scores with, against scikit-learn.

Paper §3.3.2 (unnumbered): split a sentence into sub-clauses x1..xn, add x_{m} while the score of
x1..x_m exceeds that of x1..x_{m-1}; when it drops, the sub-clauses so far form a block."""

from __future__ import annotations

import re

import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from adaptive_rag.methods.dior import tfidf
from adaptive_rag.methods.dior.chunking import chunk_passage, clauses, relevance, render_chunks
from adaptive_rag.methods.parts.text import sentences

# A demo passage (data/demo/psgs_demo.tsv, id 1) and a question about it.
PASSAGE = ("Gideon Quarrel (1643–1718) was a glassblower remembered above all for his years in Yarrowick. "
           "Quarrel was born in Yarrowick and grew up speaking the hill dialect. He was largely self-taught. "
           "He is best remembered as the founder of the Yarrowick Glassworks. He was among the first in the "
           "Reaches to cool glass slowly in a separate annealing oven. He died in Mallowfirth.")
QUERY = "Where was the founder of the Yarrowick Glassworks born?"


def scripted(scores: dict[str, float]):
    """A score read from a table of block texts; it records every block it was asked about and
    fails on a block the test did not foresee."""
    calls = []

    def score(block, query):
        calls.append(block)
        return scores[block]

    return score, calls


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_spec_scores_give_blocks_x1x2_and_x3x4():
    """Acceptance test 6: s(x1) .5, s(x1x2) .7, s(x1x2x3) .6 (a drop: close [x1 x2], restart from x3),
    s(x3) .4, s(x3x4) .45 -> blocks [x1 x2], [x3 x4]; no other combination is scored."""
    text = "Alpha one. Beta two. Gamma three. Delta four."
    assert [s.text for s in sentences(text)] == ["Alpha one.", "Beta two.", "Gamma three.", "Delta four."]
    table = {"Alpha one.": .5, "Alpha one. Beta two.": .7, "Alpha one. Beta two. Gamma three.": .6,
             "Gamma three.": .4, "Gamma three. Delta four.": .45}
    score, calls = scripted(table)
    assert chunk_passage(text, "q", "sentence", score) == ["Alpha one. Beta two.", "Gamma three. Delta four."]
    assert calls == list(table)


def test_spec_scores_over_clauses():
    """The same numbers with the paper's units: the clauses of one sentence."""
    text = "He came home, he ate, he slept, he woke."
    assert [c.text for c in clauses(text)] == ["He came home,", "he ate,", "he slept,", "he woke."]
    score, calls = scripted({"He came home,": .5, "He came home, he ate,": .7, "He came home, he ate, he slept,": .6,
                             "he slept,": .4, "he slept, he woke.": .45})
    assert chunk_passage(text, "q", "clause", score) == ["He came home, he ate,", "he slept, he woke."]


def test_with_drop_closes_the_block_with_the_unit_that_lowered_the_score_and_repeats_it():
    """`chunk_close: with-drop`, the reference code's `TextChunker.chunk_text` (src/TextChunk.py: the unit is
    appended before it is scored, the block is closed with it on a drop, and `i` is not advanced, so the next
    block starts from it): the acceptance-test scores give [x1 x2 x3], [x3 x4]; a last unit that lowers the
    score ends its block and is then a block alone."""
    text = "Alpha one. Beta two. Gamma three. Delta four."
    table = {"Alpha one.": .5, "Alpha one. Beta two.": .7, "Alpha one. Beta two. Gamma three.": .6,
             "Gamma three.": .4, "Gamma three. Delta four.": .45}
    score, calls = scripted(table)
    assert chunk_passage(text, "q", "sentence", score, close="with-drop") == [
        "Alpha one. Beta two. Gamma three.", "Gamma three. Delta four."]
    assert calls == list(table)
    score, _ = scripted({"Alpha one.": .5, "Alpha one. Beta two.": .3, "Beta two.": .2})
    assert chunk_passage("Alpha one. Beta two.", "q", "sentence", score, close="with-drop") == [
        "Alpha one. Beta two.", "Beta two."]
    with pytest.raises(ValueError, match="chunk_close must be one of before-drop, with-drop; got 'after'"):
        chunk_passage(text, "q", "sentence", score, close="after")


def test_a_tie_closes_the_block_as_in_the_code():
    score, _ = scripted({"Alpha one.": .5, "Alpha one. Beta two.": .5, "Beta two.": .2})
    assert chunk_passage("Alpha one. Beta two.", "q", "sentence", score) == ["Alpha one.", "Beta two."]


def test_none_returns_the_text_whole():
    text = "First line.\n\nSecond   line, untouched."
    assert chunk_passage(text, QUERY, "none") == [text]


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="sentence, clause, none.*'paragraph'"):
        chunk_passage(PASSAGE, QUERY, "paragraph")


def test_every_sentence_in_exactly_one_block_in_order_and_the_rule_holds():
    """Real spaCy sentences, the real relevance: the blocks re-join to the passage, each block's score
    rose with every sentence it took, and the sentence after a block would not have raised it."""
    blocks = chunk_passage(PASSAGE, QUERY, "sentence")
    assert squash(" ".join(blocks)) == squash(PASSAGE)
    units = [s.text for s in sentences(PASSAGE)]
    assert len(units) == 6 and 1 < len(blocks) < 6
    position = 0
    for number, block in enumerate(blocks):
        taken = []
        while squash(" ".join(taken)) != squash(block):
            taken.append(units[position])
            position += 1
        rising = [relevance(" ".join(taken[:m]), QUERY) for m in range(1, len(taken) + 1)]
        assert all(b > a for a, b in zip(rising, rising[1:]))
        if number + 1 < len(blocks):
            assert relevance(" ".join(taken + [units[position]]), QUERY) <= rising[-1]
    assert position == len(units)
    # what that gives here: "Yarrowick" joins sentences 1-2; sentence 3 shares no term with the question
    # (score 0) and sentence 4 raises it; the last two add nothing and stand alone
    assert blocks == [
        "Gideon Quarrel (1643–1718) was a glassblower remembered above all for his years in Yarrowick. "
        "Quarrel was born in Yarrowick and grew up speaking the hill dialect.",
        "He was largely self-taught. He is best remembered as the founder of the Yarrowick Glassworks.",
        "He was among the first in the Reaches to cool glass slowly in a separate annealing oven.",
        "He died in Mallowfirth."]


def test_a_query_sharing_no_term_leaves_every_sentence_alone():
    assert chunk_passage(PASSAGE, "tidal lighthouse", "sentence") == [s.text for s in sentences(PASSAGE)]


def test_clause_boundaries_on_real_text():
    """Subordinating conjunctions and verb-joining conjunctions open a clause, "," and ";" close one;
    "Tom and Jerry" is a noun phrase and stays whole."""
    assert [c.text for c in clauses("He was born in Paris and died in Rome, although he lived in Vienna; "
                                     "his son stayed in Lyon.")] == [
        "He was born in Paris", "and died in Rome,", "although he lived in Vienna;", "his son stayed in Lyon."]
    assert [c.text for c in clauses("Tom and Jerry went to the market because they were hungry, "
                                     "but the stalls had closed.")] == [
        "Tom and Jerry went to the market", "because they were hungry,", "but the stalls had closed."]


def test_clause_blocks_cover_the_passage_and_stay_inside_their_sentence():
    blocks = chunk_passage(PASSAGE, QUERY, "clause")
    assert squash(" ".join(blocks)) == squash(PASSAGE)
    spans = [(s.start, s.end) for s in sentences(PASSAGE)]
    for block in blocks:
        start = PASSAGE.index(block)
        assert any(a <= start and start + len(block) <= b for a, b in spans), block
    assert "Quarrel was born in Yarrowick" in blocks and "He died in Mallowfirth." in blocks


def test_blocks_are_slices_of_the_passage():
    text = "It opened in 1836.   It closed in 1901, after a fire."
    blocks = chunk_passage(text, "opened closed fire", "clause") + chunk_passage(text, "fire", "sentence")
    assert all(b in text for b in blocks)


def test_a_text_without_units_gives_no_block():
    assert chunk_passage("", QUERY, "sentence") == [] and chunk_passage("   ", QUERY, "clause") == []


def test_render_chunks_is_the_papers_numbering():
    assert (render_chunks(["He was born in Paris.", "He died in Rome."])
            == "(1).He was born in Paris. (2).He died in Rome.")
    assert render_chunks(["only"]) == "(1).only" and render_chunks([]) == ""


PAIRS = [
    (PASSAGE, QUERY),
    ("He died in Mallowfirth.", QUERY),
    ("Yarrowick Yarrowick glass glass glass oven", "Yarrowick glass"),
    ("The Ostravel Press is a printing house located in the town of Ostravel.", "Ostravel printing house founded"),
    ("the of and", QUERY),  # stop words only: no term
]


@pytest.mark.parametrize("text, query", PAIRS)
def test_relevance_equals_a_fitted_tfidfvectorizer(text, query):
    """The reference code's score: TfidfVectorizer(stop_words="english", ngram_range=(1, 2)) fitted on
    the pair, cosine of the two rows."""
    rows = TfidfVectorizer(stop_words="english", ngram_range=(1, 2)).fit_transform([query, text])
    expected = float((rows[0] @ rows[1].T).toarray()[0, 0])
    assert relevance(text, query) == pytest.approx(expected, abs=1e-12)


def test_relevance_without_any_term_is_zero():
    assert relevance("", "") == 0.0 and relevance("the of", "and the") == 0.0
    with pytest.raises(ValueError, match="empty vocabulary"):  # what the vectorizer itself does there
        TfidfVectorizer(stop_words="english").fit_transform(["", ""])


def test_vectors_equal_the_vectorizer_on_several_texts():
    texts = [PASSAGE, "He died in Mallowfirth. Mallowfirth is a port.", "Glass glass oven."]
    vectorizer = TfidfVectorizer(stop_words="english")
    rows = vectorizer.fit_transform(texts).toarray()
    names = list(vectorizer.get_feature_names_out())
    for row, vector in zip(rows, tfidf.vectors(texts)):
        assert set(vector) == {names[i] for i in row.nonzero()[0]}
        assert all(vector[names[i]] == pytest.approx(row[i], abs=1e-12) for i in row.nonzero()[0])


def test_relevance_is_fast():
    """Why tfidf.py exists: scoring a candidate must not cost a vectorizer fit (about 20 ms)."""
    import time

    relevance(PASSAGE, QUERY)
    start = time.process_time()
    for _ in range(100):
        relevance(PASSAGE, QUERY)
    assert (time.process_time() - start) / 100 < 0.01
