"""The weighted-threshold frame (SCAAR Table 3) on the hand-built look-ahead " Paris is one city.":
ATTN weights (each word's attention share), per-word thresholds theta * e^weight (Eq. 3), the RIND
cell (DRAGIN's own trigger), and the sentence replacement of section 3.4."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.lm.base import Extras
from adaptive_rag.methods.dragin import DRAGIN
from adaptive_rag.methods.parts.components import attention_weights
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.weighted_threshold import WeightedThreshold

from conftest import ANSWER, BORN, REGEN, cont, pioc, run_method, settings_of


def state_of(question="Q?"):
    return type("S", (), {"example": Example("q", question, ["a"], "span"), "text": ""})()


def frame(**params) -> WeightedThreshold:
    return WeightedThreshold(settings_of(WeightedThreshold, params, "methods.frame"), None)


def test_attn_weight_is_each_words_share_of_the_sentence_attention_in_eq3():
    la = LookAhead(pioc())
    s = la.sentences[0]
    words = la.word_units(s)
    # received (full, no diagonal) [.3, .2, .2, .1, 0] per word Paris, is, one, city; shares of .8
    assert attention_weights(la, s, words, None) == pytest.approx([0.375, 0.25, 0.25, 0.125])
    # Eq. 3 with the share in place of r: .5 * e^[.375, .25, .25, .125] = [.7275, .6420, .6420, .5666];
    # p = [.8, .6, .5, .4] -> is, one, city fire; Curr-Sent keeps the confident "Paris"
    attn, state = frame(weighting="attn", theta=0.5), state_of()
    d = attn.detect(state, la, s)
    assert d.thresholds == pytest.approx([0.5 * math.exp(w) for w in (0.375, 0.25, 0.25, 0.125)])
    assert (d.fire, d.flagged) == (True, [1, 2, 3])
    assert d.extra.get("weights") == [0.375, 0.25, 0.25, 0.125]
    assert attn.build_query(state, la, s, d) == "Paris"
    # normalised (Eq. 2 in the exponent): r' = 4 * share = [1.5, 1, 1, .5] -> .2 * e^r' = [.896, .544, .544, .330]
    d = frame(weighting="attn", theta=0.2, scaling="normalised").detect(state, la, s)
    assert d.thresholds == pytest.approx([0.2 * math.exp(1.5), 0.2 * math.e, 0.2 * math.e, 0.2 * math.exp(0.5)])
    assert (d.fire, d.flagged) == (True, [0, 2])
    origin = frame(theta=0.2)
    d = origin.detect(state, la, s)
    assert (d.fire, d.flagged, d.thresholds) == (False, [], pytest.approx([0.2] * 4))


@pytest.mark.parametrize("theta", [0.1, 0.25, 0.5])
def test_the_rind_cell_is_dragins_own_trigger(theta):
    la, state = LookAhead(pioc()), state_of()
    s = la.sentences[0]
    cell = frame(weighting="rind", query="real-words", theta=theta)
    dragin = DRAGIN(settings_of(DRAGIN, {"theta": theta}, "methods.dragin"), None)
    mine, theirs = cell.detect(state, la, s), dragin.detect(state, la, s)
    assert (mine.fire, mine.flagged, mine.scores) == (theirs.fire, theirs.flagged, theirs.scores)
    if mine.fire:
        assert cell.build_query(state, la, s, mine) == dragin.build_query(state, la, s, theirs)
    assert WeightedThreshold.needs_for(cell.settings) == {"attentions", "entropy"}
    assert cell.extras() == Extras(entropy=True, attention_layer=-1)


def test_section_3_4_the_frame_replaces_the_fired_sentence_with_the_first_regenerated_one():
    # ORIGIN at theta .8 on a look-ahead whose second sentence holds " 1722" at p .3: fire there, keep
    # the regeneration's first sentence " He died in 1750.", then look ahead again from it
    lookahead = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1722", "."],
                     [0.9] * 9 + [0.3, 0.9], finish="stop")
    script = {(False, ""): lookahead, (True, BORN): REGEN, (False, BORN + " He died in 1750."): ANSWER}
    answer, lm, retriever = run_method(WeightedThreshold, {}, script)
    assert [(c["passages"], c["prefix"]) for c in lm.calls] == [
        (False, ""), (True, BORN), (False, BORN + " He died in 1750.")]
    assert retriever.queries == [("He died in", 3)]  # Curr-Sent: the confident words
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
