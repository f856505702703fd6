"""The fast attention path against the eager one, on tiny random decoders built in the test (CPU).

Tolerances: float32 throughout; the two paths add the same products in a different order (the fast
path merges a shared-prefix part and a per-row part, the eager one a padded matrix), so numbers agree
to ~1e-6 relative and tokens exactly. Log-probabilities and attention probabilities get absolute
bounds; hidden states, whose entries reach ~15 here, a relative one (plus an absolute floor).
"""

import numpy as np
import pytest

from adaptive_rag.config import parse_params
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.lm.base import Extras, SamplingParams
from adaptive_rag.lm.fast_decoder import FastDecoder, cascade_attention
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.prompts.fewshot import Exemplar, build_prompt
from adaptive_rag.retrieval import Hit

from conftest import REPO

LOGPROB_TOL = 5e-5
ATTENTION_TOL = 1e-6
STATE_RTOL, STATE_ATOL = 2e-5, 5e-5
EXEMPLARS = [Exemplar("Who founded Velmora Glassworks?", "Idris Penhallow founded it.", "Idris Penhallow")] * 3
QUESTIONS = ["Where was Idris Penhallow born?", "Which river flows through Carrowmere?", "Who?",
             "When was the Tessilan Rope Mill founded, and by whom, and why?", "Is the Lune long?",
             "Which guild kept the Velmora ledgers, and where were they stored in winter?", "What?"]


# Stop strings that end the lively model's rows at different steps.
STOPS = ("elm", " larg", "end")


@pytest.fixture(scope="module")
def lively_dir(tiny_llama_dir, tmp_path_factory):
    """A tiny random Llama (4 query heads over 2 kv heads) whose larger initial weights make its output
    depend on the prompt, so rows of one call stop at different steps."""
    import torch
    import transformers

    directory = tmp_path_factory.mktemp("lively-llama")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_llama_dir)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=8192, initializer_range=0.3,
                                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def fast(lively_dir):
    return HFModel(lively_dir, batch_size=3, cpu_kernels="packed")  # oneDNN's packed weights (tests/test_cpu_kernels.py: the choice)


@pytest.fixture(scope="module")
def fused(lively_dir):
    """The fused layers (one q|k|v and one gate|up product, fewer kernels), the CUDA default, on the CPU."""
    return HFModel(lively_dir, batch_size=3, fused_kernels=True, cpu_kernels="packed")


@pytest.fixture(scope="module")
def eager(lively_dir):
    return HFModel(lively_dir, batch_size=3, attention="eager")


def prompts(fmt="chat", passages=True):
    hits = [Hit("1", "T", "The Lune flows through Carrowmere and Velmora.", 1.0)] if passages else []
    return [build_prompt(fmt, EXEMPLARS, q, hits[:i % 2]) for i, q in enumerate(QUESTIONS)]


def assert_same(a, b, extras=Extras()):
    """Same tokens and text; per-token numbers within the stated tolerances."""
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.text for c in a] == [c.text for c in b] and [c.finish_reason for c in a] == [c.finish_reason for c in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=LOGPROB_TOL)
        if extras.entropy:
            np.testing.assert_allclose(x.entropies, y.entropies, atol=LOGPROB_TOL)
        if extras.logsumexp:
            np.testing.assert_allclose(x.logsumexp, y.logsumexp, atol=LOGPROB_TOL)
        if extras.attention_layer is not None:
            assert [r.shape for r in x.attentions] == [r.shape for r in y.attentions]
            for r, s in zip(x.attentions, y.attentions):
                np.testing.assert_allclose(r, s, atol=ATTENTION_TOL)
            assert x.meta["prompt_tokens"] == y.meta["prompt_tokens"]
        if extras.hidden_layer is not None:
            np.testing.assert_allclose(x.hidden, y.hidden, rtol=STATE_RTOL, atol=STATE_ATOL)
        if extras.final_layers:
            np.testing.assert_allclose(x.final_hidden, y.final_hidden, rtol=STATE_RTOL, atol=STATE_ATOL)


