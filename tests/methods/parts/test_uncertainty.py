"""SeaKR's uncertainty estimators, checked against the paper (Yao et al. 2024; it numbers no equations):
§3.4 "the determinant of the regularized Gram matrix" of the k EOS states (EigenScore, with INSIDE's
(1/k) log det(Σ + αI)), and §5.1's Table 3 alternatives (perplexity, multi-perplexity, LN-entropy,
energy, prompting). Spec `docs/methods/seakr.md` §5 items 1, 2 and 8 give the values: every expected
number is hand-computed in a comment and recomputed here with math/numpy, never with the function under
test; plus the empty-input conventions (inf = most uncertain; EigenScore with k = 0 raises) and AUROC."""

from __future__ import annotations

import math
import subprocess
import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.methods.parts.uncertainty import (ESTIMATORS, SUFFICIENCY_CHOICES, SUFFICIENCY_QUESTION, auroc,
                                                     eigenscore, energy, gram, ln_entropy, logsumexp,
                                                     multi_perplexity, perplexity, prompting)

ALPHA = 1e-3
LN_ALPHA = math.log(ALPHA)  # -6.907755


def reference_gram(z: np.ndarray) -> np.ndarray:
    """Σ = Z J_d Zᵀ with the centring matrix written out, as INSIDE / the reference code build it."""
    z = np.asarray(z, dtype=np.float64)
    d = z.shape[1]
    j_d = np.eye(d) - np.ones((d, d)) / d
    return z @ j_d @ z.T


# --- §5 item 1: EigenScore by hand -------------------------------------------------------------------

def test_eigenscore_identical_rows_case_a():
    # z = [1,2,3,4] x 3: centred row [-1.5,-.5,.5,1.5], |c|^2 = 5, Σ = 5·1₃₃, eigenvalues 15, 0, 0
    z = np.tile([1.0, 2.0, 3.0, 4.0], (3, 1))
    assert np.allclose(gram(z), np.full((3, 3), 5.0), atol=1e-12)
    # U = (ln 15.001 + 2 ln 0.001) / 3 = (2.708117 - 13.815511) / 3 = -3.702465
    expected = (math.log(15.001) + 2 * math.log(0.001)) / 3
    assert expected == pytest.approx(-3.702465, abs=1e-6)
    assert eigenscore(gram(z), ALPHA) == pytest.approx(expected, abs=1e-9)


def test_eigenscore_orthogonal_rows_case_b():
    # rows [1,-1,0,0], [0,0,1,-1] have mean 0, norms² 2, dot 0: Σ = 2·I₂, U = ln 2.001 = 0.693647
    z = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]])
    assert np.allclose(gram(z), 2 * np.eye(2), atol=1e-12)
    expected = math.log(2.001)
    assert expected == pytest.approx(0.693647, abs=1e-6)
    assert eigenscore(gram(z), ALPHA) == pytest.approx(expected, abs=1e-9)


def test_eigenscore_is_shift_invariant_per_row_case_c():
    # [1,2,3] and [11,12,13] both centre to [-1,0,1]: Σ = [[2,2],[2,2]], eigenvalues 4, 0
    z = np.array([[1.0, 2.0, 3.0], [11.0, 12.0, 13.0]])
    assert np.allclose(gram(z), [[2.0, 2.0], [2.0, 2.0]], atol=1e-12)
    # U = (ln 4.001 + ln 0.001) / 2 = (1.386544 - 6.907755) / 2 = -2.760605
    expected = (math.log(4.001) + math.log(0.001)) / 2
    assert expected == pytest.approx(-2.760605, abs=1e-6)
    assert eigenscore(gram(z), ALPHA) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("k", [1, 3, 20])
def test_eigenscore_all_zero_states_is_the_floor_ln_alpha_case_d(k):
    # Σ = 0 -> every eigenvalue of Σ + αI is α -> U = ln α = -6.907755 whatever k
    assert LN_ALPHA == pytest.approx(-6.907755, abs=1e-6)
    assert eigenscore(gram(np.zeros((k, 8))), ALPHA) == pytest.approx(LN_ALPHA, abs=1e-12)


def test_eigenscore_single_sample():
    # k = 1: Σ = |c|² = 5 for z = [1,2,3,4] -> U = ln 5.001 = 1.609638
    assert eigenscore(gram(np.array([[1.0, 2.0, 3.0, 4.0]])), ALPHA) == pytest.approx(math.log(5.001), abs=1e-9)


