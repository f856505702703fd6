"""Attention as the white-box methods read it: the generated-token attention matrix, the attention each
token receives, and DRAGIN's real-words query (QFS) ranked by the attention the triggering token pays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaptive_rag.methods.parts.attention import attention_matrix, attention_received, real_words_query
from adaptive_rag.methods.parts.lookahead import LookAhead

from conftest import cont, pioc


def test_attention_matrix_full_and_generated():
    la = LookAhead(pioc())
    full = attention_matrix(la, "full")
    np.testing.assert_allclose(full, [[0.2, 0, 0, 0, 0], [0.3, 0.1, 0, 0, 0], [0.2, 0.2, 0.2, 0, 0],
                                      [0.1, 0.1, 0.0, 0.6, 0], [0.1, 0.1, 0.2, 0.1, 0.1]], atol=1e-7)
    generated = attention_matrix(la, "generated")
    # each row over its generated columns, divided by their sum (1 .2, .4, .6, .8, .6)
    np.testing.assert_allclose(generated, [[1, 0, 0, 0, 0], [0.75, 0.25, 0, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0, 0],
                                           [0.125, 0.125, 0, 0.75, 0], [1 / 6, 1 / 6, 1 / 3, 1 / 6, 1 / 6]],
                               atol=1e-6)


def test_attention_received_with_and_without_diagonal():
    full = attention_matrix(LookAhead(pioc()), "full")
    # column max below the diagonal: c0 max(.3,.2,.1,.1), c1 max(.2,.1,.1), c2 max(0,.2), c3 .1, last 0
    np.testing.assert_allclose(attention_received(full), [0.3, 0.2, 0.2, 0.1, 0.0], atol=1e-7)
    # with the diagonal: c3 max(.6,.1) = .6, the last token gets its own .1
    np.testing.assert_allclose(attention_received(full, diagonal=True), [0.3, 0.2, 0.2, 0.6, 0.1], atol=1e-7)
    assert attention_received(np.zeros((0, 0))).tolist() == []


# ---- DRAGIN's real-words query (QFS) ----------------------------------------------------------------

QFS_PROMPT = ["Question", ":", " What", " river", " flows", " through", " Paris", "?", "\n", "Answer", ":",
              " Paris", " is", " a", " city", "."]
QFS_GENERATED = [" The", " river", " is", " the", " Se", "ine", "."]
QUESTION = "What river flows through Paris?"
ANSWER_SO_FAR = " Paris is a city."
# 20 prompt tokens, of which the meta lists the last 16 (columns 4..19); generated token i is column 20 + i.
QFS_WEIGHTS = ([0.5] * 4 +  # shared prompt columns: never read
               [0.01, 0.01, 0.01, 0.05, 0.02, 0.01, 0.10, 0.01, 0.01, 0.30, 0.01, 0.20, 0.01, 0.01, 0.08, 0.01] +
               [0.01, 0.15, 0.01, 0.01, 0.40, 0.40, 0.01])


def qfs_lookahead() -> LookAhead:
    rows = [np.array(QFS_WEIGHTS[:20 + j + 1]) for j in range(len(QFS_GENERATED))]
    return LookAhead(cont(QFS_GENERATED, prompt_tokens=20, attentions=rows, meta={"prompt_tokens": QFS_PROMPT}))


# Real words and the attention " Se" (token 4) pays them:
#   question  "What river flows through Paris?": river .05, flows .02, Paris .10
#   answer so far "Paris is a city.": Paris .20, city .08
#   generated " The river is the" (the partial "the" before " Se" is cut): river .15
# "Answer" (.30) lies in no region.  Best per word: Paris .20 (answer), river .15 (generated), city .08, flows .02
@pytest.mark.parametrize("top_n, query", [
    (1, "Paris"),
    (2, "Paris river"),
    (3, "Paris city river"),
    (4, "flows Paris city river"),
    (35, "flows Paris city river"),
])
def test_real_words_query_ranks_then_restores_order(top_n, query):
    assert real_words_query(qfs_lookahead(), 4, QUESTION, ANSWER_SO_FAR, top_n) == query


def test_real_words_query_without_answer_so_far():
    # no answer region: Paris only from the question (.10), city nowhere
    # ranking river .15, Paris .10, flows .02
    la = qfs_lookahead()
    assert real_words_query(la, 4, QUESTION, "", 2) == "Paris river"
    assert real_words_query(la, 4, QUESTION, "", 35) == "flows Paris river"
    # an answer so far that is not the end of the prompt is ignored
    assert real_words_query(la, 4, QUESTION, "Lyon is big.", 35) == "flows Paris river"


def test_real_words_query_drops_the_start_of_a_word_the_token_continues():
    # token 5 "ine" continues " Se": the generated region is " The river is the" (not "... the Se";
    # spaCy would tag "Se" PROPN); the result equals the " Se" case
    assert real_words_query(qfs_lookahead(), 5, QUESTION, ANSWER_SO_FAR, 35) == "flows Paris city river"


def test_real_words_query_keeps_the_word_before_a_token_that_starts_a_new_word():
    # token 2 " is" starts a new word, so the generated region is " The river": river .15 (not the question's .05)
    # expected: flows (q) Paris (answer) city (answer) river (generated)
    assert real_words_query(qfs_lookahead(), 2, QUESTION, ANSWER_SO_FAR, 35) == "flows Paris city river"


# The reference code's query: words with their punctuation, every occurrence ranked on its own.
#   chunks: question "river" .05, "flows" .02, "Paris?" (" Paris" .10 + "?" .01); answer "Paris" .20,
#   "city." (" city" .08 + "." .01); generated "river" .15
@pytest.mark.parametrize("punctuation, duplicates, top_n, query", [
    (False, True, 35, "river flows Paris Paris city river"),
    (False, True, 3, "Paris Paris river"),  # Paris .20, river .15, Paris .10
    (True, False, 35, "flows Paris? Paris city. river"),  # "Paris?" and "Paris" are different words now
    (True, False, 3, "Paris? Paris river"),  # .20, .15, .11
    (True, True, 35, "river flows Paris? Paris city. river"),
    (False, False, 35, "flows Paris city river"),  # the default: as before
])
def test_real_words_query_reference_switches(punctuation, duplicates, top_n, query):
    assert real_words_query(qfs_lookahead(), 4, QUESTION, ANSWER_SO_FAR, top_n, punctuation=punctuation,
                            duplicates=duplicates) == query


def test_a_whole_sentence_query_reads_up_to_the_last_token_when_the_text_ends_in_an_end_of_turn_text():
    # `end_of_turn: keep` appends "<|im_end|>" to the text without a token: the fired sentence then ends
    # past the generated tokens, and the query reads the generated text up to its last token.
    # Chunks and the attention " Se" (token 4) pays them: "Seine." .40 (" Se"; "ine" and "." come after
    # it), Paris .20, river .15 (its best occurrence), "Paris?" .11, "city." .09, flows .02; in text order:
    la = qfs_lookahead()
    ended = LookAhead(dataclasses.replace(la.c, text=la.c.text + "<|im_end|>"))
    assert real_words_query(ended, 4, QUESTION, ANSWER_SO_FAR, 35, punctuation=True,
                            sentence=(1, len(ended.text))) == "flows Paris? Paris city. river Seine."