@pytest.mark.parametrize("fmt", ["chat", "raw"])
@pytest.mark.parametrize("extras", [Extras(), Extras(entropy=True, attention_layer=-1, hidden_layer=1, logsumexp=True),
                                    Extras(attention_layer=0, hidden_layer=-1), Extras(hidden_layer=0)],
                         ids=["plain", "dragin-like", "first-layer-attention", "embeddings"])
def test_greedy_fast_path_equals_the_eager_path(fast, fused, eager, fmt, extras):
    batch = prompts(fmt)
    expected = eager.generate(batch, 12, extras=extras)
    assert_same(fast.generate(batch, 12, extras=extras), expected, extras)
    assert_same(fused.generate(batch, 12, extras=extras), expected, extras)


@pytest.mark.parametrize("kernels", ["modules", "fused"])
def test_stop_strings_end_rows_the_same_way(fast, fused, eager, kernels):
    batch = prompts("raw")
    extras = Extras(attention_layer=-1)  # a finished row is fed once more for its last token's row
    out = (fast if kernels == "modules" else fused).generate(batch, 16, STOPS, extras)
    assert {c.finish_reason for c in out} == {"stop", "length"}
    assert_same(out, eager.generate(batch, 16, STOPS, extras), extras)


@pytest.mark.parametrize("source", ["mlp", "residual"])
def test_sampling_and_final_states_equal_the_eager_path(fast, fused, eager, source):
    params = SamplingParams(n=5, seed=3, temperature=1.0, top_k=50, top_p=0.9)
    extras = Extras(final_layers=(1, 2), final_source=source)
    for prompt in prompts("chat")[:3]:
        expected = eager.sample(prompt, params, 8, STOPS, extras)
        assert_same(fast.sample(prompt, params, 8, STOPS, extras), expected, extras)
        assert_same(fused.sample(prompt, params, 8, STOPS, extras), expected, extras)


@pytest.mark.parametrize("kernels", ["modules", "fused"])
def test_continuous_batching_equals_one_prompt_at_a_time(lively_dir, fast, fused, kernels):
    """7 prompts over 3 rows (rows leave and waiting prompts join mid-call) against 7 calls of one row."""
    single = HFModel(lively_dir, batch_size=1, fused_kernels=kernels == "fused")
    batch = prompts("chat")
    extras = Extras(entropy=True, attention_layer=-1)
    together = (fast if kernels == "modules" else fused).generate(batch, 16, STOPS, extras)
    assert len({len(c.token_ids) for c in together}) > 2  # rows really finish at different steps
    alone = [single.generate([p], 16, STOPS, extras)[0] for p in batch]
    assert_same(together, alone, extras)


@pytest.mark.parametrize("kernels", ["modules", "fused"])
def test_a_token_limit_per_prompt_equals_calls_of_one_limit(fast, fused, eager, kernels):
    """A call whose prompts each have their own limit (a dynamic loop's step, each question with what is
    left of its budget): every row as a call of its limit alone gives it, on both paths."""
    batch = prompts("chat")
    limits = [3, 16, 1, 9, 16, 5, 12][:len(batch)]
    extras = Extras(entropy=True, attention_layer=-1)
    model = fast if kernels == "modules" else fused
    together = model.generate(batch, limits, STOPS, extras)
    assert [len(c.token_ids) <= n for c, n in zip(together, limits)] == [True] * len(batch)
    assert any(c.finish_reason == "length" and len(c.token_ids) == n for c, n in zip(together, limits) if n < 16)
    alone = [eager.generate([p], n, STOPS, extras)[0] for p, n in zip(batch, limits)]
    assert_same(together, alone, extras)
    assert_same(eager.generate(batch, limits, STOPS, extras), alone, extras)
    with pytest.raises(ValueError, match="2 token limits for 3 prompts"):
        model.generate(batch[:3], [4, 4])


def test_the_decoder_counts_what_it_prefilled_and_decoded(lively_dir):
    """`time_spent` (what every run's provenance records): every token the model ran is a prefilled prompt
    token or a decode step's row, each with its seconds."""
    lm = HFModel(lively_dir, batch_size=3)
    assert lm.time_spent() == {"prefill_tokens": 0, "prefill_s": 0.0, "decode_steps": 0, "decode_rows": 0,
                               "decode_s": 0.0}
    assert len(lm.generate(prompts("chat"), 9)) == len(prompts("chat"))
    spent = lm.time_spent()
    assert spent["prefill_tokens"] + spent["decode_rows"] == lm.forward_tokens
    assert spent["decode_steps"] < spent["decode_rows"] <= 3 * spent["decode_steps"]
    assert spent["prefill_s"] > 0 and spent["decode_s"] > 0
    assert HFModel(lively_dir, attention="eager").time_spent() is None


