"""Dynamic-retrieval methods on hand-computed toy cases: no model, no index.

Continuations are built by hand (token texts that join to the text, log-probabilities of round
probabilities, entropies and attention rows), so every expected number below is computed in the
comments. The loop is driven by a scripted fake LM keyed on (prompt has passages, prompt prefix) and
a fake retriever that records its queries.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptive_rag.config import Section
from adaptive_rag.data.datasets import Example
from adaptive_rag.evaluation.answer import extract_answer, has_answer
from adaptive_rag.lm.base import NO_EXTRAS, Continuation, Extras
from adaptive_rag.lm.capabilities import WHITE_BOX
from adaptive_rag.methods.attention import attention_matrix, attention_received, real_words_query
from adaptive_rag.methods.base import Answer, Context, Method
from adaptive_rag.methods.components import (Detection, attention_weights, current_sentence_query, masked_sentence,
                                             normalise, weighted_thresholds)
from adaptive_rag.methods.dragin import DRAGIN, rind_scores
from adaptive_rag.methods.fl_rag import FixedLengthRetrieval
from adaptive_rag.methods.flare import FLARE
from adaptive_rag.methods.fs_rag import FixedSentenceRetrieval
from adaptive_rag.methods.lookahead import LookAhead, Unit, mean_logprob, probability
from adaptive_rag.methods.weighted_threshold import WeightedThreshold
from adaptive_rag.prompts.fewshot import STOP_STRINGS, Exemplar
from adaptive_rag.retrieval import Hit

# ---- helpers ---------------------------------------------------------------------------------------


def cont(tokens, probs=None, finish="length", **kw) -> Continuation:
    """A continuation whose text is the joined tokens; probabilities default to 0.9 each."""
    probs = [0.9] * len(tokens) if probs is None else probs
    assert len(probs) == len(tokens)
    return Continuation(text="".join(tokens), tokens=list(tokens), logprobs=[math.log(p) for p in probs],
                        finish_reason=finish, **kw)


def attention_rows(prompt_parts, generated_parts) -> list[np.ndarray]:
    """Row j = its prompt columns followed by its j + 1 generated columns."""
    rows = []
    for j, (p, g) in enumerate(zip(prompt_parts, generated_parts)):
        assert len(g) == j + 1
        rows.append(np.array(list(p) + list(g), dtype=np.float32))
    return rows


def units_of(units: list[Unit]) -> list[tuple]:
    return [(u.text, u.start, u.end, u.tokens) for u in units]


def settings_of(cls, data: dict, path: str) -> dict:
    section = Section(dict(data), path, "params.yaml")
    settings = cls.read_settings(section)
    section.done()
    return settings


# ---- 1. word probabilities and the token/word/sentence alignment -------------------------------------


def test_word_probability_is_geometric_mean_of_its_tokens():
    c = cont([" In", "ch", "combe", " was"], [0.5, 0.25, 1.0, 0.9])
    three = Unit("Inchcombe", 1, 10, (0, 1, 2))
    # mean log = (log .5 + log .25 + log 1) / 3 = log(.125) / 3 = log .5  ->  p = .5
    assert mean_logprob(c.logprobs, three) == pytest.approx(math.log(0.5))
    assert probability(c.logprobs, three) == pytest.approx(0.5)
    c2 = cont([" Sa", "xony"], [0.9, 0.4])
    # sqrt(.9 * .4) = sqrt(.36) = .6
    assert probability(c2.logprobs, Unit("Saxony", 1, 7, (0, 1))) == pytest.approx(0.6)
    assert probability(c2.logprobs, Unit("xony", 3, 7, (1,))) == pytest.approx(0.4)


def test_subwords_punctuation_and_two_sentences():
    tokens = [" In", "ch", "combe", " was", " born", " in", " 1722", ".", " He", " died", ",", " sadly", "."]
    la = LookAhead(cont(tokens))
    assert la.text == " Inchcombe was born in 1722. He died, sadly."
    s1, s2 = la.sentences
    assert (s1.start, s1.end, s1.text) == (1, 28, "Inchcombe was born in 1722.")
    assert (s2.start, s2.end, s2.text) == (29, 44, "He died, sadly.")
    assert la.sentence_tokens(s1) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert la.sentence_tokens(s2) == [8, 9, 10, 11, 12]
    # token units: text stripped, start at the first non-space character
    assert units_of(la.token_units(s1)) == [
        ("In", 1, 3, (0,)), ("ch", 3, 5, (1,)), ("combe", 5, 10, (2,)), ("was", 11, 14, (3,)),
        ("born", 15, 19, (4,)), ("in", 20, 22, (5,)), ("1722", 23, 27, (6,)), (".", 27, 28, (7,))]
    assert units_of(la.token_units(s2)) == [
        ("He", 29, 31, (8,)), ("died", 32, 36, (9,)), (",", 36, 37, (10,)), ("sadly", 38, 43, (11,)),
        (".", 43, 44, (12,))]
    # word units: sub-words merged, punctuation in no word
    assert units_of(la.word_units(s1)) == [
        ("Inchcombe", 1, 10, (0, 1, 2)), ("was", 11, 14, (3,)), ("born", 15, 19, (4,)), ("in", 20, 22, (5,)),
        ("1722", 23, 27, (6,))]
    assert units_of(la.word_units(s2)) == [("He", 29, 31, (8,)), ("died", 32, 36, (9,)), ("sadly", 38, 43, (11,))]
    assert la.units(s2, "word") == la.word_units(s2) and la.units(s2, "token") == la.token_units(s2)
    # the first 28 characters (" Inchcombe was born in 1722.") use tokens 0..7
    assert la.tokens_within(28) == 8
    assert la.tokens_within(0) == 0


def test_digits_split_after_a_bare_space_token():
    # SmolLM2 writes " 1722" as " ", "1", "7", "2", "2"
    tokens = [" Paris", " is", " the", " capital", ".", " It", " was", " founded", " in", " ", "1", "7", "2", "2", "."]
    la = LookAhead(cont(tokens))
    s1, s2 = la.sentences
    assert (s1.text, s2.text) == ("Paris is the capital.", "It was founded in 1722.")
    assert (s2.start, s2.end) == (23, 46)
    # the bare " " (index 9) anchors nowhere, so it belongs to no sentence
    assert la.sentence_tokens(s2) == [5, 6, 7, 8, 10, 11, 12, 13, 14]
    assert [u.text for u in la.token_units(s2)] == ["It", "was", "founded", "in", "1", "7", "2", "2", "."]
    words = la.word_units(s2)
    assert units_of(words)[-1] == ("1722", 41, 45, (10, 11, 12, 13))
    assert [w.text for w in words] == ["It", "was", "founded", "in", "1722"]
    # p(1722) = geometric mean of its four digit tokens: (.5 * 1 * .5 * 1) ** (1/4) = sqrt(.5)
    probs = [1.0] * 10 + [0.5, 1.0, 0.5, 1.0, 1.0]
    c = cont(tokens, probs)
    assert probability(c.logprobs, words[-1]) == pytest.approx(math.sqrt(0.5))


def test_whitespace_only_tokens_belong_to_no_unit():
    tokens = ["The", "  ", " cat", " sat", ".", " \n", "Then", " it", " left", "."]
    la = LookAhead(cont(tokens))
    assert la.text == "The   cat sat. \nThen it left."
    s1, s2 = la.sentences
    assert (s1.start, s1.end, s2.start, s2.end) == (0, 14, 16, 29)
    assert la.sentence_tokens(s1) == [0, 2, 3, 4]
    assert la.sentence_tokens(s2) == [6, 7, 8, 9]
    assert units_of(la.token_units(s1)) == [("The", 0, 3, (0,)), ("cat", 6, 9, (2,)), ("sat", 10, 13, (3,)),
                                            (".", 13, 14, (4,))]
    assert units_of(la.word_units(s2)) == [("Then", 16, 20, (6,)), ("it", 21, 23, (7,)), ("left", 24, 28, (8,))]


# ---- 2. FLARE ----------------------------------------------------------------------------------------

INCH = [" In", "ch", "combe", " was", " born", " in", " 1722", ".", " He", " died", ",", " sadly", "."]


def flare(**params) -> FLARE:
    return FLARE(settings_of(FLARE, params, "methods.flare"), None)


def test_flare_settings_defaults():
    assert flare().settings == {"top_k": 3, "max_retrievals": None, "keep": "first-sentence", "retriever": None,
                                "variant": "paper",
                                "granularity": "token", "theta": 0.8, "mask_theta": 0.4}
    code = flare(variant="dragin-code").settings
    assert code["theta"] == 0.2 and "mask_theta" not in code


def test_flare_paper_token_level_fires_and_masks_only_below_mask_theta():
    probs = [0.3, 1.0, 1.0, 0.6, 1.0, 1.0, 0.2, 1.0] + [1.0] * 5
    la = LookAhead(cont(INCH, probs))
    s1, s2 = la.sentences
    m = flare()
    d = m.detect(None, la, s1)
    assert d.fire is True
    assert d.scores == pytest.approx(probs[:8])
    assert d.flagged == [0, 3, 6]  # p < .8: "In" .3, "was" .6, "1722" .2
    assert d.first_flagged_token() == 0
    # mask p < .4: "In" and "1722"; "was" (.6) is flagged but kept in the query
    assert m.build_query(None, la, s1, d) == "chcombe was born in ."
    d2 = m.detect(None, la, s2)
    assert (d2.fire, d2.flagged) == (False, [])


def test_flare_paper_word_level_query_keeps_words_between_thresholds():
    # Inchcombe: (.5*.5*.5)^(1/3) = .5 (flagged, kept), born .9, 1722 .25 (masked)
    probs = [0.5, 0.5, 0.5, 1.0, 0.9, 1.0, 0.25, 1.0] + [1.0] * 5
    la = LookAhead(cont(INCH, probs))
    s1 = la.sentences[0]
    m = flare(granularity="word")
    d = m.detect(None, la, s1)
    assert [u.text for u in d.units] == ["Inchcombe", "was", "born", "in", "1722"]
    assert d.scores == pytest.approx([0.5, 1.0, 0.9, 1.0, 0.25])
    assert d.flagged == [0, 4] and d.fire
    assert m.build_query(None, la, s1, d) == "Inchcombe was born in ."


def test_flare_paper_token_fires_but_word_does_not():
    # token "In" has p = .729 < .8; the word Inchcombe has (.729*1*1)^(1/3) = .9 >= .8
    probs = [0.729, 1.0, 1.0] + [0.95] * 10
    la = LookAhead(cont(INCH, probs))
    s1 = la.sentences[0]
    token = flare().detect(None, la, s1)
    word = flare(granularity="word").detect(None, la, s1)
    assert (token.fire, token.flagged) == (True, [0])
    assert (word.fire, word.flagged) == (False, [])
    assert word.scores[0] == pytest.approx(0.9)


def test_flare_dragin_code_word_fires_but_token_does_not():
    # only "1722" is doubtful: 1 - .4 = .6.  token level: .6 / 8 units = .075 <= .1;
    # word level: .6 / 5 words = .12 > .1  ->  fires, and the query drops 1722 (doubt .6 > .1)
    probs = [1.0] * 6 + [0.4] + [1.0] * 6
    la = LookAhead(cont(INCH, probs))
    s1 = la.sentences[0]
    token_m, word_m = flare(variant="dragin-code", theta=0.1), flare(variant="dragin-code", theta=0.1,
                                                                     granularity="word")
    token, word = token_m.detect(None, la, s1), word_m.detect(None, la, s1)
    assert token.fire is False and token.flagged == [6]
    assert token.extra == {"mean_doubt": 0.075}
    assert word.fire is True and word.flagged == [4]
    assert word.scores == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.6])
    assert word.extra == {"mean_doubt": 0.12}
    assert word_m.build_query(None, la, s1, word) == "Inchcombe was born in ."


def test_flare_dragin_code_token_fires_but_word_does_not():
    # Inchcombe's three tokens at .5: token doubts .5,.5,.5 + 5 zeros -> mean 1.5/8 = .1875 > .15;
    # word Inchcombe p = .5, doubt .5, + 4 zeros -> mean .5/5 = .1 <= .15
    probs = [0.5, 0.5, 0.5] + [1.0] * 10
    la = LookAhead(cont(INCH, probs))
    s1 = la.sentences[0]
    token_m = flare(variant="dragin-code", theta=0.15)
    token = token_m.detect(None, la, s1)
    word = flare(variant="dragin-code", theta=0.15, granularity="word").detect(None, la, s1)
    assert (token.fire, token.flagged) == (True, [0, 1, 2])
    assert token.scores == pytest.approx([0.5, 0.5, 0.5, 0, 0, 0, 0, 0])
    assert (word.fire, word.flagged) == (False, [0])
    # the query drops all three sub-word tokens of the doubtful word
    assert token_m.build_query(None, la, s1, token) == "was born in 1722."


# ---- 3. DRAGIN ---------------------------------------------------------------------------------------

# " Paris is one city."  tokens 0 Paris (real, not stop), 1 is (stop, AUX), 2 one (stop, but NUM: real),
# 3 city (real), 4 "." (in no word, so stop).  Two prompt tokens.
PIOC = [" Paris", " is", " one", " city", "."]
PROMPT_PART = [[0.6, 0.2], [0.4, 0.2], [0.2, 0.2], [0.2, 0.0], [0.2, 0.2]]
GENERATED_PART = [[0.2], [0.3, 0.1], [0.2, 0.2, 0.2], [0.1, 0.1, 0.0, 0.6], [0.1, 0.1, 0.2, 0.1, 0.1]]
ENTROPIES = [1.0, 3.0, 3.0, 2.0, 5.0]


def pioc(meta=None, finish="length") -> Continuation:
    return cont(PIOC, [0.8, 0.6, 0.5, 0.4, 0.9], finish=finish, prompt_tokens=2, entropies=list(ENTROPIES),
                attentions=attention_rows(PROMPT_PART, GENERATED_PART), meta=meta or {})


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


def test_rind_scores_by_hand():
    received = np.array([0.2, 0.4, 0.1, 0.3])
    entropies = [1.0, 2.0, 3.0, 0.5]
    tokens, stop = [1, 2, 3], [False, True, False]
    # a * H: .4*2, .1*3, .3*.5
    assert rind_scores(received, entropies, tokens, stop, False, False) == pytest.approx([0.8, 0.3, 0.15])
    assert rind_scores(received, entropies, tokens, stop, False, True) == pytest.approx([0.8, 0.0, 0.15])
    # normalised: a / (.4+.1+.3) * 3 = 1.5, .375, 1.125  ->  * H = 3, 1.125, .5625
    assert rind_scores(received, entropies, tokens, stop, True, False) == pytest.approx([3.0, 1.125, 0.5625])
    assert rind_scores(received, entropies, tokens, stop, True, True) == pytest.approx([3.0, 0.0, 0.5625])
    # zero attention is left alone by normalisation (no division by zero)
    assert rind_scores(np.zeros(4), entropies, tokens, stop, True, False) == [0.0, 0.0, 0.0]


def dragin(**params) -> DRAGIN:
    return DRAGIN(settings_of(DRAGIN, {"theta": 0.5, **params}, "methods.dragin"), None)


@pytest.mark.parametrize("params, scores, flagged", [
    # paper: a = [.3,.2,.2,.1,0] * H [1,3,3,2,5] = [.3,.6,.6,.2,0]; stop words and "." zeroed
    ({}, [0.3, 0, 0, 0.2, 0], []),
    # the diagonal: a3 = .6 -> city 1.2 > .5
    ({"include_diagonal": True}, [0.3, 0, 0, 1.2, 0], [3]),
    # generated scope: a = [.75, 1/3, 1/3, 1/6, 0] -> Paris .75 > .5
    ({"attention_scope": "generated"}, [0.75, 0, 0, 1 / 3, 0], [0]),
    # normalised: a * 5 / .8 = [1.875, 1.25, 1.25, .625, 0] -> * H -> Paris 1.875, city 1.25
    ({"normalise": True}, [1.875, 0, 0, 1.25, 0], [0, 3]),
    # filter after: scores unfiltered; over .5: "is" and "one" (.6); only "one" (NUM) is a real word
    ({"filter_order": "after"}, [0.3, 0.6, 0.6, 0.2, 0], [2]),
    # dragin-code: generated + diagonal a = [1, 1/3, 1/3, .75, 1/6] (sum 31/12), normalised *60/31
    # -> [60, 20, 20, 45, 10]/31 * H = [60, 60, 60, 90, 50]/31, all over .5; real words: Paris, one, city
    ({"reference": "dragin-code"}, [60 / 31, 60 / 31, 60 / 31, 90 / 31, 50 / 31], [0, 2, 3]),
])
def test_dragin_detect_under_each_switch(params, scores, flagged):
    la = LookAhead(pioc())
    d = dragin(**params).detect(None, la, la.sentences[0])
    assert [u.text for u in d.units] == ["Paris", "is", "one", "city", "."]
    assert d.scores == pytest.approx(scores, abs=1e-6)
    assert d.flagged == flagged
    assert d.fire is bool(flagged)


def test_dragin_reference_defaults():
    assert {k: v for k, v in dragin(reference="dragin-code").settings.items()
            if k in ("attention_scope", "include_diagonal", "normalise", "filter_order", "keep")} == {
        "attention_scope": "generated", "include_diagonal": True, "normalise": True, "filter_order": "after",
        "keep": "first-sentence"}
    assert dragin().settings["keep"] == "all"
    with pytest.raises(Exception, match="true or false"):
        dragin(normalise="yes")


# ---- 4. QFS: DRAGIN's real-words query ------------------------------------------------------------

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


# ---- 5. weighting and query registries ---------------------------------------------------------------


def test_normalise_sums_to_the_count():
    assert normalise([1.0, 3.0]) == pytest.approx([0.5, 1.5])
    assert normalise([2.0, 2.0, 4.0]) == pytest.approx([0.75, 0.75, 1.5])
    assert sum(normalise([0.1, 0.7, 0.2, 5.0])) == pytest.approx(4.0)
    assert normalise([0.0, 0.0, 0.0]) == [1.0, 1.0, 1.0]
    assert normalise([]) == []


def test_weighted_thresholds():
    assert weighted_thresholds(None, 0.8, 3) == [0.8, 0.8, 0.8]
    assert weighted_thresholds([0.0, 1.0, math.log(2)], 0.8, 3) == pytest.approx([0.8, 0.8 * math.e, 1.6])


def test_masked_sentence_and_current_sentence_query():
    # sentence "He died in 1722." starts at 30 in its look-ahead
    units = [Unit("He", 30, 32, (6,)), Unit("died", 33, 37, (7,)), Unit("in", 38, 40, (8,)), Unit("1722", 41, 45, (9,))]
    assert masked_sentence("He died in 1722.", 30, units, [3]) == "He died in ."
    assert masked_sentence("He died in 1722.", 30, units, [0, 2]) == "died 1722."
    assert masked_sentence("He died in 1722.", 30, units, []) == "He died in 1722."
    d = Detection(True, units, [0.9, 0.9, 0.9, 0.1], [1, 3])
    assert current_sentence_query(None, None, d, None) == "He in"


def test_attention_weights_and_weighted_threshold_detect():
    la = LookAhead(pioc())
    s = la.sentences[0]
    words = la.word_units(s)
    # received (full, no diagonal) [.3,.2,.2,.1,0] per word Paris, is, one, city; sum .8 -> *4/.8
    assert attention_weights(la, s, words, None) == pytest.approx([1.5, 1.0, 1.0, 0.5])
    # thresholds .2*e^[1.5, 1, 1, .5] = [.896, .544, .544, .330]; p = [.8, .6, .5, .4] -> Paris, one
    attn = WeightedThreshold(settings_of(WeightedThreshold, {"weighting": "attn", "theta": 0.2}, "m"), None)
    state = type("S", (), {"example": Example("q", "Q?", ["a"], "span"), "text": ""})()
    d = attn.detect(state, la, s)
    assert d.thresholds == pytest.approx([0.2 * math.exp(1.5), 0.2 * math.e, 0.2 * math.e, 0.2 * math.exp(0.5)])
    assert (d.fire, d.flagged) == (True, [0, 2])
    assert d.extra.get("weights") == [1.5, 1.0, 1.0, 0.5]
    assert attn.build_query(state, la, s, d) == "is city"
    origin = WeightedThreshold(settings_of(WeightedThreshold, {"theta": 0.2}, "m"), None)
    d = origin.detect(state, la, s)
    assert (d.fire, d.flagged, d.thresholds) == (False, [], pytest.approx([0.2] * 4))


# ---- 6. the loop, with a scripted LM and a recording retriever ------------------------------------------


def has_passages(prompt) -> bool:
    text = prompt.text if prompt.text is not None else "".join(c for _, c in prompt.messages)
    return "Context:" in text


class ScriptedLM:
    capabilities = WHITE_BOX

    def __init__(self, script: dict):
        self.script, self.calls = script, []

    def identity(self):
        return {"backend": "scripted"}

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        out = []
        for p in prompts:
            key = (has_passages(p), p.prefix)
            self.calls.append({"passages": key[0], "prefix": p.prefix, "max_new_tokens": max_new_tokens,
                               "stop": tuple(stop), "extras": extras, "prompt": p})
            if key not in self.script:
                raise AssertionError(f"unscripted call {key!r}")
            out.append(self.script[key])
        return out


class RecordingRetriever:
    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append((query, k))
        n = len(self.queries)
        return [Hit(f"d{n}.{i}", f"T{n}", f"passage {n}.{i}", 1.0 / i) for i in range(1, k + 1)]

    def identity(self):
        return {"retriever": "recording"}


EXEMPLARS = [Exemplar("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "Shakespeare")]
Q = "Where was Inchcombe born?"


def run(cls, params, script, max_new_tokens=50, question=Q):
    lm, retriever = ScriptedLM(script), RecordingRetriever()
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=max_new_tokens,
                  retriever=retriever, answer_fallback_tokens=5)
    method = cls(settings_of(cls, params, "methods.x"), ctx)
    [answer] = method.answer_batch([Example("q1", question, ["Paris"], "span")])
    return answer, lm, retriever


BORN = " Inchcombe was born in Paris."
# look-ahead: sentence 2 has " 1722" at p .3 < .8 -> FLARE (paper) fires there, query masks it (< .4)
LOOKAHEAD_1722 = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1722", "."],
                      [0.9] * 9 + [0.3, 0.9], finish="stop")
REGEN = cont([" He", " died", " in", " 1750", ".", " So", " the", " answer", " is", " Paris", "."], finish="stop")
ANSWER = cont([" So", " the", " answer", " is", " Paris", "."], finish="stop")


def counters(answer):
    return answer.counters()


def test_flare_loop_truncates_before_the_firing_sentence_and_keeps_first_regenerated_sentence():
    script = {(False, ""): LOOKAHEAD_1722,
              (True, BORN): REGEN,
              (False, BORN + " He died in 1750."): ANSWER}
    answer, lm, retriever = run(FLARE, {}, script)
    # kept " Inchcombe was born in Paris." (6 tokens), regenerated from there with passages, kept
    # " He died in 1750." (5 tokens), then a look-ahead from that prefix says the answer (no fire)
    assert [(c["passages"], c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [
        (False, "", 50), (True, BORN, 44), (False, BORN + " He died in 1750.", 39)]
    assert all(c["stop"] == STOP_STRINGS and c["extras"] == NO_EXTRAS for c in lm.calls)
    assert "Context:\n[1] T1: passage 1.1\n[2] T1: passage 1.2\n[3] T1: passage 1.3\n" in lm.calls[1]["prompt"].text
    assert retriever.queries == [("He died in .", 3)]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    # tokens 11 + 11 + 6; sentences 2 + 2 + 1
    assert counters(answer) == {"retrievals": 1, "llm_calls": 3, "detections": 1, "generated_tokens": 28,
                                "sentences": 5}
    assert [p["id"] for p in answer.passages] == ["d1.1", "d1.2", "d1.3"]
    assert [s["phase"] for s in answer.steps] == ["look-ahead", "regenerate", "look-ahead"]
    assert answer.steps[0]["kept"] == 30 and answer.steps[0]["sentence"] == 1
    assert answer.steps[0]["detection"]["flagged"] == [3]


def test_flare_loop_keep_all_keeps_the_whole_regeneration():
    script = {(False, ""): LOOKAHEAD_1722, (True, BORN): REGEN}
    answer, lm, retriever = run(FLARE, {"keep": "all"}, script)
    # the regeneration says the answer and ends (stop): no third call
    assert [c["prefix"] for c in lm.calls] == ["", BORN]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert counters(answer) == {"retrievals": 1, "llm_calls": 2, "detections": 1, "generated_tokens": 22,
                                "sentences": 4}


@pytest.mark.parametrize("cap, output, queries, calls", [
    # capped after one retrieval: the second look-ahead (Lyon at p .1) is kept without detection
    (1, "Inchcombe was born in Paris. He died in 1750. So the answer is Lyon.", ["He died in ."], 3),
    # uncapped: Lyon fires (detection 2), "So the answer is ." retrieved, the answer regenerated
    (None, "Inchcombe was born in Paris. He died in 1750. So the answer is Paris.",
     ["He died in .", "So the answer is ."], 4),
])
def test_flare_loop_max_retrievals(cap, output, queries, calls):
    lyon = cont([" So", " the", " answer", " is", " Lyon", "."], [0.9, 0.9, 0.9, 0.9, 0.1, 0.9], finish="stop")
    kept = BORN + " He died in 1750."
    script = {(False, ""): LOOKAHEAD_1722, (True, BORN): REGEN, (False, kept): lyon, (True, kept): ANSWER}
    answer, lm, retriever = run(FLARE, {"max_retrievals": cap}, script)
    assert answer.output == output
    assert [q for q, _ in retriever.queries] == queries
    assert (answer.retrievals, answer.detections, answer.llm_calls) == (len(queries), len(queries), calls)


def test_flare_loop_no_retrieval_budget_then_fallback():
    fallback_prefix = " Inchcombe was born in Paris. He died in 1722. So the answer is"  # raw: " " after "Answer:"
    script = {(False, ""): LOOKAHEAD_1722, (False, fallback_prefix): cont([" Paris", "."], finish="stop")}
    answer, lm, retriever = run(FLARE, {"max_retrievals": 0}, script)
    assert retriever.queries == []
    assert answer.output == "Inchcombe was born in Paris. He died in 1722. So the answer is Paris."
    assert (lm.calls[1]["max_new_tokens"], lm.calls[1]["stop"]) == (5, STOP_STRINGS + ("\n",))
    assert counters(answer) == {"retrievals": 0, "llm_calls": 2, "detections": 0, "generated_tokens": 13,
                                "sentences": 3}
    assert answer.steps[-1]["phase"] == "fallback"


def test_dragin_loop_fires_on_the_first_sentence_and_regenerates_from_nothing():
    # include_diagonal: "city" fires (1.2 > .5, see the switch table); QFS with the attention of " city"
    # (row 3): prompt columns [.2 (" Which river?"), 0]; generated " Paris is " -> Paris .1
    # top 2: river .2, Paris .1 -> "river Paris"
    lookahead = pioc(meta={"prompt_tokens": [" Which river?", "\nAnswer:"]})
    regen = cont([" The", " Seine", ".", " So", " the", " answer", " is", " Seine", "."], finish="stop")
    script = {(False, ""): lookahead, (True, ""): regen}
    answer, lm, retriever = run(DRAGIN, {"include_diagonal": True, "theta": 0.5, "top_n": 2}, script,
                                question="Which river?")
    assert retriever.queries == [("river Paris", 3)]
    assert [(c["passages"], c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [(False, "", 50),
                                                                                     (True, "", 50)]
    assert lm.calls[0]["extras"] == Extras(entropy=True, attention_layer=-1)
    assert lm.calls[1]["extras"] == NO_EXTRAS
    assert answer.output == "The Seine. So the answer is Seine."
    assert counters(answer) == {"retrievals": 1, "llm_calls": 2, "detections": 1, "generated_tokens": 14,
                                "sentences": 3}
    assert answer.steps[0]["kept"] == 1 and answer.steps[0]["query"] == "river Paris"


def test_fs_rag_queries_question_then_each_previous_sentence():
    two = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."],
               finish="stop")
    script = {(True, ""): two, (True, BORN): REGEN, (True, BORN + " He died in 1750."): ANSWER}
    answer, lm, retriever = run(FixedSentenceRetrieval, {}, script)
    assert retriever.queries == [(Q, 3), ("Inchcombe was born in Paris.", 3), ("He died in 1750.", 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [
        ("", 50), (BORN, 44), (BORN + " He died in 1750.", 39)]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert counters(answer) == {"retrievals": 3, "llm_calls": 3, "detections": 0, "generated_tokens": 28,
                                "sentences": 5}
    # the third prompt carries the third retrieval's passages
    assert "[1] T3: passage 3.1" in lm.calls[2]["prompt"].text


def test_fs_rag_capped_generates_the_rest_with_the_last_passages():
    two = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."],
               finish="stop")
    script = {(True, ""): two, (True, BORN): REGEN}
    answer, lm, retriever = run(FixedSentenceRetrieval, {"max_retrievals": 1}, script)
    assert retriever.queries == [(Q, 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [("", 50), (BORN, 44)]
    assert "[1] T1: passage 1.1" in lm.calls[1]["prompt"].text
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert (answer.retrievals, answer.llm_calls) == (1, 2)


def test_fl_rag_windows_queries_and_fallback_without_doubling_the_phrase():
    w1 = cont([" Inchcombe", " was", " born", " in"])
    w2 = cont([" Paris", ".", " So", " the"])
    w3 = cont([" answer", " is"])
    cut = " Inchcombe was born in Paris. So the answer is"
    script = {(True, ""): w1, (True, " Inchcombe was born in"): w2, (True, " Inchcombe was born in Paris. So the"): w3,
              (False, cut): cont([" Paris", "."], finish="stop")}
    answer, lm, retriever = run(FixedLengthRetrieval, {"window": 4}, script, max_new_tokens=10)
    # window 4, then 4, then min(4, 10 - 8) = 2; the output ends on the phrase -> continued as it is
    assert [(c["passages"], c["max_new_tokens"]) for c in lm.calls] == [(True, 4), (True, 4), (True, 2), (False, 5)]
    assert retriever.queries == [(Q, 3), ("Inchcombe was born in", 3), ("Paris. So the", 3)]
    assert lm.calls[3]["prefix"] == cut
    assert answer.output == "Inchcombe was born in Paris. So the answer is Paris."
    # tokens 4 + 4 + 2 + 2; sentences 1 + 2 + 1 + 1
    assert counters(answer) == {"retrievals": 3, "llm_calls": 4, "detections": 0, "generated_tokens": 12,
                                "sentences": 5}


# ---- 7. the "So the answer is" fallback -----------------------------------------------------------------


def test_extract_answer_and_has_answer():
    assert extract_answer("Paris is big. So the answer is Paris.") == ("Paris", True)
    assert extract_answer("So the answer is") == ("", True)
    assert has_answer("So the answer is") is False
    assert extract_answer("Paris is big.") == ("Paris is big.", False)
    assert has_answer("Paris is big.") is False
    assert extract_answer('The answer is: "Paris". Then more.') == ("Paris", True)
    assert extract_answer("The answer is Lyon. No, the answer is Paris. Done") == ("Paris", True)
    assert has_answer("So the answer is Paris.") is True


def test_complete_answers():
    outputs = ["Paris is big.", "Paris is big. So the answer is", "So the answer is Lyon.", ""]
    script = {(False, " Paris is big. So the answer is"): cont([" Paris", "."], finish="stop"),
              (False, " So the answer is"): cont([" Rome", "."], finish="stop")}
    lm = ScriptedLM(script)
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=5)
    answers = [Answer(output=o, prompt="p") for o in outputs]
    Method({}, ctx).complete_answers(["Q1?", "Q2?", "Q3?", "Q4?"], answers)
    assert [a.output for a in answers] == ["Paris is big. So the answer is Paris.",
                                           "Paris is big. So the answer is Paris.",
                                           "So the answer is Lyon.",
                                           "So the answer is Rome."]
    # one batched call for the three without an answer, in order
    assert [c["prefix"] for c in lm.calls] == [" Paris is big. So the answer is", " Paris is big. So the answer is",
                                               " So the answer is"]
    assert {(c["max_new_tokens"], c["stop"]) for c in lm.calls} == {(5, STOP_STRINGS + ("\n",))}
    assert [(a.llm_calls, a.generated_tokens, a.sentences) for a in answers] == [(1, 2, 1), (1, 2, 1), (0, 0, 0),
                                                                                (1, 2, 1)]
    assert [len(a.steps) for a in answers] == [1, 1, 0, 1]


def test_complete_answers_with_no_budget_does_nothing():
    lm = ScriptedLM({})
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=0)
    answers = [Answer(output="Paris is big.", prompt="p")]
    Method({}, ctx).complete_answers(["Q?"], answers)
    assert answers[0].output == "Paris is big." and lm.calls == []


def test_complete_answers_raw_prompt_keeps_the_space_after_answer():
    lm = ScriptedLM({(False, " Paris is big. So the answer is"): cont([" Paris", "."], finish="stop")})
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=5)
    Method({}, ctx).complete_answers(["Q?"], [Answer(output="Paris is big.", prompt="p")])
    assert lm.calls[0]["prompt"].readable().endswith("Question: Q?\nAnswer: Paris is big. So the answer is")
