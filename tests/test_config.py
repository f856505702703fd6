"""params.yaml validation: every mistake names the key and what was expected."""

import copy

import pytest
import yaml

from adaptive_rag.config import load_params, parse_params
from adaptive_rag.errors import ConfigError
from conftest import REPO


@pytest.fixture
def base():
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_repository_params_are_valid(base):
    params = parse_params(base)
    assert params.experiment_methods == ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin"]
    assert params.methods["sr-rag"].settings == {"top_k": 3, "retriever": None}
    assert params.generation.decoding == "greedy"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["model"].pop("source"), "model.source: missing required key"),
        (lambda d: d["model"].update(dtype="fp8"), "model.dtype: must be one of float32, bfloat16, float16"),
        (lambda d: d["model"].update(device="tpu"), "model.device: must be cpu, cuda or cuda:N"),
        (lambda d: d["model"].update(prompt_fromat="raw"), "model.prompt_fromat: unknown key"),
        (lambda d: d["methods"]["sr-rag"].update(top_k="three"), "methods.sr-rag.top_k: expected an integer >= 1"),
        (lambda d: d["methods"]["sr-rag"].update(top_k=0), "methods.sr-rag.top_k: expected an integer >= 1"),
        (lambda d: d["methods"]["sr-rag"].update(topk=3), "methods.sr-rag.topk: unknown key"),
        (lambda d: d["methods"].update({"my-flare": {"type": "flair"}}), "unknown method type 'flair'"),
        (lambda d: d["experiment"].update(methods=["wo-rag", "seakr"]), "experiment.methods: names 'seakr'"),
        (lambda d: d["experiment"].update(datasets=["nq"]), "experiment.datasets: names 'nq'"),
        (lambda d: d["generation"].update(decoding="sample"), "generation.decoding: must be one of greedy"),
        (lambda d: d["generation"].update(max_new_tokens=-5), "generation.max_new_tokens: expected an integer >= 1"),
        (lambda d: d["retrieval"]["bm25"].update(b=1.5), "retrieval.bm25.b: must be between 0 and 1"),
        (lambda d: d["datasets"]["demo"]["sample"].update(mode="shuffle"), "datasets.demo.sample.mode: must be one of"),
        (lambda d: d["datasets"]["demo"].update(format="csv"), "datasets.demo.format: must be one of hotpotqa"),
        (lambda d: d.pop("corpus"), "corpus: missing required key"),
        (lambda d: d.update(sede=1), "sede: unknown key"),
        (lambda d: d["methods"].update({"sr rag/2": {"type": "sr-rag"}}), "methods.sr rag/2: method names may use"),
        (lambda d: d["datasets"].update({"../x": d["datasets"]["demo"]}), "datasets.../x: dataset names may use"),
    ],
)
def test_invalid_params_name_the_key(base, mutate, message):
    data = copy.deepcopy(base)
    mutate(data)
    with pytest.raises(ConfigError) as err:
        parse_params(data, "params.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("params.yaml: ")


def test_method_entry_may_be_empty_and_type_defaults_to_name(base):
    base["methods"]["wo-rag"] = None
    base["methods"]["sr-rag-k5"] = {"type": "sr-rag", "top_k": 5}
    params = parse_params(base)
    assert params.methods["wo-rag"].type == "wo-rag"
    assert params.methods["sr-rag-k5"].settings == {"top_k": 5, "retriever": None}


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_params(bad)