def test_prompts_with_different_shared_prefixes_in_one_call(fast, eager):
    batch = prompts("chat")[:3] + prompts("raw")[3:]  # two few-shot prefixes: two continuous batches
    assert_same(fast.generate(batch, 10), eager.generate(batch, 10))


def test_a_prompt_with_no_shared_part_after_one_with_a_shared_prefix(fast, eager):
    """An empty shared part is no prefix to encode (the cached few-shot prefix stays for the next call)."""
    from adaptive_rag.lm.base import Prompt

    batch = [prompts("chat")[0], Prompt(text="Which river flows through Carrowmere?"), prompts("chat")[1]]
    for lm_calls in (fast, eager):
        lm_calls.generate(batch[:1], 4)
    assert_same([fast.generate([p], 8)[0] for p in batch], [eager.generate([p], 8)[0] for p in batch])


@pytest.mark.parametrize("kernels", ["modules", "fused"])
def test_static_shapes_give_the_dynamic_results(lively_dir, fast, kernels):
    """The padded, fixed-shape step a CUDA graph would record (run here without capture), with the
    module-by-module layers and with the fused ones (what a GPU runs)."""
    static = HFModel(lively_dir, batch_size=3)
    static.decoder = FastDecoder(static.model, static=True, fused=kernels == "fused")
    extras = Extras(entropy=True, attention_layer=-1, hidden_layer=1)
    batch = prompts("chat")
    assert_same(static.generate(batch, 12, STOPS, extras), fast.generate(batch, 12, STOPS, extras), extras)
    sampled = Extras(final_layers=(2,))
    params = SamplingParams(n=5, seed=1)
    assert_same(static.sample(batch[0], params, 6, (), sampled), fast.sample(batch[0], params, 6, (), sampled),
                sampled)
    assert_same(static.generate(batch[:2], 4), fast.generate(batch[:2], 4))  # the held slots are reused


def test_samples_share_the_prompt_and_hold_only_what_they_generate(fast):
    """k samples of a long prompt: the prompt's keys and values are held once, the k slots hold only
    the generated tokens (+1 for the final feed)."""
    seen = {}
    original = fast.decoder.new_slots

    def spy(slots, length):
        seen["slots"], seen["length"] = slots, length
        return original(slots, length)

    fast.decoder.new_slots = spy
    try:
        fast.sample(prompts("chat")[5], SamplingParams(n=16, seed=0), 5)
    finally:
        fast.decoder.new_slots = original
    assert seen == {"slots": 16, "length": 5 + 1}


