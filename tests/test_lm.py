"""The white-box engine, exercised with a tiny random Llama built in the test (the path SmolLM2 takes)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.base import BLACK_BOX, Extras, SamplingParams, require
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.lm.models import model_identity
from adaptive_rag.methods.registry import method_class
from adaptive_rag.methods.base import Context
from adaptive_rag.prompts.fewshot import Exemplar, build_prompt
from adaptive_rag.retrieval import Hit

from conftest import RecordingRetriever

EXEMPLARS = [Exemplar("Who founded Velmora Glassworks?", "Idris Penhallow founded it.", "Idris Penhallow")] * 2
QUESTIONS = ["Where was Idris Penhallow born?", "Which river flows through Carrowmere?", "Who?",
             "When was the Tessilan Rope Mill founded, and by whom, and why?"]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFModel(tiny_model_dir, batch_size=4)


def full_forward(lm, prompt, continuation):
    """Prompt + generated ids through one plain forward pass, with everything switched on."""
    import torch

    ids, _ = lm.encode(prompt)
    all_ids = torch.tensor([ids + continuation.token_ids])
    with torch.no_grad():
        return len(ids), lm.model(all_ids, output_attentions=True, output_hidden_states=True)


def test_materialised_model_records_its_identity(tiny_model_dir, lm):
    identity = model_identity(tiny_model_dir)
    assert identity["model_type"] == "llama" and identity["saved_dtype"] == "float32"
    assert lm.identity()["weights_sha256"] == identity["weights_sha256"]


@pytest.mark.parametrize("prompt_format", ["raw", "chat"])
def test_greedy_tokens_and_extras_match_a_direct_forward_pass(lm, prompt_format):
    import torch

    prompt = build_prompt(prompt_format, EXEMPLARS, QUESTIONS[0])
    (c,) = lm.generate([prompt], 8, extras=Extras(entropy=True, attention_layer=-1, hidden_layer=1))
    assert len(c.tokens) == len(c.logprobs) == len(c.entropies) == len(c.attentions) == 8
    assert c.hidden.shape == (8, lm.model.config.hidden_size) and "".join(c.tokens) == c.text
    n, out = full_forward(lm, prompt, c)
    logprobs = torch.log_softmax(out.logits[0].float(), -1)
    for i, token in enumerate(c.token_ids):
        row = logprobs[n - 1 + i]
        assert token == int(row.argmax())  # greedy
        assert c.logprobs[i] == pytest.approx(float(row[token]), abs=1e-4)
        assert c.entropies[i] == pytest.approx(float(-(row.exp() * row).sum()), abs=1e-4)
        attention = out.attentions[-1][0, :, n + i, : n + i + 1].mean(0).numpy()
        assert c.attentions[i].shape == (n + i + 1,)
        np.testing.assert_allclose(c.attentions[i], attention, atol=1e-5)
        np.testing.assert_allclose(c.hidden[i], out.hidden_states[1][0, n + i].numpy(), atol=1e-4)


def test_batched_and_one_at_a_time_give_the_same_tokens(tiny_model_dir, lm):
    prompts = [build_prompt("chat", EXEMPLARS, q, [Hit("1", "T", "some passage text", 1.0)]) for q in QUESTIONS]
    batched = lm.generate(prompts, 12)
    single = HFModel(tiny_model_dir, batch_size=1).generate(prompts, 12)
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert max(abs(a - b) for x, y in zip(batched, single) for a, b in zip(x.logprobs, y.logprobs)) < 1e-4


def test_stop_strings_cut_text_and_tokens(lm):
    prompt = build_prompt("raw", EXEMPLARS, QUESTIONS[1])
    (free,) = lm.generate([prompt], 10)
    stop = free.tokens[3].strip() or free.tokens[4]
    (cut,) = lm.generate([prompt], 10, stop=[stop])
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert free.text.startswith(cut.text) and cut.token_ids == free.token_ids[:len(cut.token_ids)]
    assert "".join(cut.tokens).startswith(cut.text)


def test_a_continuation_that_keeps_no_token_reports_the_likelihood_of_the_token_that_ended_it(lm):
    """`Extras(end_logprob=True)`: a stop string at the very first token leaves no text and no token; the
    log-probability of that first token is reported (SUGAR's empty answers); a kept token reports none."""
    from adaptive_rag.lm.base import Extras

    prompt = build_prompt("raw", EXEMPLARS, QUESTIONS[1])
    (free,) = lm.generate([prompt], 4)
    first = free.tokens[0]
    assert first.strip(), "the tiny model's first token must write text for this test"
    (cut,) = lm.generate([prompt], 4, stop=[first], extras=Extras(end_logprob=True))
    assert (cut.text, cut.tokens, cut.logprobs) == ("", [], [])
    assert cut.end_logprob == pytest.approx(free.logprobs[0], abs=1e-5)
    (unasked,) = lm.generate([prompt], 4, stop=[first])
    assert unasked.end_logprob is None
    (kept,) = lm.generate([prompt], 4, extras=Extras(end_logprob=True))
    assert kept.tokens and kept.end_logprob is None
    [sampled] = lm.sample_batch([prompt], SamplingParams(n=2, seed=3), 4, stop=[" ", first, "\n"],
                                extras=Extras(end_logprob=True))
    assert all(c.end_logprob is not None for c in sampled.samples if not c.tokens)


def test_sampling_repeats_with_its_seed(lm):
    prompt = build_prompt("chat", EXEMPLARS, QUESTIONS[0])
    params = SamplingParams(n=3, seed=11, temperature=1.0, top_k=50, top_p=0.9)
    first, again = lm.sample(prompt, params, 8), lm.sample(prompt, params, 8)
    other = lm.sample(prompt, SamplingParams(n=3, seed=12), 8)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert [c.token_ids for c in first] != [c.token_ids for c in other]
    assert len({tuple(c.token_ids) for c in first}) > 1  # continuation j uses seed + j


def test_scoring_a_forced_continuation_matches_a_direct_forward(lm):
    import torch

    prompt = build_prompt("raw", EXEMPLARS, QUESTIONS[2])
    continuation = " Carrowmere, on the Lune."
    scores = lm.score(prompt, continuation)
    prompt_ids, _ = lm.encode(prompt)
    ids, _ = lm.encode(prompt.with_prefix(continuation))
    assert ids[:len(prompt_ids)] == prompt_ids and len(scores) == len(ids) - len(prompt_ids)
    with torch.no_grad():
        logprobs = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].float(), -1)
    expected = [float(logprobs[i - 1, ids[i]]) for i in range(len(prompt_ids), len(ids))]
    assert scores == pytest.approx(expected, abs=1e-5)


