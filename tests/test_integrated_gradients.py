"""Integrated Gradients of the prompt tokens (`HFModel.attribution`, lm/integrated_gradients.py) on the tiny
random Llama: equal to captum's IntegratedGradients, complete up to a quadrature error that shrinks with
the number of nodes, independent of how the interpolation points are batched, bitwise repeatable, and
cached exactly."""

import numpy as np
import pytest

from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.base import BLACK_BOX, GRADIENTS, WHITE_BOX, IGSettings, Prompt, require
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.lm.integrated_gradients import integrated_gradients, quadrature
from adaptive_rag.methods.dior.attribution import token_scores

QUESTION = Prompt(text="Where was Idris Penhallow born?")  # the bare question, as the reference feeds it


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFModel(tiny_model_dir)


def embeddings(lm, prompt):
    import torch

    ids, _ = lm.encode(prompt)
    return ids, lm.model.get_input_embeddings()(torch.tensor([ids])).detach()


def relative(ours, reference) -> float:
    return float(np.abs(ours - reference).max() / np.abs(reference).max())


@pytest.mark.parametrize("method, steps", [("gausslegendre", 64), ("riemann_right", 4)])
def test_equals_captum_integrated_gradients(lm, method, steps):
    """captum 0.9.0 with the reference's call (forward = softmax of the last logits, target = the greedy
    token, zero baseline, internal_batch_size 4) gives the same [n, d] matrix to 1e-5 of its largest
    entry (fp32; measured: about 1e-7)."""
    import torch
    from captum.attr import IntegratedGradients

    ids, x = embeddings(lm, QUESTION)
    ours = integrated_gradients(lm.model, ids, IGSettings(steps=steps, method=method, batch=16))

    def forward(e):
        return torch.softmax(lm.model(inputs_embeds=e).logits[:, -1, :].float(), dim=-1)

    with torch.no_grad():
        assert ours.target_id == int(forward(x)[0].argmax())
    reference = IntegratedGradients(forward).attribute(x, target=ours.target_id, n_steps=steps, method=method,
                                                       internal_batch_size=4)[0].double().numpy()
    assert ours.attributions.shape == reference.shape == (len(ids), lm.model.config.hidden_size)
    assert relative(ours.attributions, reference) < 1e-5


def test_riemann_right_equals_the_earlier_one_step_at_a_time_formula(lm):
    """The project's earlier `attribution` (removed as unused): alpha = k/m for k = 1..m, the plain mean of
    the gradients, one forward + backward per step, dot product with the embedding. Written out here
    independently, with the probability target, and compared per token (`dot`)."""
    import torch

    ids, x = embeddings(lm, QUESTION)
    steps = 4
    attribution = lm.attribution(QUESTION, IGSettings(steps=steps, method="riemann_right", batch=4))
    total = torch.zeros_like(x)
    for k in range(1, steps + 1):
        scaled = (x * (k / steps)).requires_grad_(True)
        prob = torch.softmax(lm.model(inputs_embeds=scaled).logits[0, -1].float(), dim=-1)[attribution.target_id]
        (grad,) = torch.autograd.grad(prob, scaled)
        total += grad
    expected = (x * total / steps).sum(-1)[0].double().numpy()
    assert relative(attribution.dot, expected) < 1e-5


def test_gauss_legendre_nodes_and_weights():
    """Nodes (1 + xi)/2 in (0, 1), weights omega/2 summing to 1: integrates polynomials of degree
    2m - 1 exactly (here t^5 with 3 nodes); the Riemann-right rule is k/m with weights 1/m."""
    alphas, weights = quadrature("gausslegendre", 3)
    assert np.all((alphas > 0) & (alphas < 1)) and weights.sum() == pytest.approx(1.0, abs=1e-15)
    assert (weights * alphas ** 5).sum() == pytest.approx(1 / 6, abs=1e-15)
    alphas, weights = quadrature("riemann_right", 4)
    assert alphas.tolist() == [0.25, 0.5, 0.75, 1.0] and weights.tolist() == [0.25] * 4


def test_completeness_error_shrinks_with_the_number_of_nodes(lm):
    """sum_j sum_d IG_j,d = F(x) - F(0) up to the quadrature error. On this model the path has a steep
    step near alpha = 0 (RMSNorm of embeddings of norm ~0.02 against eps 1e-6: F changes between alpha
    ~1e-4 and ~1e-2), so 64 Gauss-Legendre nodes leave ~5 % (measured 4.6 %); 256 nodes 1e-5, 512 nodes
    5e-8. The right Riemann sum with as many points is further off (measured 18 % at 64): it resolves the
    step only once 1/m is well below its width."""
    def error(steps, method="gausslegendre"):
        a = lm.attribution(QUESTION, IGSettings(steps=steps, method=method, batch=64))
        change = a.value - a.baseline_value
        return abs(a.dot.sum() - change) / abs(change)

    gauss = [error(n) for n in (64, 256, 512)]
    assert gauss[0] < 0.1 and gauss[1] < 1e-4 and gauss[2] < 1e-6
    assert error(64, "riemann_right") > 2 * gauss[0]


