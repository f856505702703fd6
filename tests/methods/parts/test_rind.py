"""DRAGIN's RIND (Su et al. 2024, Eq. 2-4) as the shared part computes it: scores by hand."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_rag.methods.parts.rind import rind_scores


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
