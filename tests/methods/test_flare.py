"""FLARE's settings, detection and masked query (paper and DRAGIN-code variants, token and word level) on
hand-built look-aheads of " Inchcombe was born in 1722. He died, sadly."."""

from __future__ import annotations

import pytest

from adaptive_rag.methods.flare import FLARE
from adaptive_rag.methods.parts.lookahead import LookAhead

from conftest import cont, settings_of

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
