"""The encoder-decoder backend (`model.architecture: seq2seq`), on a tiny random T5 built in the test:
its numbers against plain teacher-forced forwards, the methods that run on it, and what params
validation refuses."""

import json
import subprocess
import sys

import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.lm.base import Extras, Prompt, SamplingParams
from adaptive_rag.lm.seq2seq import Seq2SeqModel
from adaptive_rag.methods.base import Context
from adaptive_rag.methods.registry import method_class
from adaptive_rag.prompts.fewshot import Exemplar

from conftest import REPO, RecordingRetriever, build_tiny_t5, settings_of

PROMPTS = [Prompt("Question: Where was Idris Penhallow born?\nAnswer:"),
           Prompt("Question: Which river flows through the harbour town of Carrowmere, and who built its rope "
                  "walks?\nAnswer:"),
           Prompt("Question: Who?\nAnswer:")]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return build_tiny_t5(tmp_path_factory.mktemp("tiny-t5"))


@pytest.fixture(scope="module")
def lm(t5_dir):
    return Seq2SeqModel(t5_dir, batch_size=2)


def teacher_forced(lm, prompt: Prompt, decoder_ids: list[int]):
    """Log-softmax of every decoder position, from one uncached forward of the whole decoder input."""
    import torch

    source, _ = lm.encode(prompt)
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_ids])).logits[0]
    return torch.log_softmax(logits.float(), -1)


def test_greedy_tokens_and_logprobs_equal_uncached_argmax_decoding(lm):
    """Batched (2 per batch, encoder inputs padded to the longest) and cached decoding chooses, step by step,
    the argmax of an uncached forward over the decoder input so far, with that token's log-probability
    and the distribution's entropy."""
    results = lm.generate(PROMPTS, max_new_tokens=6, extras=Extras(entropy=True))
    for prompt, result in zip(PROMPTS, results):
        decoder = [lm.start_id]
        expected_lp, expected_h = [], []
        for _ in range(6):
            logprobs = teacher_forced(lm, prompt, decoder)[-1]
            token = int(logprobs.argmax())
            if token in lm.eos_ids:
                break
            decoder.append(token)
            expected_lp.append(float(logprobs[token]))
            expected_h.append(float(-(logprobs.exp() * logprobs).sum()))
        assert result.token_ids == decoder[1:]
        assert result.logprobs == pytest.approx(expected_lp, abs=1e-4)
        assert result.entropies == pytest.approx(expected_h, abs=1e-4)
        assert result.text == lm.tokenizer.decode(decoder[1:], skip_special_tokens=True)
        assert "".join(result.tokens) == result.text
        assert result.prompt_tokens == len(lm.encode(prompt)[0])


def test_a_prompt_alone_and_in_a_batch_gets_the_same_continuation(lm):
    alone = [lm.generate([p], max_new_tokens=5)[0] for p in PROMPTS]
    together = lm.generate(PROMPTS, max_new_tokens=5)
    assert [a.token_ids for a in alone] == [b.token_ids for b in together]
    for a, b in zip(alone, together):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_a_token_limit_per_prompt_equals_calls_of_one_limit(lm):
    """Each row stops at its own limit; a row allowed no tokens generates none, as a call of 0 does."""
    limits = [0, 2, 5, 3, 1, 4][:len(PROMPTS)]
    together = lm.generate(PROMPTS, max_new_tokens=limits)
    alone = [lm.generate([p], max_new_tokens=n)[0] for p, n in zip(PROMPTS, limits)]
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert together[0].token_ids == [] and all(len(c.token_ids) <= n for c, n in zip(together, limits))
    for a, b in zip(alone, together):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_the_answer_prefix_is_forced_into_the_decoder(lm):
    prefix = " Carrowmere"
    prompt = Prompt(PROMPTS[0].text, prefix=prefix)
    forced = [lm.start_id, *lm.tokenizer(prefix, add_special_tokens=False)["input_ids"]]
    assert lm.encode(prompt)[1] == forced
    result = lm.generate([prompt], max_new_tokens=1)[0]
    logprobs = teacher_forced(lm, PROMPTS[0], forced)[-1]
    if int(logprobs.argmax()) not in lm.eos_ids:
        assert result.token_ids == [int(logprobs.argmax())]


