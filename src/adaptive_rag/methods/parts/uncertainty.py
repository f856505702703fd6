"""SeaKR's uncertainty estimators (Yao et al. 2024, §3.4 and the §5.1 / Table 3 ablation): EigenScore,
perplexity, multi-perplexity, length-normalised entropy, energy and forced-choice prompting, plus the
AUROC used to check whether an estimator predicts wrong answers (hyper-parameter sweep, Fig. 3).

Every estimator is oriented the same way: **higher = more uncertain**, so a method retrieves when
`U > delta` whatever the estimator (each estimator still needs its own delta; U's scale differs).
Inputs are plain numbers (log-probs, per-token logsumexps, Gram matrices) that the engine supplies;
nothing here touches a model, and the module imports numpy only so it can be used in light processes.

Empty inputs: an estimator that has nothing to measure returns `inf` ("most uncertain"), because an
empty generation is itself evidence of trouble (SeaKR retrieves on an empty greedy step) and `inf`
keeps `U > delta`, `max` and sorting well defined, where `nan` would silently compare False and read as
"confident". The exception is `eigenscore` with no kept sample, which raises: the regularised log-det
of an empty matrix is 0, a meaningless "moderately uncertain" value, and the caller has to decide
(the reference code simply stores no score then).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...lm.base import gram  # noqa: F401  (the engine stores Grams; estimators read them)

ESTIMATORS = ("eigenscore", "perplexity", "multi-perplexity", "ln-entropy", "energy", "prompting")

SUFFICIENCY_QUESTION = "Do I have sufficient knowledge to solve the question?"
SUFFICIENCY_CHOICES = (" Yes", " No")

DEFAULT_ALPHA = 1e-3


def eigenscore(g: np.ndarray, alpha: float = DEFAULT_ALPHA, keep: Sequence[int] | None = None) -> float:
    """INSIDE's EigenScore U = (1/k)·log det(Σ + αI_k) on the samples `keep` (all when None).

    Why: k continuations whose internal states agree span a low-dimensional subspace, so most
    eigenvalues of Σ are ~0 and U sits near its floor ln α (−6.908 for α = 1e-3); diverse states spread
    the spectrum and raise U, which is SeaKR's "self-aware uncertainty". It is computed as the mean of
    log(max(λ, 0) + α) over the eigenvalues λ of the symmetric Σ (eigvalsh, float64): Σ is positive
    semi-definite by construction, so negative λ are rounding noise and clipping them keeps the log
    finite where a direct determinant of the near-singular matrix would under/overflow. `keep` selects
    a principal sub-matrix (drop empty samples, take a k-prefix for the k sweep), which is exactly the
    Gram of that subset (see `gram`). Nothing kept (k = 0) raises ValueError rather than returning a
    number: log det of a 0×0 matrix is 0, which would read as a plausible score, and the caller must
    decide what an all-empty sample set means (SeaKR's loop treats it as "retrieve").
    """
    if not alpha > 0:
        raise ValueError(f"eigenscore: alpha must be > 0 (got {alpha!r}); log det(Σ + αI) is -inf otherwise")
    sigma = np.asarray(g, dtype=np.float64)
    if sigma.ndim != 2 or sigma.shape[0] != sigma.shape[1]:
        raise ValueError(f"eigenscore: expected a square Gram matrix, got shape {sigma.shape}")
    if keep is not None:
        idx = np.asarray(list(keep))
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"eigenscore: keep must hold integer sample indices, got dtype {idx.dtype}")
        idx = idx.astype(np.intp)
        sigma = sigma[np.ix_(idx, idx)]
    k = sigma.shape[0]
    if k == 0:
        raise ValueError("eigenscore: no sample kept (k = 0); an empty sample set has no EigenScore, "
                         "the caller must decide (e.g. treat it as maximally uncertain)")
    if not np.all(np.isfinite(sigma)):
        raise ValueError("eigenscore: the Gram matrix holds non-finite values")
    eig = np.linalg.eigvalsh((sigma + sigma.T) / 2)
    return float(np.mean(np.log(np.clip(eig, 0.0, None) + alpha)))


def _token_logprobs(logprobs, drop_last: bool) -> np.ndarray:
    lp = np.asarray(logprobs, dtype=np.float64).reshape(-1)
    return lp[:-1] if drop_last else lp


def perplexity(logprobs: Sequence[float], drop_last: bool = False) -> float:
    """Perplexity exp(−mean log p) of one generation (Table 3 "Perplexity": the greedy pseudo-generation).

    Why: the cheapest output-level uncertainty, FLARE/DRAGIN-style, that SeaKR's ablation compares the
    internal-state estimator against. `drop_last` reproduces the reference code, which drops the last
    token because its stop checker overwrote it with EOS (log-prob set to 0), which would otherwise bias
    the mean toward confidence. No token left (empty generation, or one token with `drop_last`) returns
    `inf`: no evidence of confidence is treated as most uncertain, which keeps `U > delta` and ordering
    safe (`nan` would compare False and read as confident; the reference code falls back to 1e3 there).
    """
    lp = _token_logprobs(logprobs, drop_last)
    if lp.size == 0:
        return math.inf
    with np.errstate(over="ignore"):
        return float(np.exp(-lp.mean()))


def multi_perplexity(samples: Sequence[Sequence[float]], drop_last: bool = False) -> float:
    """Mean of the per-sample perplexities over the k samples (Table 3 "Multi-Perplexity").

    Why: averaging perplexity over k = 20 sampled continuations measures how surprised the model is by
    its own samples, not just by its greedy path. This is what the reference code stores under the key
    `ln_entropy` (its per-sample perplexities drop the EOS-overwritten last token: `drop_last=True`).
    Samples with no token left are skipped, as the reference code skips them; none left returns `inf`
    (most uncertain, see `perplexity`).
    """
    values = [perplexity(s, drop_last) for s in samples if _token_logprobs(s, drop_last).size]
    return float(np.mean(values)) if values else math.inf


def ln_entropy(samples: Sequence[Sequence[float]], drop_last: bool = False) -> float:
    """Length-normalised predictive entropy −(1/K) Σ_k (1/|s_k|) Σ_t log p(s_k,t) (Malinin & Gales 2020).

    Why: a Monte-Carlo estimate of the sequence-level entropy from K samples, with each sample's
    log-likelihood divided by its length so long continuations are not counted as more uncertain just
    for being long; it is the Table 3 "LN-Entropy" row, which the reference code never computes (its
    `ln_entropy` key is multi-perplexity). Samples with no token are skipped (a 0-length sample has no
    per-token average); none left returns `inf` (most uncertain, see `perplexity`).
    """
    means = [float(-lp.mean()) for lp in (_token_logprobs(s, drop_last) for s in samples) if lp.size]
    return float(np.mean(means)) if means else math.inf


def logsumexp(logits) -> np.ndarray | float:
    """Stable logsumexp over the last axis of raw logits (one value per generation step), in float64.

    Why: the energy score needs logsumexp of the raw logits at each greedy step; an engine that returns
    logits rather than the reduced values can reduce them here without torch or scipy. Shifting by the
    row maximum avoids overflow of exp on logits of order 1e2.
    """
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):  # an all -inf row gives log 0 = -inf, which is right
        out = np.log(np.sum(np.exp(x - m), axis=-1)) + m[..., 0]
    return float(out) if out.ndim == 0 else out


def energy(logsumexps: Sequence[float]) -> float:
    """Energy uncertainty U = mean over greedy tokens of E = −logsumexp(f) (Liu et al. 2020, T = 1).

    Why: the energy −T·logsumexp(f/T) of the raw logits is lower for in-distribution inputs, so a high
    (less negative) energy flags an input the model is unsure about; it is the Table 3 "Energy" row.
    The reference code stores +mean logsumexp, i.e. the opposite sign; we keep Liu et al.'s sign so
    that, like every estimator here, higher = more uncertain. Input is the per-token logsumexp the
    engine supplies (see `logsumexp`); no token returns `inf` (most uncertain, see `perplexity`).
    """
    lse = np.asarray(logsumexps, dtype=np.float64).reshape(-1)
    if lse.size == 0:
        return math.inf
    return float(-lse.mean())


def prompting(logp_no: float, logp_yes: float) -> float:
    """Forced-choice self-report U = log p(" No") − log p(" Yes") to `SUFFICIENCY_QUESTION`.

    Why: Table 3's "Prompting" row asks the model whether it has sufficient knowledge and reads the
    answer; scoring both fixed continuations (`SUFFICIENCY_CHOICES`) instead of parsing free text gives
    a continuous, threshold-able score with no parsing failures, and the log-odds of "No" over "Yes"
    rises as the model doubts itself (higher = more uncertain). If both choices have probability 0
    (−inf − −inf) the model gave no verdict and `inf` (most uncertain) is returned; a NaN input raises.
    """
    no, yes = float(logp_no), float(logp_yes)
    if math.isnan(no) or math.isnan(yes):
        raise ValueError(f"prompting: NaN log-probability (no={no}, yes={yes})")
    if no == yes == -math.inf:
        return math.inf
    return no - yes


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of `scores` predicting `labels` True (ties count half); nan if a class is absent.

    Why: the hyper-parameter sweep asks whether U separates questions the model gets wrong (label True)
    from those it gets right, independently of any threshold; AUROC is exactly P(U_wrong > U_right) +
    ½·P(tie), computed here through mid-ranks (Mann-Whitney U) in O(n log n) so that neither sklearn nor
    scipy is needed. With only one class there is no pair to compare, so the value is undefined: nan,
    which a plot shows as a gap rather than as a misleading 0.5.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=bool).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"auroc: {s.size} scores but {y.size} labels")
    if np.isnan(s).any():
        raise ValueError("auroc: NaN score")
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mid_ranks = ends - (counts - 1) / 2.0  # 1-based mid-rank of each distinct value
    ranks = mid_ranks[inverse.reshape(-1)]
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))