def test_eigenscore_random_states_match_eigvalsh_and_slogdet_case_e():
    z = np.random.default_rng(0).standard_normal((6, 16))
    sigma = reference_gram(z)
    assert np.allclose(gram(z), sigma, atol=1e-12)
    shifted = sigma + ALPHA * np.eye(6)
    by_eig = float(np.mean(np.log(np.linalg.eigvalsh(shifted))))
    sign, logdet = np.linalg.slogdet(shifted)
    assert sign == 1.0
    assert by_eig == pytest.approx(logdet / 6, abs=1e-10)
    assert eigenscore(gram(z), ALPHA) == pytest.approx(by_eig, abs=1e-10)
    assert eigenscore(gram(z), ALPHA) == pytest.approx(logdet / 6, abs=1e-10)


def test_eigenscore_alpha_is_the_default_1e3():
    z = np.random.default_rng(1).standard_normal((4, 10))
    assert eigenscore(gram(z)) == eigenscore(gram(z), 1e-3)


# --- §5 item 2: the stored Gram serves every subset ---------------------------------------------------

def test_gram_of_a_subset_is_the_principal_sub_matrix():
    z = np.random.default_rng(2).standard_normal((8, 32))
    keep = [0, 2, 3, 7]
    assert np.allclose(gram(z[keep]), gram(z)[np.ix_(keep, keep)], atol=1e-12)
    assert np.allclose(gram(z[keep]), reference_gram(z[keep]), atol=1e-12)


def test_dropping_empty_samples_through_the_stored_gram_equals_recomputing_from_states():
    z = np.random.default_rng(3).standard_normal((6, 24))
    texts = ["Paris", "", "Lyon", "   ", "Paris", "Nice"]
    keep = [i for i, t in enumerate(texts) if t.strip()]  # [0, 2, 4, 5]
    stored = gram(z)
    assert eigenscore(stored, ALPHA, keep=keep) == pytest.approx(eigenscore(gram(z[keep]), ALPHA), abs=1e-12)
    # and independently: mean log eigenvalue of the explicitly built sub-Gram
    sub = reference_gram(z[keep]) + ALPHA * np.eye(len(keep))
    assert eigenscore(stored, ALPHA, keep=keep) == pytest.approx(np.mean(np.log(np.linalg.eigvalsh(sub))), abs=1e-10)


def test_k_prefix_through_the_stored_gram():
    z = np.random.default_rng(4).standard_normal((20, 40))
    stored = gram(z)
    for k in (2, 10, 15, 20):
        sub = reference_gram(z[:k]) + ALPHA * np.eye(k)
        expected = np.linalg.slogdet(sub)[1] / k
        assert eigenscore(stored, ALPHA, keep=range(k)) == pytest.approx(expected, abs=1e-10)
    assert eigenscore(stored, ALPHA, keep=range(20)) == pytest.approx(eigenscore(stored, ALPHA), abs=1e-12)


# --- dtype: Σ is built in float64 from float32 states -------------------------------------------------

def test_float32_states_give_the_float64_result():
    z64 = np.random.default_rng(5).standard_normal((20, 64)) * 3 + 5
    z32 = z64.astype(np.float32)
    assert gram(z32).dtype == np.float64
    # the same numbers as float64: identical Σ and U
    assert eigenscore(gram(z32), ALPHA) == pytest.approx(eigenscore(gram(z32.astype(np.float64)), ALPHA), abs=1e-12)
    # against the original float64 states (float32 rounding of the inputs only), and the explicit formula
    expected = np.linalg.slogdet(reference_gram(z64) + ALPHA * np.eye(20))[1] / 20
    assert eigenscore(gram(z32), ALPHA) == pytest.approx(expected, abs=1e-6)


def test_float32_identical_states_stay_on_the_hand_value():
    # 20 identical float32 rows of width 4096 with a large offset: Σ = |c|²·1·1ᵀ, eigenvalues 20|c|², 0 x 19
    # -> U = (ln(20|c|² + α) + 19 ln α) / 20, |c|² recomputed in float64 from the float32 values
    row = (np.random.default_rng(6).standard_normal(4096) * 2 + 10).astype(np.float32)
    z32 = np.tile(row, (20, 1))
    r = row.astype(np.float64)
    c2 = float(np.sum((r - r.mean()) ** 2))
    expected = (math.log(20 * c2 + ALPHA) + 19 * LN_ALPHA) / 20
    assert eigenscore(gram(z32), ALPHA) == pytest.approx(expected, abs=1e-6)