def test_the_attention_row_is_computed_only_for_the_layer_asked(fast, monkeypatch):
    import adaptive_rag.lm.fast_decoder as module

    asked = []

    def recording(*args, **kwargs):
        asked.append(args[7])
        return cascade_attention(*args, **kwargs)

    monkeypatch.setattr(module, "cascade_attention", recording)
    fast.generate(prompts("chat")[:2], 3)
    assert asked and not any(asked)
    asked.clear()
    fast.generate(prompts("chat")[:2], 3, extras=Extras(attention_layer=-1))
    layers = fast.decoder.num_layers
    assert asked == [index == layers - 1 for index in range(layers)] * (len(asked) // layers)


@pytest.mark.parametrize("fused", [False, True], ids=["modules", "fused"])
def test_grouped_query_attention_reads_the_shared_prefix_in_place(fused):
    """cascade_attention equals softmax(q k^T * scale) v over [prefix | own] with heads repeated, with
    masks given as additive biases (0 / -inf), and the fused form (scale and bias inside `baddbmm`) too."""
    import torch

    torch.manual_seed(0)
    rows, heads, kv_heads, d, prefix, own = 3, 6, 2, 8, 5, 4
    q = torch.randn(rows, heads, 1, d)
    pk, pv = torch.randn(kv_heads, prefix, d), torch.randn(kv_heads, prefix, d)
    ok, ov = torch.randn(rows, kv_heads, own, d), torch.randn(rows, kv_heads, own, d)
    valid = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    own_bias = torch.zeros(rows, kv_heads, 1, own).masked_fill(~valid[:, None, None], float("-inf"))
    out, probs = cascade_attention(q, pk, pv, ok, ov, own_bias, 0.3, True, torch.zeros(prefix), fused)
    for r in range(rows):
        n = int(valid[r].sum())
        keys = torch.cat([pk, ok[r, :, :n]], dim=1).repeat_interleave(heads // kv_heads, 0)
        values = torch.cat([pv, ov[r, :, :n]], dim=1).repeat_interleave(heads // kv_heads, 0)
        weights = torch.softmax((q[r] @ keys.transpose(-1, -2)) * 0.3, -1)
        torch.testing.assert_close(out[r], weights @ values, atol=1e-6, rtol=0)
        torch.testing.assert_close(probs[r].reshape(heads, -1)[:, :prefix + n], weights[:, 0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kernels", ["modules", "fused"])
@pytest.mark.parametrize("kind", ["mistral", "qwen2", "qwen3"])
def test_other_llama_family_decoders_run_on_the_fast_path(tmp_path, tiny_llama_dir, kind, kernels):
    """Mistral (its own config), Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms), randomly initialised."""
    import torch
    import transformers

    config_class = {"mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config,
                    "qwen3": transformers.Qwen3Config}[kind]
    model_class = {"mistral": transformers.MistralForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
                   "qwen3": transformers.Qwen3ForCausalLM}[kind]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_llama_dir)
    torch.manual_seed(0)
    extra = {"sliding_window": None} if kind == "mistral" else {}
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **extra)
    model = model_class(config)
    if kind == "qwen2":  # biases start at zero: make them count
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    extras = Extras(entropy=True, attention_layer=-1, hidden_layer=1)
    batch = prompts("chat")[:4]
    a = HFModel(tmp_path, batch_size=2, fused_kernels=kernels == "fused").generate(batch, 8, extras=extras)
    b = HFModel(tmp_path, batch_size=2, attention="eager").generate(batch, 8, extras=extras)
    assert_same(a, b, extras)


def test_an_architecture_the_fast_path_does_not_run_is_refused_by_name(tmp_path, tiny_llama_dir):
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_llama_dir)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2,
                                                         n_positions=4096)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="this model is 'gpt2'; set model.attention: eager"):
        HFModel(tmp_path)
    (c,) = HFModel(tmp_path, attention="eager").generate(prompts("raw")[:1], 4)
    assert len(c.token_ids) == 4


def test_the_attention_path_is_part_of_the_identity(fast, eager):
    assert fast.identity()["attention"] == "fast" and eager.identity()["attention"] == "eager"
    assert {k: v for k, v in fast.identity().items() if k != "attention"} == \
           {k: v for k, v in eager.identity().items() if k != "attention"}  # packed kernels: no mark


def test_model_attention_and_cuda_graphs_settings_are_checked(tmp_path):
    import yaml

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    assert parse_params(raw).model.attention == "fast" and not parse_params(raw).model.cuda_graphs
    for model, message in (({"attention": "flash"}, "model.attention: must be one of fast, eager; got 'flash'"),
                           ({"cuda_graphs": True}, "model.cuda_graphs: captures CUDA graphs, so it needs "
                                                   "model.device: cuda"),
                           ({"cuda_graphs": True, "device": "cuda", "attention": "eager"},
                            "set model.attention: fast")):
        with pytest.raises(ConfigError, match=message):
            parse_params({**raw, "model": {**raw["model"], **model}})


def test_cuda_graphs_need_a_cuda_device(lively_dir):
    with pytest.raises(InputError, match="needs the model on a CUDA device"):
        HFModel(lively_dir, cuda_graphs=True)


