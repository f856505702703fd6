"""The shared detection and query parts, against SCAAR's equations: weight normalisation (Eq. 2),
weighted thresholds (Eq. 3), masked and current-sentence queries, SCW weights (Eq. 1: leave-one-out
contributions through a fake encoder) and PFQ's percentile filter (Algorithm 1)."""

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


def test_eq2_normalise_sums_to_the_count_over_weights_clipped_to_0_1():
    assert normalise([0.25, 0.75]) == pytest.approx([0.5, 1.5])
    assert normalise([0.2, 0.2, 0.4]) == pytest.approx([0.75, 0.75, 1.5])
    assert sum(normalise([0.1, 0.7, 0.2, 0.5])) == pytest.approx(4.0)
    # Eq. 1's r lies in [0, 1]: -0.2 counts as 0, 1.5 as 1 -> [0, .5, 1], sum 1.5 -> 3 r / 1.5
    assert normalise([-0.2, 0.5, 1.5]) == pytest.approx([0.0, 1.0, 2.0])
    assert normalise([0.0, 0.0, 0.0]) == [1.0, 1.0, 1.0]
    assert normalise([float("nan"), 0.5]) == pytest.approx([0.0, 2.0])
    assert normalise([]) == []


def test_eq3_thresholds_as_printed_scale_theta_by_exp_of_the_raw_weight():
    assert weighted_thresholds(None, 0.8, 3) == [0.8, 0.8, 0.8]
    # raw (default): exp(r) * theta with r in [0, 1], so every threshold is in [theta, e * theta]
    assert weighted_thresholds([0.0, 1.0, math.log(2)], 0.8, 3) == pytest.approx([0.8, 0.8 * math.e, 1.6])
    assert weighted_thresholds([-0.5, 3.0], 0.8, 2) == pytest.approx([0.8, 0.8 * math.e])  # clipped to [0, 1]
    # normalised (Eq. 2 in the exponent): r' = [.5, 1.5] -> exp(r') * theta, mean exponent 1
    assert weighted_thresholds([0.25, 0.75], 0.8, 2, "normalised") == pytest.approx(
        [0.8 * math.exp(0.5), 0.8 * math.exp(1.5)])


def test_a_tiny_positive_sum_with_negative_entries_does_not_overflow():
    weights = [1e-300, -0.3, -0.4]  # sum slightly negative before clipping, tiny positive after
    assert weighted_thresholds(weights, 0.8, 3) == pytest.approx([0.8, 0.8, 0.8])
    # normalised: r' = [3, 0, 0] (all the mass on the one positive word), finite
    assert weighted_thresholds(weights, 0.8, 3, "normalised") == pytest.approx([0.8 * math.exp(3), 0.8, 0.8])
    # a 1,000-word sentence whose mass sits on one word: r' = 1000 would overflow exp; capped, still fires
    long = weighted_thresholds([1.0] + [0.0] * 999, 0.8, 1000, "normalised")
    assert math.isfinite(long[0]) and long[0] > 1e300 and long[1:] == [0.8] * 999


def test_masked_sentence_and_current_sentence_query():
    # sentence "He died in 1722." starts at 30 in its look-ahead
    units = [Unit("He", 30, 32, (6,)), Unit("died", 33, 37, (7,)), Unit("in", 38, 40, (8,)), Unit("1722", 41, 45, (9,))]
    assert masked_sentence("He died in 1722.", 30, units, [3]) == "He died in ."
    assert masked_sentence("He died in 1722.", 30, units, [0, 2]) == "died 1722."
    assert masked_sentence("He died in 1722.", 30, units, []) == "He died in 1722."
    d = Detection(True, units, [0.9, 0.9, 0.9, 0.1], [1, 3])
    assert current_sentence_query(None, None, d, None) == "He in"


def test_scw_weight_is_the_eq1_contribution_and_eq2_normalises_it_to_the_sentence_length():
    la = lookahead([0.9] * 6)
    sentence = la.sentences[0]
    units = la.word_units(sentence)
    context = TriggerContext(question=QUESTION, similarity=FakeSimilarity())
    weights = scw_weights(la, sentence, units, context)
    # Eq. 1: r = 1 - sim = [.5, .1, .01, .2, .15]; Eq. 2: r' = 5 r / .96, summing to |s| = 5
    assert weights == pytest.approx([0.5, 0.1, 0.01, 0.2, 0.15])
    assert normalise(weights) == pytest.approx([5 * x / 0.96 for x in (0.5, 0.1, 0.01, 0.2, 0.15)])
    assert sum(normalise(weights)) == pytest.approx(5.0)


def test_algorithm1_percentile_filter_sorts_by_contribution_descending():
    assert percentile_filter([0.5, 0.1, 0.01, 0.2, 0.15], 0.4) == [0, 3]
    assert percentile_filter([0.15, 0.1, 0.01, 0.2, 0.5], 0.6) == [4, 3, 0]  # line 1: sorted descending
    assert percentile_filter([0.3, 0.3, 0.3], 0.34) == [0, 1]  # ceil(1.02) = 2, ties by position
    assert percentile_filter([0.3, 0.1], 0.0) == [] and percentile_filter([], 0.5) == []
    context = TriggerContext(question="Q?", alpha=1.0, similarity=FakeSimilarity())
    la = lookahead([0.9] * 6)
    units = la.word_units(la.sentences[0])
    detection = Detection(False, units, [0.9] * 5, [])
    context.memo[("Q?", 0, la.sentences[0].text, tuple((u.start, u.end) for u in units))] = [0.1] * 5
    assert pfq_query(la, la.sentences[0], detection, context) == "Q? Idris founded the rope walk"