def test_capability_errors_come_before_any_generation(tiny_model_dir):
    with pytest.raises(ConfigError, match="needs attentions, entropy, which the api backend cannot provide"):
        require(BLACK_BOX, {"attentions", "entropy"}, "method 'dragin'", "api")
    import yaml

    from conftest import REPO

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(backend="api", api={"base_url": "http://127.0.0.1:9/v1", "model": "x"})
    black_box = ("wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "scaar")  # token log-probabilities only
    white_box = {name: data["methods"].pop(name) for name in list(data["methods"]) if name not in black_box}
    data.pop("ablations")
    data.pop("detectors")  # DioR's detector data needs a white-box model too (tests/methods/dior/test_detector_data.py)
    data.pop("complexity_classifier")  # its strategies are methods this test removed
    data["experiment"]["methods"] = ["wo-rag", "sr-rag"]
    parse_params(data)
    data["methods"]["dragin"] = white_box["dragin"]
    with pytest.raises(ConfigError, match="methods.dragin: method type 'dragin' needs attentions, entropy"):
        parse_params(data)
    data["methods"]["scaar-attn"] = {"type": "scaar", "weighting": "attn"}  # needs depend on settings
    del data["methods"]["dragin"]
    with pytest.raises(ConfigError, match="methods.scaar-attn: method type 'scaar' needs attentions"):
        parse_params(data)
    del data["methods"]["scaar-attn"]
    data["model"]["backend"] = "hf"
    with pytest.raises(ConfigError, match="model.api: is only used with backend: api"):
        parse_params(data)


@pytest.mark.parametrize("prompt_format", ["raw", "chat"])
def test_methods_answer_batches_through_the_model(lm, prompt_format):
    retriever = RecordingRetriever()
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format=prompt_format, max_new_tokens=5, retriever=retriever,
                  answer_fallback_tokens=0)  # one generation call per batch, nothing appended
    examples = [Example(f"q{i}", q, ["Carrowmere"], "span") for i, q in enumerate(QUESTIONS[:2])]
    no_rag = method_class("wo-rag")({}, ctx).answer_batch(examples)
    assert [a.retrievals for a in no_rag] == [0, 0] and "Context:" not in json.dumps(no_rag[0].prompt)
    rag = method_class("sr-rag")({"top_k": 2}, ctx).answer_batch(examples)
    assert retriever.queries == [(e.question, 2) for e in examples]
    assert [p["id"] for p in rag[0].passages] == ["d1.1", "d1.2"] and rag[0].llm_calls == 1
    assert "[1] T1: passage 1.1\n[2] T1: passage 1.2" in json.dumps(rag[0].prompt, ensure_ascii=False).replace("\\n", "\n")


