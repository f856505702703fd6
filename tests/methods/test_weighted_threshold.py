"""The weighted-threshold method on the hand-built look-ahead " Paris is one city.": attention weights
per word, per-word thresholds theta * e^weight, the trigger and its query."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.methods.parts.components import attention_weights
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.weighted_threshold import WeightedThreshold

from conftest import pioc, settings_of


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