def test_float32_near_identical_states_near_the_threshold():
    # 20 nearly agreeing float32 samples (offset 10, spread 1e-3): U ≈ -5.34, right in the δ = -6 working
    # range, where Σ's small eigenvalues are of the order of α. Building Σ in float32 (the reference
    # code's route) moved U by 0.03-0.04 on this input when measured; the float64 Gram must match the
    # float64 formula with the centring matrix written out.
    rng = np.random.default_rng(0)
    row = rng.standard_normal(1024) * 2 + 10
    z32 = (row + 1e-3 * rng.standard_normal((20, 1024))).astype(np.float32)
    expected = np.linalg.slogdet(reference_gram(z32.astype(np.float64)) + ALPHA * np.eye(20))[1] / 20
    assert expected == pytest.approx(-5.3367, abs=1e-3)
    assert eigenscore(gram(z32), ALPHA) == pytest.approx(expected, abs=1e-6)


# --- EigenScore input checks and the k = 0 decision ---------------------------------------------------

def test_eigenscore_with_nothing_kept_raises():
    stored = gram(np.random.default_rng(7).standard_normal((3, 5)))
    with pytest.raises(ValueError, match="no sample kept"):
        eigenscore(stored, ALPHA, keep=[])
    empty = gram(np.zeros((0, 5)))
    assert empty.shape == (0, 0)
    with pytest.raises(ValueError, match="no sample kept"):
        eigenscore(empty, ALPHA)


def test_eigenscore_rejects_bad_input():
    stored = gram(np.random.default_rng(8).standard_normal((3, 5)))
    with pytest.raises(ValueError, match="alpha"):
        eigenscore(stored, 0.0)
    with pytest.raises(ValueError, match="square"):
        eigenscore(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="integer"):
        eigenscore(stored, ALPHA, keep=[True, False, True])
    with pytest.raises(ValueError, match="non-finite"):
        eigenscore(np.array([[np.nan]]))
    with pytest.raises(ValueError, match=r"\[k, d\]"):
        gram(np.zeros(4))


# --- §5 item 8: the output-level estimators -----------------------------------------------------------

def test_perplexity_drops_the_eos_token():
    # drop the last (EOS-overwritten, logprob 0) token: mean of [-1,-1,-1] = -1 -> e¹ = 2.718282
    assert math.e == pytest.approx(2.718282, abs=1e-6)
    assert perplexity([-1.0, -1.0, -1.0, 0.0], drop_last=True) == pytest.approx(math.e, abs=1e-12)
    # kept: mean of [-1,-1,-1,0] = -0.75 -> e^0.75 = 2.117000
    assert perplexity([-1.0, -1.0, -1.0, 0.0]) == pytest.approx(math.exp(0.75), abs=1e-12)


def test_ln_entropy_by_hand():
    # sample 1: -(−1 −1)/2 = 1, sample 2: -(−4)/1 = 4 -> (1 + 4)/2 = 2.5
    assert ln_entropy([[-1.0, -1.0], [-4.0]]) == pytest.approx((1 + 4) / 2, abs=1e-12)
    # an empty sample has no per-token average and is skipped
    assert ln_entropy([[-1.0, -1.0], [], [-4.0]]) == pytest.approx(2.5, abs=1e-12)
    # drop_last: [-1,-1,0] -> [-1,-1], [-4,0] -> [-4], [0] -> nothing (skipped)
    assert ln_entropy([[-1.0, -1.0, 0.0], [-4.0, 0.0], [0.0]], drop_last=True) == pytest.approx(2.5, abs=1e-12)


def test_multi_perplexity_by_hand():
    # per-sample perplexities e¹ and e⁴ -> (2.718282 + 54.598150)/2 = 28.658216
    expected = (math.exp(1) + math.exp(4)) / 2
    assert expected == pytest.approx(28.658, abs=1e-3)
    assert multi_perplexity([[-1.0, -1.0], [-4.0]]) == pytest.approx(expected, abs=1e-9)
    assert multi_perplexity([[-1.0, -1.0], [], [-4.0]]) == pytest.approx(expected, abs=1e-9)
    # the reference code's per-sample perplexity drops the EOS token and skips samples with <= 1 token
    assert multi_perplexity([[-1.0, -1.0, 0.0], [-4.0, 0.0], [-9.0]], drop_last=True) == pytest.approx(expected, abs=1e-9)


