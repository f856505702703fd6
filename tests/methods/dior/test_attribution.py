"""DioR's attribution normalisation, attribution entropy (paper Eq. 6, and Eq. 1 as printed) and the early
detector's input, on hand-computed values (engineering spec §5, acceptance test 1)."""

import math

import numpy as np
import pytest

from adaptive_rag.lm.base import Attribution
from adaptive_rag.lm.integrated_gradients import per_token
from adaptive_rag.methods.dior.attribution import (attribution_entropy, early_features, normalise,
                                                    token_scores)

# Per-token IG vectors [[3, 4], [0, 0], [6, 8]]: L2 norms [5, 0, 10], sums [7, 0, 14]; a = [1/3, 0, 2/3];
# H = -(1/3 ln 1/3 + 2/3 ln 2/3) = 0.636514 (0 ln 0 := 0).
VECTORS = np.array([[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]])
H = 0.636514


def hand_attribution() -> Attribution:
    l2, dot = per_token(VECTORS)
    return Attribution(tokens=["A", " b", " c"], token_ids=[1, 2, 3], target_id=9, target=" d", value=0.5,
                       baseline_value=0.1, l2=l2, dot=dot)


def test_l2_norms_normalised_to_a_distribution():
    l2, dot = per_token(VECTORS)
    assert l2.tolist() == [5.0, 0.0, 10.0] and dot.tolist() == [7.0, 0.0, 14.0]
    assert normalise(l2) == pytest.approx([1 / 3, 0.0, 2 / 3], abs=1e-15)
    assert token_scores(hand_attribution()) == pytest.approx([1 / 3, 0.0, 2 / 3], abs=1e-15)
    assert token_scores(hand_attribution(), "dot").tolist() == [7.0, 0.0, 14.0]  # signed sums, unnormalised


def test_attribution_entropy_by_hand():
    assert attribution_entropy([5.0, 0.0, 10.0]) == pytest.approx(H, abs=1e-6)
    assert attribution_entropy([1 / 3, 0.0, 2 / 3]) == pytest.approx(H, abs=1e-6)  # already normalised: same
    assert attribution_entropy(np.full(5, 0.2)) == pytest.approx(math.log(5), abs=1e-12)  # 1.609438
    assert math.log(5) == pytest.approx(1.609438, abs=1e-6)
    assert attribution_entropy([0.0, 3.0, 0.0]) == 0.0  # one-hot


def test_the_printed_eq1_is_minus_the_entropy():
    """Eq. 1 as printed, sum_j (-IG_j / sum IG) log(sum IG / IG_j), is sum_j p_j log p_j = -H: concentrated
    attributions would get the *higher* value, against the paper's own text and App. A.1.1 (Eq. 6)."""
    assert attribution_entropy([5.0, 0.0, 10.0], "eq1-printed") == pytest.approx(-H, abs=1e-6)
    assert attribution_entropy(np.full(5, 0.2), "eq1-printed") == pytest.approx(-math.log(5), abs=1e-12)
    uniform, concentrated = np.full(4, 0.25), np.array([0.97, 0.01, 0.01, 0.01])
    assert attribution_entropy(uniform) > attribution_entropy(concentrated)
    assert attribution_entropy(uniform, "eq1-printed") < attribution_entropy(concentrated, "eq1-printed")


def test_signed_or_empty_scores_form_no_distribution():
    with pytest.raises(ValueError, match="finite and non-negative"):
        attribution_entropy([0.5, -0.2, 0.7])
    with pytest.raises(ValueError, match="every attribution score is 0"):
        normalise([0.0, 0.0])
    with pytest.raises(ValueError, match="non-empty 1-D array"):
        normalise([])
    with pytest.raises(ValueError, match="entropy reading must be one of eq6, eq1-printed"):
        attribution_entropy([1.0], "eq1")
    with pytest.raises(ValueError, match="attribution-entropy needs aggregate: l2"):
        early_features(hand_attribution(), "attribution-entropy", aggregate="dot")


def test_early_detector_input():
    """The reference GRU reads the normalised sequence, one value per time step ([n, 1]); the paper's text,
    the scalar entropy ([1]). Both float32, the dtype the detector's torch layers take."""
    sequence = early_features(hand_attribution())
    assert sequence.shape == (3, 1) and sequence.dtype == np.float32
    assert sequence[:, 0] == pytest.approx([1 / 3, 0.0, 2 / 3], abs=1e-7)
    entropy = early_features(hand_attribution(), "attribution-entropy")
    assert entropy.shape == (1,) and entropy.dtype == np.float32 and entropy[0] == pytest.approx(H, abs=1e-6)
    printed = early_features(hand_attribution(), "attribution-entropy", reading="eq1-printed")
    assert printed[0] == pytest.approx(-H, abs=1e-6)
    assert early_features(hand_attribution(), aggregate="dot")[:, 0].tolist() == [7.0, 0.0, 14.0]
    with pytest.raises(ValueError, match="early_features must be one of attribution-sequence, attribution-entropy"):
        early_features(hand_attribution(), "entropy")