@pytest.mark.slow  # runs the `adaptive_rag model` CLI
def test_hub_id_source_loads_through_from_pretrained_offline(tiny_llama_dir, tmp_path):
    """A hub id goes through the same `from_pretrained` call; here it resolves from an offline HF cache."""
    from conftest import write_params

    revision = "0" * 40
    repo = tmp_path / "hub" / "models--tiny-org--tiny-llama"
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    params = write_params(tmp_path / "params.yaml", model={"name": "tiny", "source": "tiny-org/tiny-llama"})
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "models" / "tiny"
    result = subprocess.run([sys.executable, "-m", "adaptive_rag", "--params", str(params), "model", "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "identity.json").read_text())["source"] == "tiny-org/tiny-llama"
    assert (out / "model.safetensors").is_file()


def test_received_attention_is_each_heads_column_maximum_of_a_pass_over_the_tokens_alone(lm, tmp_path):
    """DRAGIN's reference scoring reads attention from the generated tokens fed alone: [0] each head's
    largest attention from a later token, [1] each token's attention to itself; the cache hands back
    the same array without calling the model."""
    import torch

    from adaptive_rag.lm.cache import CachedModel

    ids = lm.generate([build_prompt("raw", EXEMPLARS, QUESTIONS[0])], 12)[0].token_ids
    planes = lm.received_attention(ids)
    with torch.no_grad():
        attention = lm.model(torch.tensor([ids]), output_attentions=True).attentions[-1][0].numpy()  # [h, q, k]
    heads, n = attention.shape[0], len(ids)
    assert planes.shape == (2, heads, n) and planes.dtype == np.float32
    for h in range(heads):
        for i in range(n):
            later = attention[h, i + 1:, i]
            assert planes[0, h, i] == pytest.approx(later.max() if later.size else 0.0, abs=1e-6)
            assert planes[1, h, i] == pytest.approx(attention[h, i, i], abs=1e-6)
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    first = cached.received_attention(ids)
    calls = []
    original = lm.received_attention
    lm.received_attention = lambda *a: calls.append(a) or original(*a)
    try:
        again = cached.received_attention(ids)
    finally:
        del lm.received_attention
    assert calls == [] and np.array_equal(first, again) and np.array_equal(first, planes)
    assert cached.stats()["attention"] == {"hits": 1, "misses": 1}
    assert lm.end_of_turn_text == "<|im_end|>"


def test_attention_matrix_is_the_head_mean_of_a_pass_over_the_tokens_alone(lm, tmp_path):
    """DRAGIN's reference query (`keep_real_words`) ranks words by one layer's head-averaged attention
    in a pass over its text alone; the cache keeps the matrix apart from `received_attention`'s planes."""
    import torch

    from adaptive_rag.lm.cache import CachedModel

    ids = lm.generate([build_prompt("raw", EXEMPLARS, QUESTIONS[0])], 12)[0].token_ids
    matrix = lm.attention_matrix(ids)
    with torch.no_grad():
        attention = lm.model(torch.tensor([ids]), output_attentions=True).attentions[-1][0].numpy()  # [h, q, k]
    assert matrix.shape == (len(ids), len(ids)) and matrix.dtype == np.float32
    assert np.allclose(matrix, attention.mean(axis=0), atol=1e-6)
    assert np.allclose(np.triu(matrix, 1), 0) and np.allclose(matrix.sum(axis=1), 1, atol=1e-5)  # causal rows
    cached = CachedModel(lm, tmp_path / "calls.sqlite")
    planes = cached.received_attention(ids)
    first, again = cached.attention_matrix(ids), cached.attention_matrix(ids)
    assert np.array_equal(first, matrix) and np.array_equal(again, matrix) and planes.ndim == 3
    assert cached.stats()["attention"] == {"hits": 1, "misses": 2}
    assert lm.attention_matrix([]).shape == (0, 0)


def test_the_dragin_reference_set_up_runs_through_the_white_box_model(lm, monkeypatch):
    """DRAGIN with the reference code's scoring (`reference: dragin-code`: re-encoded attention, word
    units) and loop rules (no stop strings, the full budget every call, a case-sensitive answer check,
    the end-of-turn token kept), in another implementation's template, end to end on the real backend."""
    from pathlib import Path

    from adaptive_rag.methods.dragin import DRAGIN
    from adaptive_rag.prompts.template import load_template

    from conftest import settings_of

    generated, reencoded = [], []
    generate, received = lm.generate, lm.received_attention
    monkeypatch.setattr(lm, "generate", lambda prompts, n, stop=(), extras=None: generated.append(
        (n, tuple(stop), [p.text for p in prompts])) or generate(prompts, n, stop, extras))
    monkeypatch.setattr(lm, "received_attention", lambda ids, layer=-1: reencoded.append(list(ids)) or received(ids, layer))
    template = load_template(str(Path(__file__).parent / "fixtures" / "prompts" / "dragin-hotpotqa.yaml"))
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=12, retriever=RecordingRetriever(),
                  answer_fallback_tokens=0, template=template)
    settings = settings_of(DRAGIN, {"reference": "dragin-code", "theta": 0.0, "stop": [], "lookahead": "full",
                                    "answer_check": "exact-case", "end_of_turn": "keep"}, "methods.dragin")
    [answer] = DRAGIN(settings, ctx).answer_batch([Example("q0", QUESTIONS[0], ["x"], "span")])
    assert generated and all(n == 12 and stop == () for n, stop, _ in generated)
    assert all(text.startswith("Question: Who founded Velmora Glassworks?\nAnswer: Idris Penhallow founded it.")
               and "\nAnswer the following question by reasoning step-by-step" in text
               for _, _, texts in generated for text in texts)
    assert reencoded and all(ids for ids in reencoded)  # one pass over each judged look-ahead's tokens
    assert answer.llm_calls == len(generated)


def test_the_reference_words_trigger_and_query_run_through_the_white_box_model(lm, monkeypatch):
    """`sentence_words`, `filter_order: after-firing` and `query_words: dragin-code` on the real backend:
    every look-ahead fires (theta 0), and each query is made of whole words of the re-encoded text
    (question, text so far, fired sentence) from one `attention_matrix` pass per trigger."""
    from adaptive_rag.methods.dragin import DRAGIN

    from conftest import settings_of

    passes = []
    matrix = lm.attention_matrix
    monkeypatch.setattr(lm, "attention_matrix", lambda ids, layer=-1: passes.append(list(ids)) or matrix(ids, layer))
    retriever = RecordingRetriever()
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=12, retriever=retriever,
                  answer_fallback_tokens=0)
    settings = settings_of(DRAGIN, {"reference": "dragin-code", "theta": 0.0, "sentence_words": "dragin-code",
                                    "filter_order": "after-firing", "query_words": "dragin-code",
                                    "empty_query": "search", "max_retrievals": 2}, "methods.dragin")
    [answer] = DRAGIN(settings, ctx).answer_batch([Example("q0", QUESTIONS[0], ["x"], "span")])
    assert answer.retrievals >= 1 and len(passes) == answer.retrievals
    for ids, (query, _) in zip(passes, retriever.queries):
        words = lm.tokenizer.decode(ids).split()
        assert query and all(word in words for word in query.split())