@pytest.mark.parametrize("kernels", ["modules", "fused"])
def test_integrated_gradients_run_on_the_fast_path(fast, fused, eager, kernels):
    """DioR's IG passes through the fast decoder's batched pass equal those through transformers' forward."""
    from adaptive_rag.lm.base import IGSettings

    settings = IGSettings(steps=16, batch=8)
    prompt = prompts("raw", passages=False)[3]
    a, b = (fast if kernels == "modules" else fused).attribution(prompt, settings), eager.attribution(prompt, settings)
    assert a.target_id == b.target_id and a.token_ids == b.token_ids
    np.testing.assert_allclose(a.l2, b.l2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.dot, b.dot, rtol=1e-4, atol=1e-6)
    assert a.value == pytest.approx(b.value, rel=1e-5)


def test_fused_layers_hold_the_weights_once_and_leave_the_model_as_it_was(lively_dir):
    """Fusing q|k|v and gate|up makes each module's weight a view of its rows of the fused matrix: the
    model's own forward gives the same logits bit for bit, and no weight is held twice."""
    import torch

    lm = HFModel(lively_dir, batch_size=3)
    ids = torch.tensor([[5, 9, 14, 3, 8]])
    with torch.inference_mode():
        before = lm.model(input_ids=ids).logits
    storage = sum(p.untyped_storage().nbytes() for p in lm.model.parameters())
    decoder = FastDecoder(lm.model, fused=True, cpu_kernels="packed")
    layer = decoder.layers[0]
    fused = decoder._fused[layer]
    attention = layer.self_attn
    assert attention.k_proj.weight.untyped_storage().data_ptr() == fused.qkv.weight.untyped_storage().data_ptr()
    assert torch.equal(fused.qkv.weight, torch.cat([attention.q_proj.weight, attention.k_proj.weight,
                                                    attention.v_proj.weight]))
    assert FastDecoder(lm.model, fused=True)._fused[layer].qkv is fused.qkv  # fused once per model
    if torch.backends.mkldnn.is_available():  # the CPU's packed copies: of the products a step reads
        assert attention.q_proj not in decoder.packed and layer.mlp.up_proj not in decoder.packed
        assert {fused.qkv, fused.gate_up, attention.o_proj, layer.mlp.down_proj} <= set(decoder.packed)
    with torch.inference_mode():
        assert torch.equal(lm.model(input_ids=ids).logits, before)
    distinct = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in lm.model.parameters()}
    assert sum(distinct.values()) <= storage


def test_the_fused_kernels_are_part_of_the_identity(fast, fused):
    assert "kernels" not in fast.identity() and fused.identity()["kernels"] == "fused"
    assert {k: v for k, v in fused.identity().items() if k != "kernels"} == fast.identity()


CUDA = pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")


@CUDA
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_on_cuda_the_fast_path_and_its_cuda_graphs_equal_the_eager_path(lively_dir, dtype):
    """The fast path on the GPU, with and without captured decode steps and fused layers, against the
    eager path there: float32 to the CPU tolerances; bfloat16 (whose sums depend on the kernels) to the same first tokens
    and log-probabilities within 0.1."""
    extras = Extras(entropy=True, attention_layer=-1, hidden_layer=1)
    batch = prompts("chat")
    eager = HFModel(lively_dir, dtype, "cuda", batch_size=3, attention="eager").generate(batch, 12, STOPS, extras)
    for graphs, kernels in ((False, False), (False, True), (True, False), (True, True)):
        lm = HFModel(lively_dir, dtype, "cuda", batch_size=3, cuda_graphs=graphs, fused_kernels=kernels)
        first = lm.generate(batch, 12, STOPS, extras)
        again = lm.generate(batch, 12, STOPS, extras)  # graphs captured by the first call are replayed
        assert [c.token_ids for c in again] == [c.token_ids for c in first]
        if dtype == "float32":
            assert_same(first, eager, extras)
        else:
            assert [c.token_ids[:1] for c in first] == [c.token_ids[:1] for c in eager]
            assert max(abs(a.logprobs[0] - b.logprobs[0]) for a, b in zip(first, eager)) < 0.1
    sampled = Extras(final_layers=(2,))
    params = SamplingParams(n=5, seed=1)
    plain = HFModel(lively_dir, dtype, "cuda", batch_size=3).sample(batch[0], params, 6, (), sampled)
    graphed = HFModel(lively_dir, dtype, "cuda", batch_size=3, cuda_graphs=True).sample(batch[0], params, 6, (),
                                                                                       sampled)
    if dtype == "float32":
        assert_same(graphed, plain, sampled)