def test_stop_strings_cut_the_text_and_the_other_rows_go_on(lm):
    """A row that stops leaves the batch (its cache rows, encoder states and mask); the rows left continue as
    they would alone."""
    full = lm.generate([PROMPTS[1]], max_new_tokens=8)[0]
    stop = full.text[2:4]
    assert len(full.text) > 4 and stop
    lm.batch_size = 3
    try:
        batch = lm.generate([PROMPTS[1], PROMPTS[0], PROMPTS[2]], max_new_tokens=8, stop=[stop])
    finally:
        lm.batch_size = 2
    assert batch[0].finish_reason == "stop" and full.text.startswith(batch[0].text) and stop not in batch[0].text
    for prompt, got in zip([PROMPTS[0], PROMPTS[2]], batch[1:]):
        alone = lm.generate([prompt], max_new_tokens=8, stop=[stop])[0]
        assert got.token_ids == alone.token_ids and got.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        assert len(got.token_ids) > len(batch[0].token_ids)  # they outlived the stopped row


def test_scoring_a_forced_continuation_matches_a_teacher_forced_forward(lm):
    continuation = " Carrowmere, on the Lune."
    ids = lm.tokenizer(continuation, add_special_tokens=False)["input_ids"]
    logprobs = teacher_forced(lm, PROMPTS[0], [lm.start_id, *ids])
    expected = [float(logprobs[i, token]) for i, token in enumerate(ids)]
    assert lm.score(PROMPTS[0], continuation) == pytest.approx(expected, abs=1e-5)
    greedy = lm.generate([PROMPTS[2]], max_new_tokens=4)[0]  # the greedy tokens' own log-probabilities
    forced = teacher_forced(lm, PROMPTS[2], [lm.start_id, *greedy.token_ids])
    assert greedy.logprobs == pytest.approx([float(forced[i, t]) for i, t in enumerate(greedy.token_ids)], abs=1e-4)


def test_sampling_is_seeded_per_continuation(lm):
    params = SamplingParams(n=3, seed=7)
    three = lm.sample(PROMPTS[0], params, max_new_tokens=5)
    assert [c.token_ids for c in lm.sample(PROMPTS[0], params, max_new_tokens=5)] == [c.token_ids for c in three]
    two = lm.sample(PROMPTS[0], SamplingParams(n=2, seed=7), max_new_tokens=5)
    assert [c.token_ids for c in two] == [c.token_ids for c in three[:2]]  # continuation j: seed + j, whatever n
    sets = lm.sample_batch(PROMPTS[:2], params, max_new_tokens=5)
    assert [c.token_ids for c in sets[0].samples] == [c.token_ids for c in three]


def test_what_a_decoder_only_model_gives_is_refused(lm):
    with pytest.raises(ConfigError, match="needs attentions, which the seq2seq backend cannot provide"):
        lm.generate(PROMPTS[:1], 3, extras=Extras(attention_layer=-1))
    with pytest.raises(ConfigError, match="needs hidden_states"):
        lm.sample(PROMPTS[0], SamplingParams(n=2, seed=0), 3, extras=Extras(final_layers=(1,)))
    with pytest.raises(ConfigError, match="needs gradients"):
        lm.attribution(PROMPTS[0])
    with pytest.raises(InputError, match="reads plain text; set model.prompt_format: raw"):
        lm.generate([Prompt.chat([{"role": "user", "content": "hi"}])], 3)


