"""The generation path SmolLM2 takes, exercised with a tiny random Llama built in the test."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.lm.models import model_identity
from adaptive_rag.methods import method_class
from adaptive_rag.methods.base import Context
from adaptive_rag.prompts.fewshot import Exemplar, raw_prompt
from adaptive_rag.retrieval import Hit

EXEMPLARS = [Exemplar("Who founded Velmora Glassworks?", "Idris Penhallow founded it.", "Idris Penhallow")]


def test_materialised_model_records_its_identity(tiny_model_dir):
    identity = model_identity(tiny_model_dir)
    assert identity["model_type"] == "llama" and identity["saved_dtype"] == "float32"
    assert len(identity["weights_sha256"]["model.safetensors"]) == 64
    assert (tiny_model_dir / "tokenizer.json").is_file()


def test_greedy_generation_is_deterministic_and_matches_a_manual_argmax(tiny_model_dir):
    import torch

    lm = HFModel(tiny_model_dir, "float32", "cpu", threads=1)
    prompt = raw_prompt(EXEMPLARS, "Where was Idris Penhallow born?")
    first = lm.generate(prompt, max_new_tokens=8)
    assert first == lm.generate(prompt, max_new_tokens=8)
    assert first.new_tokens == 8 and first.prompt_tokens > 20
    ids = lm.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        for _ in range(8):
            next_id = lm.model(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    manual = lm.tokenizer.decode(ids[0, -8:], skip_special_tokens=True).strip()
    assert first.text == manual


def test_chat_rendering_uses_the_template(tiny_model_dir):
    lm = HFModel(tiny_model_dir)
    text = lm.render_chat([{"role": "user", "content": "Question: q"}])
    assert text.startswith("<|im_start|>user\nQuestion: q<|im_end|>") and text.endswith("<|im_start|>assistant\n")


class FakeRetriever:
    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append((query, k))
        return [Hit(str(i), f"Title {i}", f"passage {i}", 1.0 / (i + 1)) for i in range(k)]


@pytest.mark.parametrize("prompt_format", ["raw", "chat"])
def test_methods_run_through_the_model(tiny_model_dir, prompt_format):
    lm = HFModel(tiny_model_dir)
    retriever = FakeRetriever()
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format=prompt_format, max_new_tokens=5, retriever=retriever)
    example = Example("q1", "Where was Idris Penhallow born?", ["Carrowmere"], "span")
    no_rag = method_class("wo-rag")({}, ctx).answer(example)
    assert no_rag.retrievals == 0 and "Context:" not in no_rag.prompt and no_rag.llm_calls == 1
    rag = method_class("sr-rag")({"top_k": 2}, ctx).answer(example)
    assert retriever.queries == [(example.question, 2)]
    assert rag.retrievals == 1 and [p["id"] for p in rag.passages] == ["0", "1"]
    assert "[1] Title 0: passage 0\n[2] Title 1: passage 1" in rag.prompt
    assert rag.prompt.index("Context:") > rag.prompt.index(EXEMPLARS[0].question)


def test_hub_id_source_loads_through_from_pretrained_offline(tiny_llama_dir, tmp_path):
    """A hub id goes through the same `from_pretrained` call; here it resolves from an offline HF cache."""
    revision = "0" * 40
    snapshot = tmp_path / "hub" / "models--tiny-org--tiny-llama" / "snapshots" / revision
    shutil.copytree(tiny_llama_dir, snapshot)
    (tmp_path / "hub" / "models--tiny-org--tiny-llama" / "refs").mkdir()
    (tmp_path / "hub" / "models--tiny-org--tiny-llama" / "refs" / "main").write_text(revision)
    params = tmp_path / "params.yaml"
    from conftest import write_params

    write_params(params, model={"name": "tiny", "source": "tiny-org/tiny-llama"})
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "models" / "tiny"
    result = subprocess.run([sys.executable, "-m", "adaptive_rag", "--params", str(params), "model", "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "identity.json").read_text())["source"] == "tiny-org/tiny-llama"
    assert (out / "model.safetensors").is_file()
