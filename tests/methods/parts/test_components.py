"""The shared detection and query parts: weight normalisation, weighted thresholds, masked and
current-sentence queries, SCW weights (leave-one-out contributions through a fake encoder) and PFQ's
percentile filter."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.methods.parts.components import (Detection, TriggerContext, current_sentence_query, masked_sentence,
                                                   normalise, percentile_filter, pfq_query, scw_weights,
                                                   weighted_thresholds)
from adaptive_rag.methods.parts.lookahead import Unit

from conftest import ROPE_QUESTION as QUESTION
from conftest import FakeSimilarity
from conftest import rope_lookahead as lookahead


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


def test_scw_normalises_to_the_sentence_length_and_scales_thresholds():
    la = lookahead([0.9] * 6)
    sentence = la.sentences[0]
    units = la.word_units(sentence)
    context = TriggerContext(question=QUESTION, similarity=FakeSimilarity())
    weights = scw_weights(la, sentence, units, context)
    # r = [.5, .1, .01, .2, .15], sum .96: r' = 5 r / .96
    assert weights == pytest.approx([5 * x / 0.96 for x in (0.5, 0.1, 0.01, 0.2, 0.15)])
    assert sum(weights) == pytest.approx(5.0)
    assert normalise([0.0, 0.0]) == [1.0, 1.0]


def test_percentile_filter_edges():
    assert percentile_filter([0.5, 0.1, 0.01, 0.2, 0.15], 0.4) == [0, 3]
    assert percentile_filter([0.3, 0.3, 0.3], 0.34) == [0, 1]  # ceil(1.02) = 2, ties by position
    assert percentile_filter([0.3, 0.1], 0.0) == [] and percentile_filter([], 0.5) == []
    context = TriggerContext(question="Q?", alpha=1.0, similarity=FakeSimilarity())
    la = lookahead([0.9] * 6)
    units = la.word_units(la.sentences[0])
    detection = Detection(False, units, [0.9] * 5, [])
    context.memo[("Q?", 0, la.sentences[0].text, tuple((u.start, u.end) for u in units))] = [0.1] * 5
    assert pfq_query(la, la.sentences[0], detection, context) == "Q? Idris founded the rope walk"