def test_each_backend_class_refuses_the_other_architecture(t5_dir, tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    with pytest.raises(InputError, match="an encoder-decoder model; set model.architecture: seq2seq"):
        HFModel(t5_dir)
    with pytest.raises(InputError, match="a decoder-only model, but model.architecture is seq2seq"):
        Seq2SeqModel(tiny_model_dir)


def test_methods_that_read_text_and_probabilities_run_on_it(lm):
    """wo-RAG, SR-RAG and FLARE (token probabilities) answer a batch through the encoder-decoder model."""
    exemplars = [Exemplar("Who founded Velmora Glassworks?", "Idris Penhallow founded it.", "Idris Penhallow")]
    retriever = RecordingRetriever()
    ctx = Context(lm=lm, exemplars=exemplars, prompt_format="raw", max_new_tokens=6, retriever=retriever,
                  answer_fallback_tokens=0)
    examples = [Example(f"q{i}", p.text, ["Carrowmere"], "span") for i, p in enumerate(PROMPTS[:2])]
    assert [a.retrievals for a in method_class("wo-rag")({}, ctx).answer_batch(examples)] == [0, 0]
    rag = method_class("sr-rag")({"top_k": 2}, ctx).answer_batch(examples)
    assert [a.retrievals for a in rag] == [1, 1] and rag[0].passages[0]["id"] == "d1.1"
    flare_settings = settings_of(method_class("flare"), {"theta": 1.0}, "methods.flare")  # every token is below 1
    flare = method_class("flare")(flare_settings, ctx).answer_batch(examples)
    assert all(a.retrievals >= 1 for a in flare)


def seq2seq_params(**model):
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update({"architecture": "seq2seq", "prompt_format": "raw", "attention": "eager", **model})
    for name in [n for n in data["methods"] if n not in ("wo-rag", "sr-rag", "fl-rag", "fs-rag", "ircot", "flare")]:
        del data["methods"][name]
    data.pop("ablations")
    data.pop("detectors")
    data.pop("complexity_classifier")  # its strategies name rows (wo-rag-qa, ...) removed above
    data["experiment"]["methods"] = ["wo-rag", "flare"]
    return data


def test_params_accept_seq2seq_for_text_methods_and_refuse_the_rest():
    parsed = parse_params(seq2seq_params())
    assert parsed.model.architecture == "seq2seq" and parsed.model.key()["architecture"] == "seq2seq"
    data = seq2seq_params()
    data["methods"]["dragin"] = {}
    with pytest.raises(ConfigError, match="methods.dragin: method type 'dragin' needs attentions, which an "
                                          r"encoder-decoder model \(model.architecture: seq2seq\) cannot provide"):
        parse_params(data)
    for change, message in [({"prompt_format": "chat"}, "model.prompt_format: an encoder-decoder model"),
                            ({"attention": "fast"}, "model.attention: the fast path runs decoder-only"),
                            ({"architecture": "t5"}, "model.architecture: must be one of causal, seq2seq")]:
        with pytest.raises(ConfigError, match=message):
            parse_params(seq2seq_params(**change))


def test_the_causal_default_leaves_every_run_key_as_it_was():
    """`architecture` enters the run settings only when it is not `causal`."""
    params = parse_params(yaml.safe_load((REPO / "params.yaml").read_text()))
    assert "architecture" not in json.dumps(params.run_settings("demo", "wo-rag"))
    assert "architecture" in json.dumps(parse_params(seq2seq_params()).run_settings("demo", "wo-rag"))


@pytest.mark.slow  # runs the `adaptive_rag model` CLI
def test_the_model_step_materialises_a_seq2seq_source_and_refuses_a_mismatch(t5_dir, tmp_path):
    def model_step(out: str, **model):
        params = tmp_path / "params.yaml"
        params.write_text(yaml.safe_dump(seq2seq_params(name="tiny-t5", source=str(t5_dir), **model)))
        return subprocess.run([sys.executable, "-m", "adaptive_rag", "--params", str(params), "model", "--out",
                               str(tmp_path / "models" / out)], capture_output=True, text=True, timeout=300)

    result = model_step("tiny-t5")
    assert result.returncode == 0, result.stderr
    identity = json.loads((tmp_path / "models" / "tiny-t5" / "identity.json").read_text())
    assert identity["model_type"] == "t5"
    assert Seq2SeqModel(tmp_path / "models" / "tiny-t5").generate(PROMPTS[:1], 3)[0].token_ids
    result = model_step("other", architecture="causal", prompt_format="chat", attention="fast")
    assert result.returncode != 0 and not (tmp_path / "models" / "other").exists()
    assert f"model.source {str(t5_dir)!r} is an encoder-decoder model; set model.architecture: seq2seq" in result.stderr