@pytest.mark.parametrize("attention", ["fast", "eager"])
def test_watched_tokens_get_the_full_distributions_log_probabilities_at_every_position(tiny_model_dir, attention):
    """`Extras.watch_ids` over the whole vocabulary: each position's row is a distribution whose argmax is
    the greedy token and whose entry for it is that token's log-probability."""
    from adaptive_rag.lm.base import Prompt

    model = HFModel(tiny_model_dir, batch_size=4, attention=attention)
    vocab = model.model.config.vocab_size
    prompts = [Prompt(text=q) for q in QUESTIONS[:3]]
    plain = model.generate(prompts, 5)
    watched = model.generate(prompts, 5, extras=Extras(watch_ids=tuple(range(vocab))))
    for p, w in zip(plain, watched):
        assert p.watched is None and w.token_ids == p.token_ids
        rows = np.array(w.watched)
        assert rows.shape == (len(w.token_ids), vocab)
        np.testing.assert_allclose(np.exp(rows).sum(axis=1), 1.0, atol=1e-5)
        assert list(rows.argmax(axis=1)) == w.token_ids
        np.testing.assert_allclose(rows[np.arange(len(rows)), w.token_ids], w.logprobs, atol=1e-6)


def test_a_watched_continuation_keeps_special_tokens_after_its_text(tiny_self_rag_dir):
    """Self-RAG's critique tokens follow the answer and write no text: a call that watches token ids keeps
    them (their positions are what it reads); a call that does not keeps its tokens as before."""
    from adaptive_rag.lm.rows import Chosen, RowState

    model = HFModel(tiny_self_rag_dir, batch_size=1)
    word = model.tokenizer(" river", add_special_tokens=False)["input_ids"]
    special = model.tokenizer.convert_tokens_to_ids(["[Fully supported]", "[Utility:5]"])
    state = RowState(4)
    for token in [*word, *special]:
        state.take(Chosen([token], [-0.5], None, None, [[-1.0, -2.0]]), 0, model, (), 10, False, ())
    watched = state.result(model, (), Extras(watch_ids=tuple(special)))
    assert watched.text == " river" and watched.token_ids == [*word, *special]
    assert watched.watched == [[-1.0, -2.0]] * len(watched.token_ids)
    assert state.result(model, (), Extras()).token_ids == word
