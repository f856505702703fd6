"""DioR's pre-retrieval keyword scoring (`methods/dior/keywords.py`): spec acceptance tests 3 (Eq. 3
candidates) and 4 (the importance score, its ranking and `pre: sequential`) by hand, each term on
hand-built inputs, the candidates, and the BM25 index's document frequencies behind `tfidf: corpus`.

Paper (../shared/papers/dior.txt): Eq. 3 (§3.1.1), IG_i > IG_mean => t_i is a candidate; §3.3.1, the
positional score P_i = Pos(i)/N and the importance I_i, a weighted sum of A_i, TF-IDF_i, P_i and S_i
(unnumbered in the paper; weights not given, equal here), tokens ranked by I_i descending."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptive_rag.methods.dior import keywords
from adaptive_rag.methods.dior.keywords import (Candidate, CorpusIdf, KeywordContext, attention_term, context_idf,
                                                 cosines, entity_candidates, ig_candidates, importance,
                                                 keyword_query, merge, min_max, position_term, positions,
                                                 question_candidates, question_real_words, ranking, select,
                                                 similarity_term, tfidf_term)
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.parts.text import Entity

from conftest import pioc


# ---- acceptance test 3: Eq. 3 --------------------------------------------------------------------

def test_eq3_candidates_are_the_tokens_above_the_mean_attribution():
    assert ig_candidates([0.1, 0.4, 0.2, 0.3]) == [1, 3]  # mean 0.25
    assert ig_candidates([0.25] * 4) == []  # none is above a uniform mean
    assert ig_candidates([]) == []
    with pytest.raises(ValueError, match="1-D"):
        ig_candidates([[0.5, 0.5]])


# ---- acceptance test 4: the importance score -------------------------------------------------------

# Three candidates with pre-scaled terms (spec §5 item 4): min-max scaling leaves them as they are.
TABLE = {"attention": [1.0, 0.0, 0.5], "tfidf": [0.0, 1.0, 0.5], "position": [0.0, 0.5, 1.0],
         "similarity": [0.5, 0.0, 1.0]}
EQUAL = {"attention": 1, "tfidf": 1, "position": 1, "similarity": 1}
C = [Candidate("c0", 0, 2, "question"), Candidate("c1", 3, 5, "generated"), Candidate("c2", 6, 8, "generated")]


def test_equal_weights_rank_by_the_sum_with_ties_broken_by_position():
    scaled, total = importance(TABLE, EQUAL, 3)
    assert scaled == TABLE
    assert total == [1.5, 1.5, 3.0]
    assert ranking(total) == [2, 0, 1]  # c0 before c1: a tie, and c0 comes first
    assert select(total, 2) == [0, 2]  # top-2 = {c2, c0}, emitted in text order
    query = keyword_query(C, TABLE, EQUAL, top_n=2)
    assert query.text == "c0 c2" and query.kept == [0, 2]


def test_the_weights_change_the_ranking():
    # w_T = 3: c0 1 + 0 + 0 + .5 = 1.5, c1 0 + 3 + .5 + 0 = 3.5, c2 .5 + 1.5 + 1 + 1 = 4 -> {c1, c2}
    assert keyword_query(C, TABLE, {**EQUAL, "tfidf": 3}, top_n=2).text == "c1 c2"
    # w_P = 0: [1.5, 1, 2] -> {c0, c2}; a term left out of `terms` counts as 0 like a zero weight
    assert importance(TABLE, {**EQUAL, "position": 0}, 3)[1] == [1.5, 1.0, 2.0]
    without = {k: v for k, v in TABLE.items() if k != "position"}
    assert importance(without, EQUAL, 3)[1] == [1.5, 1.0, 2.0]


def test_positions_are_pos_over_n():
    assert positions([1, 2, 3, 4], 4) == [0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError, match="1..4"):
        positions([0, 5], 4)


def test_sequential_takes_the_candidates_in_text_order_whatever_their_scores():
    assert select([0.0, 9.0, 5.0, 1.0], 3, "sequential") == [0, 1, 2]
    query = keyword_query(C, TABLE, EQUAL, top_n=2, pre="sequential")
    assert query.text == "c0 c1" and query.importance == []  # no scores computed
    assert query.record()["candidates"][2] == {"text": "c2", "source": "generated", "kept": False}
    with pytest.raises(ValueError, match="pre must be one of scored, sequential"):
        select([1.0], 1, "random")


def test_each_term_is_min_max_scaled_over_the_candidates():
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([0.7, 0.7]) == [0.0, 0.0]  # no spread: the term ranks nothing
    raw = {"attention": [2.0, 4.0, 3.0], "tfidf": [5.0, 1.0, 1.0]}
    scaled, total = importance(raw, EQUAL, 3)
    assert scaled["attention"] == [0.0, 1.0, 0.5] and scaled["tfidf"] == [1.0, 0.0, 0.0]
    assert total == [1.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="2 values for 3 candidates"):
        importance({"tfidf": [1.0, 2.0]}, EQUAL, 3)


def test_the_record_shows_each_candidates_terms_and_score():
    record = keyword_query(C, {"attention": [2.0, 4.0, 3.0]}, EQUAL, top_n=1).record()
    assert record["query"] == "c1" and record["pre"] == "scored"
    assert record["candidates"][1] == {"text": "c1", "source": "generated", "kept": True,
                                       "terms": {"attention": 4.0}, "scaled": {"attention": 1.0}, "score": 1.0}


# ---- candidates -------------------------------------------------------------------------------------

QUESTION = "Where was Inchcombe born?"


def test_question_candidates_are_the_words_holding_an_eq3_token_without_stop_words():
    # BOS (empty text) + 6 tokens; mean 1/7: " was" (.3) and " Inch" (.25) are above it; "was" is a stop word
    tokens = ["", "Where", " was", " Inch", "combe", " born", "?"]
    scores = [0.05, 0.1, 0.3, 0.25, 0.1, 0.1, 0.1]
    found = question_candidates(QUESTION, tokens, scores)
    assert found == [Candidate("Inchcombe", 10, 19, "question")]
    assert QUESTION[10:19] == "Inchcombe"
    assert question_candidates("not in the prompt", tokens, scores) == []
    with pytest.raises(ValueError, match="7 tokens but 2"):
        question_candidates(QUESTION, tokens, [0.5, 0.5])


def test_the_questions_real_words():
    assert [c.text for c in question_real_words(QUESTION)] == ["Inchcombe", "born"]


def test_real_word_candidates_are_the_real_words_of_question_and_generated_text_minus_the_flagged():
    """`candidates: real-words`, the reference code's candidate set (src/new_generate.py, `keep_real_words`:
    every token of question + text matching a NOUN/ADJ/VERB/PROPN/NUM word, the hallucinated ones skipped),
    each once (text order, first occurrence kept)."""
    from adaptive_rag.methods.dior.keywords import real_word_candidates

    context = KeywordContext(QUESTION, " Inchcombe left Kells.", " He was born in Paris.")
    found = real_word_candidates(context)
    assert [(c.text, c.source) for c in found] == [("Inchcombe", "question"), ("born", "question"),
                                                   ("left", "generated"), ("Kells", "generated"),
                                                   ("Paris", "generated")]
    assert all(context.text[c.start:c.end] == c.text for c in found)
    # the flagged token " Paris" (15..21 of the look-ahead) is left out; "born" stays (the question's)
    assert [c.text for c in real_word_candidates(context, [(15, 21)])] == ["Inchcombe", "born", "left", "Kells"]


def fake_entities(text):
    out = []
    for name, label in (("Inchcombe", "PERSON"), ("Kells", "GPE"), ("Paris", "GPE")):
        at = text.find(name)
        while at >= 0:
            out.append(Entity(at, at + len(name), name, label))
            at = text.find(name, at + 1)
    return sorted(out, key=lambda e: e.start)


def test_entities_of_the_generated_text_minus_the_flagged_tokens(monkeypatch):
    monkeypatch.setattr(keywords, "entities", fake_entities)
    context = KeywordContext(QUESTION, " Inchcombe left Kells.", " He was born in Paris.")
    assert context.text == "Where was Inchcombe born?\n Inchcombe left Kells. He was born in Paris."
    everything = entity_candidates(context)
    assert [(c.text, context.text[c.start:c.end]) for c in everything] == [
        ("Inchcombe", "Inchcombe"), ("Kells", "Kells"), ("Paris", "Paris")]
    # the flagged token " Paris" sits at 15..21 of the look-ahead
    assert " He was born in Paris."[15:21] == " Paris"
    assert [c.text for c in entity_candidates(context, [(15, 21)])] == ["Inchcombe", "Kells"]
    merged = merge(question_real_words(QUESTION), entity_candidates(context, [(15, 21)]))
    assert [(c.text, c.source) for c in merged] == [("Inchcombe", "question"), ("born", "question"),
                                                    ("Kells", "generated")]


def test_real_ner_finds_entities_in_generated_text():
    context = KeywordContext("Who founded it?", "", " It was founded in 1712 by John Smith in London.")
    texts = [c.text for c in entity_candidates(context)]
    assert "1712" in texts and "London" in texts


# ---- the terms ---------------------------------------------------------------------------------------

def context_and_candidates():
    context = KeywordContext("Where was Inchcombe born?", "", " Inchcombe was a poet from Kells. He was born in Paris.")
    text = context.text
    found = [Candidate("Inchcombe", 10, 19, "question"), Candidate("born", 20, 24, "question"),
             Candidate("Kells", text.index("Kells"), text.index("Kells") + 5, "generated")]
    return context, found


def test_position_term_counts_words_of_question_then_generated_text():
    # words: Where was Inchcombe born | Inchcombe was a poet from Kells He was born in Paris -> N = 15
    context, found = context_and_candidates()
    assert position_term(found, context) == pytest.approx([3 / 15, 4 / 15, 10 / 15])


def test_tfidf_term_with_context_and_corpus_idf():
    context, found = context_and_candidates()
    assert tfidf_term(found, context, context_idf) == [2.0, 2.0, 1.0]  # Inchcombe x2, born x2, Kells x1
    statistics = {"inchcombe": [("inchcomb", 1)], "born": [("born", 9)], "kells": [("kell", 0)]}
    idf = CorpusIdf(lambda word: statistics[word.lower()], documents=9)
    # ln((1 + 9) / (1 + df)) + 1
    expected = [2 * (math.log(10 / 2) + 1), 2 * (math.log(10 / 10) + 1), 1 * (math.log(10 / 1) + 1)]
    assert tfidf_term(found, context, idf) == pytest.approx(expected)
    # a stop word (no analyzed term) has idf 0; a multi-word candidate takes the mean over its words
    empty = CorpusIdf(lambda word: [], documents=9)
    assert empty("the") == 0.0
    pair = [Candidate("Inchcombe Kells", 0, 1, "generated")]
    assert tfidf_term(pair, context, idf) == pytest.approx([(expected[0] + expected[2]) / 2])


def test_attention_term_is_what_the_flagged_tokens_pay_averaged_over_them():
    # " Paris is one city." after the prompt's own tokens [" Which river?", "\nAnswer:"]; rows (prompt | generated):
    # row 1 (" is") [.4, .2 | .3, .1], row 3 (" city") [.2, 0 | .1, .1, 0, .6]
    lookahead = LookAhead(pioc(meta={"prompt_tokens": [" Which river?", "\nAnswer:"]}))
    context = KeywordContext("Which river?", "", lookahead.text)
    at = context.lookahead_start
    found = [Candidate("river", 6, 11, "question"), Candidate("Paris", at + 1, at + 6, "generated"),
             Candidate("one", at + 10, at + 13, "generated")]
    assert attention_term(found, context, lookahead, [3]) == pytest.approx([0.2, 0.1, 0.0])
    # two flagged tokens: river (.4 + .2) / 2, Paris (.3 + .1) / 2; " one" comes after " is": (0 + 0) / 2
    assert attention_term(found, context, lookahead, [1, 3]) == pytest.approx([0.3, 0.2, 0.0])
    assert attention_term(found, context, lookahead, []) == [0.0, 0.0, 0.0]


def test_attention_term_reads_the_answer_so_far_at_the_prompts_end():
    # the answer kept so far " Seine flows." is the prompt's last token; row 3 pays it .0 (column 1)
    lookahead = LookAhead(pioc(meta={"prompt_tokens": [" Which river?", " Seine flows."]}))
    context = KeywordContext("Which river?", " Seine flows.", lookahead.text)
    found = [Candidate("Seine", 14, 19, "generated")]
    assert context.text[14:19] == "Seine"
    assert attention_term(found, context, lookahead, [3]) == [0.0]
    assert attention_term(found, context, lookahead, [1]) == pytest.approx([0.2])


def test_similarity_term_and_cosines():
    context, found = context_and_candidates()
    calls = []

    def similarity(anchor, texts):
        calls.append((anchor, texts))
        return [0.1 * len(t) for t in texts]

    assert similarity_term(found, context.question, similarity) == pytest.approx([0.9, 0.4, 0.5])
    assert calls == [("Where was Inchcombe born?", ["Inchcombe", "born", "Kells"])]
    assert cosines(np.array([1.0, 0.0]), np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 0.0]])) == pytest.approx(
        [1.0, math.sqrt(0.5), 0.0])


# ---- document frequencies from a real Lucene index ----------------------------------------------------

@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_bm25_term_statistics_are_the_indexs_document_frequencies(tmp_path):
    from adaptive_rag.data.corpus import convert_to_collection
    from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index

    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n"
                   "1\tIdris Penhallow was born in Carrowmere.\tIdris Penhallow\n"
                   "2\tCarrowmere is a harbour town known for its rope walks.\tCarrowmere\n"
                   "3\tThe Tessilan Rope Mill spun hemp.\tTessilan Rope Mill\n", encoding="utf-8")
    manifest = convert_to_collection(tsv, tmp_path / "collection")
    build_index(tmp_path / "collection", tmp_path / "index", threads=1, expected=manifest["passages"])
    retriever = BM25Retriever(tmp_path / "index")
    # the title is indexed with the text: "Carrowmere" is in documents 1 (text) and 2 (title and text)
    assert retriever.term_statistics("Carrowmere") == [("carrowmer", 2)]
    assert retriever.term_statistics("the") == []  # a stop word
    assert retriever.term_statistics("rope-walks") == [("rope", 2), ("walk", 1)]  # analyzed and stemmed
    assert retriever.term_statistics("Zanzibar") == [("zanzibar", 0)]
    idf = CorpusIdf(retriever.term_statistics, retriever.num_docs)
    assert idf("walks") == pytest.approx(math.log(4 / 2) + 1)
