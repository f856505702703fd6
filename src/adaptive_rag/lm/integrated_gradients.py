"""Integrated Gradients (Sundararajan et al. 2017) of a causal LM's input tokens for the probability of
its own next token: the input of DioR's early detector (Guo et al. 2025, §3.1.1 and App. A.1; the
released code's `IntegratedGradientsAnalyzer.get_ig`, which is Snyder et al. 2024's routine).

What the reference computes, and so what this computes (docs/attribution.md has the formulas):
- the path runs in embedding space, from the zero baseline x' = 0 (captum's default) to the prompt's
  token embeddings x [n, d], every token's embedding scaled by the same alpha;
- the target is F(e) = softmax(logits at the last position)[t], with t the argmax of the next-token
  distribution at the real input (the answer's first token), fixed along the path;
- IG_j,d = (x - x')_j,d * sum_k w_k dF/de_j,d at e = x' + alpha_k (x - x'), with 64 Gauss-Legendre nodes
  (captum's default `method="gausslegendre"`): alpha_k = (1 + xi_k) / 2, w_k = omega_k / 2 for the
  Legendre nodes xi_k and weights omega_k on [-1, 1]. `riemann_right` (alpha_k = k/m, w_k = 1/m) is the
  project's earlier rule, kept for comparison.

Why it is built this way:
- The interpolation points are independent, so `batch` of them go through the model as rows of one
  forward + backward (all rows have the same length: no padding, no mask); `batch=1` is the
  one-step-at-a-time path, the same code, so the two differ only in the matrix shapes.
- Only the last position's logits are computed (`logits_to_keep=1`): the target reads nothing else, and
  the vocabulary projection of every position would be most of the work for a short question.
- Gradients are taken w.r.t. the interpolated embeddings only (`torch.autograd.grad`), so no weight
  gradient is computed or stored and the model's parameters are untouched.
- dtype: the interpolated embeddings and the forward/backward run in the model's dtype (as captum
  does for a bf16 model); the logits are cast to float32 before the softmax (the reference softmaxes in
  the model dtype; the same for a float32 model); gradients are weighted and summed in float64, and the
  attributions are float64.
- Deterministic: no sampling, no dropout (eval mode), a fixed order of chunks; on the CPU two runs are
  bitwise equal (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .base import IGSettings


@dataclass
class Integrated:
    """The full attribution matrix of one prompt, with what completeness is checked against."""

    attributions: np.ndarray  # [n, d] float64
    target_id: int
    value: float  # F(x)
    baseline_value: float  # F(0)


def per_token(attributions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(L2 norm, sum) over the embedding dimension of each token's row of an [n, d] attribution matrix,
    float64: the two reductions `Attribution` keeps (the reference reads the norm)."""
    matrix = np.asarray(attributions, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"attributions must be an [n tokens, d] matrix; got shape {matrix.shape}")
    return np.linalg.norm(matrix, axis=1), matrix.sum(axis=1)


def quadrature(method: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(alphas, weights) in float64 of the rule that approximates the integral over alpha in [0, 1]."""
    if steps < 1:
        raise ValueError(f"IG steps must be at least 1; got {steps}")
    if method == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(steps)
        return (1.0 + nodes) / 2.0, weights / 2.0
    if method == "riemann_right":
        return np.arange(1, steps + 1, dtype=np.float64) / steps, np.full(steps, 1.0 / steps)
    raise ValueError(f"unknown IG method {method!r}")


def _target(logits, kind: str):
    """F over a [rows, vocab] float32 logit matrix, for every vocabulary entry."""
    import torch

    return torch.softmax(logits, dim=-1) if kind == "probability" else torch.log_softmax(logits, dim=-1)


def last_logits(model, embeddings):
    """Float32 next-token logits [rows, vocab] after `embeddings` [rows, n, d]."""
    out = model(inputs_embeds=embeddings, use_cache=False, logits_to_keep=1)
    return out.logits[:, -1, :].float()


def integrated_gradients(model, input_ids: Sequence[int], settings: IGSettings, forward=None) -> Integrated:
    """IG of every token of `input_ids` for the model's greedy next token (see the module docstring).
    `forward(embeddings) -> [rows, vocab] float32 logits` replaces the model's own forward (the fast
    attention path passes its batched pass, `FastDecoder.last_logits`)."""
    import torch

    logits_of = forward or (lambda embeddings: last_logits(model, embeddings))
    if not input_ids:
        raise ValueError("integrated_gradients needs at least one input token")
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
    with torch.no_grad():
        x = model.get_input_embeddings()(ids)[0].detach()  # [n, d], model dtype
        logits = logits_of(x[None])[0]
        target_id = int(logits.argmax())
        value = float(_target(logits[None], settings.target)[0, target_id])
        baseline = torch.zeros_like(x)
        baseline_value = float(_target(logits_of(baseline[None]), settings.target)[0, target_id])
    alphas, weights = quadrature(settings.method, settings.steps)
    alphas = torch.tensor(alphas, dtype=torch.float32, device=device)
    weights = torch.tensor(weights, dtype=torch.float64, device=device)
    path = x.float() - baseline.float()
    total = torch.zeros(x.shape, dtype=torch.float64, device=device)
    with torch.enable_grad():
        for start in range(0, settings.steps, settings.batch):
            stop = min(start + settings.batch, settings.steps)
            # baseline + alpha * (x - baseline), rounded once to the model dtype (captum's interpolation)
            points = (baseline.float()[None] + alphas[start:stop, None, None] * path[None]).to(x.dtype)
            points.requires_grad_(True)
            out = _target(logits_of(points), settings.target)[:, target_id]
            (grads,) = torch.autograd.grad(out.sum(), points)  # rows are independent: d(sum)/d(row) = dF/d(row)
            total += (grads.double() * weights[start:stop, None, None]).sum(dim=0)
    attributions = (x.double() - baseline.double()) * total
    return Integrated(attributions.cpu().numpy(), target_id, value, baseline_value)
