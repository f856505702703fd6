"""Batched sampling with SeaKR's extras, on the tiny random Llama: the final-EOS state equals a plain
forward with a hook, sampling does not depend on batching, Grams are exact, and the cache keeps it."""

import numpy as np
import pytest

from adaptive_rag.lm.base import NO_EXTRAS, Extras, SampleSet, SamplingParams, gram
from adaptive_rag.lm.cache import CachedModel
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.prompts.fewshot import Exemplar, build_prompt

EXEMPLARS = [Exemplar("Who founded Velmora Glassworks?", "Idris Penhallow founded it.", "Idris Penhallow")] * 2
PROMPTS = [build_prompt("raw", EXEMPLARS, q) for q in ("Where was Idris Penhallow born?",
                                                        "Which river flows through Carrowmere, and why?")]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFModel(tiny_model_dir, batch_size=4)


def plain_forward(lm, ids, layer):
    """The last position's MLP output (hook) and residual stream of one unbatched forward."""
    import torch

    seen = {}
    block = lm.model.model.layers[layer - 1].mlp
    handle = block.register_forward_hook(lambda m, a, out: seen.__setitem__("mlp", out[0, -1].float()))
    try:
        with torch.inference_mode():
            out = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    finally:
        handle.remove()
    return seen["mlp"].numpy(), out.hidden_states[layer][0, -1].float().numpy()


def generated_until_stop(lm, free_ids, stop):
    """The engine's rule, restated: generation ends at the first token whose text completes a stop."""
    for n in range(1, len(free_ids) + 1):
        if stop in lm.tokenizer.decode(free_ids[:n], skip_special_tokens=True):
            return free_ids[:n]
    return free_ids


@pytest.mark.parametrize("source", ["mlp", "residual"])
def test_final_state_is_the_state_at_an_eos_fed_in_place_of_the_last_token(lm, source):
    params = SamplingParams(n=3, seed=5)
    extras = Extras(final_layers=(1, 2), final_source=source)
    prompt_ids, _ = lm.encode(PROMPTS[0])
    free = lm.sample(PROMPTS[0], params, 6)
    stop = free[0].tokens[2].strip() or free[0].tokens[3]
    for stops, reference in (((), free), ((stop,), None)):
        samples = lm.sample(PROMPTS[0], params, 6, stops, extras)
        for j, c in enumerate(samples):
            assert c.final_hidden.shape == (2, lm.model.config.hidden_size)
            generated = free[j].token_ids if not stops else generated_until_stop(lm, free[j].token_ids, stop)
            assert c.finish_reason in ("length", "stop")
            ids = prompt_ids + generated[:-1] + [lm.final_eos_id]  # the last token replaced by EOS
            for index, layer in enumerate((1, 2)):
                mlp, residual = plain_forward(lm, ids, layer)
                expected = mlp if source == "mlp" else residual
                assert np.allclose(c.final_hidden[index], expected, atol=1e-4)


def test_an_eos_the_model_chose_is_fed_as_it_is_after_the_text(lm):
    params = SamplingParams(n=2, seed=3, temperature=1e-6)  # argmax: every row takes the same tokens
    (greedy,) = lm.generate([PROMPTS[1]], 4)
    saved = lm.eos_ids
    lm.eos_ids = {greedy.token_ids[2]}  # make the model's third token its end of sequence
    try:
        samples = lm.sample(PROMPTS[1], params, 6, (), Extras(final_layers=(2,)))
    finally:
        lm.eos_ids = saved
    prompt_ids, _ = lm.encode(PROMPTS[1])
    ids = prompt_ids + greedy.token_ids[:2] + [greedy.token_ids[2]]
    mlp, _ = plain_forward(lm, ids, 2)
    for c in samples:
        assert c.finish_reason == "eos" and c.token_ids == greedy.token_ids[:2]
        assert np.allclose(c.final_hidden[0], mlp, atol=1e-4)