def test_logsumexp_and_energy_by_hand():
    # logsumexp([0, 0]) = ln(1 + 1) = ln 2 at each of 3 steps -> U = −ln 2 = −0.693147
    lse = logsumexp(np.zeros((3, 2)))
    assert np.allclose(lse, [math.log(2)] * 3, atol=1e-12)
    assert energy(lse) == pytest.approx(-math.log(2), abs=1e-12)
    assert -math.log(2) == pytest.approx(-0.693147, abs=1e-6)
    # logits [1, 2, 3]: ln(e + e² + e³) = 3.407606; a 1-D input gives a float
    assert logsumexp([1.0, 2.0, 3.0]) == pytest.approx(math.log(math.e + math.e ** 2 + math.e ** 3), abs=1e-12)
    # stable for large logits: [1000, 1000] -> 1000 + ln 2 (exp(1000) overflows)
    assert logsumexp([1000.0, 1000.0]) == pytest.approx(1000 + math.log(2), abs=1e-9)
    # mixed steps: −mean(ln 2, 3.407606)
    mixed = [math.log(2), math.log(math.e + math.e ** 2 + math.e ** 3)]
    assert energy(mixed) == pytest.approx(-(mixed[0] + mixed[1]) / 2, abs=1e-12)


def test_prompting_sign_higher_is_more_uncertain():
    # p(No) = .8, p(Yes) = .2 -> ln .8 − ln .2 = ln 4 = 1.386294 (doubting: positive)
    assert prompting(math.log(0.8), math.log(0.2)) == pytest.approx(math.log(4), abs=1e-12)
    assert prompting(math.log(0.2), math.log(0.8)) == pytest.approx(-math.log(4), abs=1e-12)
    assert prompting(math.log(0.8), math.log(0.2)) > prompting(math.log(0.2), math.log(0.8))
    assert prompting(-math.inf, math.log(0.5)) == -math.inf  # sure "Yes": least uncertain
    with pytest.raises(ValueError, match="NaN"):
        prompting(math.nan, 0.0)


def test_constants():
    assert ESTIMATORS == ("eigenscore", "perplexity", "multi-perplexity", "ln-entropy", "energy", "prompting")
    assert SUFFICIENCY_QUESTION == "Do I have sufficient knowledge to solve the question?"
    assert SUFFICIENCY_CHOICES == (" Yes", " No")


def test_empty_inputs_are_most_uncertain():
    # nothing to measure -> inf, so `U > delta` retrieves and sorting stays well defined
    assert perplexity([]) == math.inf
    assert perplexity([-0.5], drop_last=True) == math.inf
    assert multi_perplexity([]) == math.inf
    assert multi_perplexity([[], []]) == math.inf
    assert multi_perplexity([[-1.0]], drop_last=True) == math.inf
    assert ln_entropy([]) == math.inf
    assert ln_entropy([[], []]) == math.inf
    assert energy([]) == math.inf
    assert prompting(-math.inf, -math.inf) == math.inf
    assert perplexity([]) > 1e300 and not math.isnan(energy([]))


# --- AUROC ---------------------------------------------------------------------------------------------

def pairwise_auroc(scores, labels) -> float:
    """P(score_pos > score_neg) + ½·P(tie), by enumerating every (positive, negative) pair."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auroc_by_hand_with_a_tie():
    scores = [0.1, 0.4, 0.35, 0.8, 0.4]
    labels = [False, True, False, True, False]
    # positives .4, .8; negatives .1, .35, .4: pairs (.4>.1) 1, (.4>.35) 1, (.4=.4) ½, (.8 > all) 3
    # -> 5.5 / 6 = 0.916667
    assert pairwise_auroc(scores, labels) == pytest.approx(5.5 / 6, abs=1e-12)
    assert auroc(scores, labels) == pytest.approx(5.5 / 6, abs=1e-12)


def test_auroc_extremes_and_random_against_pairs():
    assert auroc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0
    assert auroc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0
    assert auroc([7, 7, 7, 7], [0, 1, 0, 1]) == 0.5
    assert auroc([-math.inf, math.inf], [False, True]) == 1.0  # inf (empty-input) scores are ordinary values
    rng = np.random.default_rng(9)
    scores = np.round(rng.standard_normal(60), 1)  # rounding makes ties
    labels = rng.random(60) < 0.4
    assert auroc(scores, labels) == pytest.approx(pairwise_auroc(scores.tolist(), labels.tolist()), abs=1e-12)


def test_auroc_one_class_absent_is_nan_and_bad_input_raises():
    assert math.isnan(auroc([0.1, 0.2], [True, True]))
    assert math.isnan(auroc([0.1, 0.2], [False, False]))
    assert math.isnan(auroc([], []))
    with pytest.raises(ValueError, match="labels"):
        auroc([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="NaN"):
        auroc([math.nan, 0.2], [True, False])


@pytest.mark.slow  # a fresh interpreter: the module must stay import-light
def test_module_imports_no_heavy_library():
    code = ("import sys, adaptive_rag.methods.parts.uncertainty; "
            "print(sorted(m for m in ('torch', 'transformers', 'scipy', 'sklearn', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