def test_scores_tokens_target_and_values(lm):
    """The l2 scores are a distribution over every prompt token; the target is the greedy next token and
    `value` its probability at the real input, `baseline_value` at the zero input (uniform for this model:
    a zero input normalises to zero)."""
    import torch

    attribution = lm.attribution(QUESTION)
    ids, _ = lm.encode(QUESTION)
    assert attribution.token_ids == ids and "".join(attribution.tokens) == QUESTION.text
    scores = token_scores(attribution)
    assert scores.shape == (len(ids),) and np.all(scores >= 0) and scores.sum() == pytest.approx(1.0, abs=1e-12)
    with torch.no_grad():
        probs = torch.softmax(lm.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
    assert attribution.target_id == int(probs.argmax())
    assert attribution.target == lm.tokenizer.decode([attribution.target_id])
    assert attribution.value == pytest.approx(float(probs.max()), rel=1e-5)
    assert attribution.baseline_value == pytest.approx(1 / lm.model.config.vocab_size, rel=1e-5)
    assert attribution.l2.dtype == attribution.dot.dtype == np.float64


def test_batched_steps_equal_one_step_at_a_time_and_repeat_bitwise(lm):
    """The steps in chunks of 16, 5 (uneven last chunk) or all 64 at once give what one at a time gives,
    up to float32 rounding (a different matrix shape); the same settings give the same bits."""
    ids, _ = embeddings(lm, QUESTION)
    one = integrated_gradients(lm.model, ids, IGSettings(batch=1)).attributions
    for batch in (5, 16, 64):
        assert relative(integrated_gradients(lm.model, ids, IGSettings(batch=batch)).attributions, one) < 1e-5
    first = integrated_gradients(lm.model, ids, IGSettings(batch=16)).attributions
    assert np.array_equal(first, integrated_gradients(lm.model, ids, IGSettings(batch=16)).attributions)


def test_log_probability_target_is_the_probability_attribution_reweighted(lm):
    """d log F = dF / F: with the log-probability target the attributions change, the target token does not,
    and completeness holds against log F(x) - log F(0) (to the same quadrature error as above)."""
    prob = lm.attribution(QUESTION, IGSettings(steps=256, batch=64))
    logprob = lm.attribution(QUESTION, IGSettings(target="log-probability", steps=256, batch=64))
    assert logprob.target_id == prob.target_id
    assert logprob.value == pytest.approx(np.log(prob.value), rel=1e-5)
    change = logprob.value - logprob.baseline_value
    assert abs(logprob.dot.sum() - change) / abs(change) < 1e-4
    assert not np.allclose(logprob.l2 / logprob.l2.sum(), prob.l2 / prob.l2.sum(), rtol=1e-3)


def test_cached_attribution_is_exact_and_skips_the_model(lm, tmp_path):
    from adaptive_rag.lm.cache import CachedModel

    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    settings = IGSettings(steps=8, batch=4)
    first = cached.attribution(QUESTION, settings)
    calls = []
    original = lm.attribution
    lm.attribution = lambda *a: calls.append(a) or original(*a)
    try:
        again = cached.attribution(QUESTION, settings)
        other = cached.attribution(QUESTION, IGSettings(steps=8, batch=8))  # batch is part of the key
    finally:
        del lm.attribution
    assert len(calls) == 1
    assert again.tokens == first.tokens and again.target_id == first.target_id and again.value == first.value
    assert np.array_equal(again.l2, first.l2) and np.array_equal(again.dot, first.dot)
    assert np.allclose(other.l2, first.l2, rtol=1e-5)
    assert cached.stats()["attribution"] == {"hits": 1, "misses": 2}


def test_settings_are_checked_and_black_box_backends_cannot_attribute():
    with pytest.raises(ValueError, match="IG method must be one of gausslegendre, riemann_right"):
        IGSettings(method="trapezoid")
    with pytest.raises(ValueError, match="IG target must be one of probability, log-probability"):
        IGSettings(target="loglik")
    with pytest.raises(ValueError, match="IG batch must be a positive integer; got 0"):
        IGSettings(batch=0)
    assert GRADIENTS in WHITE_BOX
    with pytest.raises(ConfigError, match="needs gradients, which the api backend cannot provide"):
        require(BLACK_BOX, {GRADIENTS}, "dior", "api")


def test_bfloat16_model_runs_in_its_dtype_like_captum(tiny_model_dir):
    """A bf16 model (the reference's dtype): the path is rounded to bf16 once and the forward/backward run
    in bf16, as captum does, so the result equals captum's to 1e-5 (measured 9e-8; bf16 against fp32
    differs by 7e-3)."""
    import torch
    from captum.attr import IntegratedGradients

    lm = HFModel(tiny_model_dir, dtype="bfloat16")
    ids, x = embeddings(lm, QUESTION)
    assert x.dtype == torch.bfloat16
    ours = integrated_gradients(lm.model, ids, IGSettings(batch=4))

    def forward(e):
        return torch.softmax(lm.model(inputs_embeds=e).logits[:, -1, :].float(), dim=-1)

    reference = IntegratedGradients(forward).attribute(x, target=ours.target_id, n_steps=64,
                                                       internal_batch_size=4)[0].double().numpy()
    assert relative(ours.attributions, reference) < 1e-5


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu(tiny_model_dir, lm):
    cuda = HFModel(tiny_model_dir, device="cuda")
    ids, _ = embeddings(lm, QUESTION)
    on_gpu = integrated_gradients(cuda.model, ids, IGSettings())
    on_cpu = integrated_gradients(lm.model, ids, IGSettings())
    assert on_gpu.target_id == on_cpu.target_id and relative(on_gpu.attributions, on_cpu.attributions) < 1e-4
    assert np.array_equal(on_gpu.attributions, integrated_gradients(cuda.model, ids, IGSettings()).attributions)