def test_samples_do_not_depend_on_batching_and_a_prefix_of_n_is_a_smaller_n(lm):
    params = SamplingParams(n=5, seed=9)
    extras = Extras(final_layers=(1,))
    together = lm.sample_batch(PROMPTS, params, 8, (), extras)
    alone = [lm.sample(p, params, 8) for p in PROMPTS]
    for sample_set, single in zip(together, alone):
        assert [c.token_ids for c in sample_set.samples] == [c.token_ids for c in single]
    three = lm.sample(PROMPTS[0], SamplingParams(n=3, seed=9), 8)
    assert [c.token_ids for c in three] == [c.token_ids for c in alone[0][:3]]


def test_a_sample_set_stores_the_gram_of_the_final_states_not_the_states(lm):
    params = SamplingParams(n=4, seed=2)
    states = lm.sample(PROMPTS[0], params, 6, (), Extras(final_layers=(1, 2)))
    (sample_set,) = lm.sample_batch([PROMPTS[0]], params, 6, (), Extras(final_layers=(1, 2)))
    assert sorted(sample_set.grams) == ["1", "2"]
    assert all(c.final_hidden is None for c in sample_set.samples)
    for index, layer in enumerate(("1", "2")):
        z = np.stack([c.final_hidden[index] for c in states]).astype(np.float64)
        centred = z - z.mean(axis=1, keepdims=True)
        assert np.allclose(sample_set.grams[layer], centred @ centred.T, rtol=1e-10, atol=1e-8)
        keep = [0, 2, 3]  # a dropped sample is a principal sub-matrix
        assert np.allclose(gram(z[keep]), sample_set.grams[layer][np.ix_(keep, keep)], rtol=1e-10, atol=1e-8)


def test_logsumexp_is_that_of_the_raw_logits_at_each_generated_token(lm):
    import torch

    (c,) = lm.generate([PROMPTS[0]], 5, (), Extras(logsumexp=True))
    ids, _ = lm.encode(PROMPTS[0])
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids + c.token_ids])).logits[0].float()
    expected = torch.logsumexp(logits[len(ids) - 1:len(ids) - 1 + len(c.token_ids)], -1).numpy()
    assert np.allclose(c.logsumexp, expected, atol=1e-4)
    (plain,) = lm.generate([PROMPTS[0]], 5)
    assert plain.logsumexp is None and plain.token_ids == c.token_ids


def test_sample_sets_go_through_the_call_cache_one_key_per_prompt(lm, tmp_path):
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    params, extras = SamplingParams(n=3, seed=1), Extras(final_layers=(2,))
    first = cached.sample_batch(PROMPTS, params, 6, (), extras)
    again = cached.sample_batch([PROMPTS[1]], params, 6, (), extras)
    assert cached.stats()["sample_set"] == {"hits": 1, "misses": 2}
    assert isinstance(again[0], SampleSet) and np.array_equal(again[0].grams["2"], first[1].grams["2"])
    assert [c.text for c in again[0].samples] == [c.text for c in first[1].samples]


def test_new_extras_fields_leave_existing_cache_keys_alone():
    assert NO_EXTRAS.key() == {"entropy": False, "attention_layer": None, "hidden_layer": None}
    assert Extras(final_layers=(3,)).key()["final_layers"] == (3,)


def test_bad_final_layers_are_refused(lm):
    with pytest.raises(ValueError, match="1-based"):
        Extras(final_layers=(0,))
    with pytest.raises(ValueError, match="final_source"):
        Extras(final_layers=(1,), final_source="ffn")
    with pytest.raises(ValueError, match="cannot be combined"):
        Extras(final_layers=(1,), hidden_layer=1)
    with pytest.raises(Exception, match="layers 1..2"):
        lm.sample(PROMPTS[0], SamplingParams(n=2, seed=0), 3, (), Extras(final_layers=(3,)))
