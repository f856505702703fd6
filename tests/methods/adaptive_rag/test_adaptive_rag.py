"""The `adaptive-rag` method: the label is the argmax of the classifier's probabilities
(starsuzi/Adaptive-RAG classifier/run_classifier.py: `np.argmax(probs, 0)` over A, B, C), and each
question gets the answer of its label's strategy (classifier/postprocess/
predict_complexity_on_classification_results.py, `save_prediction_with_classified_label`), here the
existing method's own answer. Scripted LM, recording retriever, a classifier of fixed probabilities;
check-params' refusals; and the workflow on the demo with the tiny Llama (labels, classifier, run)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.methods.adaptive_rag import adaptive_rag as module
from adaptive_rag.methods.adaptive_rag.adaptive_rag import AdaptiveRAG, route
from adaptive_rag.methods.base import Context
from adaptive_rag.methods.fs_rag import FixedSentenceRetrieval
from adaptive_rag.methods.sr_rag import SingleRoundRetrieval
from adaptive_rag.methods.wo_rag import WithoutRetrieval

from conftest import (ANSWER, BORN, REGEN, REPO, SCRIPTED_EXEMPLARS, RecordingRetriever, ScriptedLM, cont,
                      copy_workflow, edit_params, read_jsonl, settings_of, snakemake)

TWO = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."], finish="stop")
BARE = cont([" So", " the", " answer", " is", " Lyon", "."], finish="stop")
SCRIPT = {(False, ""): BARE, (True, ""): TWO, (True, BORN): REGEN, (True, BORN + " He died in 1750."): ANSWER,
          (False, " Inchcombe was born in Paris. He died in 1750. So the answer is"): cont([" Paris", "."])}
SETTINGS = {"classifier_kind": "minilm-logistic", "multi": {"max_passages": 15}}


@pytest.mark.parametrize("probabilities, label", [
    ([0.2, 0.5, 0.3], "B"), ([0.6, 0.3, 0.1], "A"), ([0.1, 0.2, 0.7], "C"),
    ([0.4, 0.4, 0.2], "A"), ([0.1, 0.45, 0.45], "B"),  # ties: argmax's first, the cheaper strategy
])
def test_the_label_is_the_most_probable_one(probabilities, label):
    assert route(probabilities) == label


class FixedClassifier:
    """A classifier whose probabilities are given per question; `question_ids` are its labelled ones."""

    def __init__(self, probabilities: dict, kind="minilm-logistic", question_ids=frozenset()):
        self.table, self.kind, self.question_ids = probabilities, kind, question_ids
        self.calls = []

    def probabilities(self, questions):
        import numpy as np

        self.calls.append(list(questions))
        return np.array([self.table[q] for q in questions])


def build(monkeypatch, classifier, settings=None):
    monkeypatch.setattr(module, "load", lambda path: classifier)
    lm, retriever = ScriptedLM(SCRIPT), RecordingRetriever()
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50, retriever=retriever,
                  answer_fallback_tokens=5, inputs={})
    return AdaptiveRAG(settings_of(AdaptiveRAG, settings or SETTINGS, "methods.adaptive-rag"), ctx), lm, retriever


def alone(cls, settings, question):
    """One question answered by a strategy's own method over a fresh scripted model and retriever."""
    lm, retriever = ScriptedLM(SCRIPT), RecordingRetriever()
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50, retriever=retriever,
                  answer_fallback_tokens=5)
    [answer] = cls(settings_of(cls, settings, "methods.x"), ctx).answer_batch([Example("x", question, ["Paris"], "span")])
    return answer, retriever.queries


def drop(record: dict, *keys) -> dict:
    return {k: v for k, v in record.items() if k not in keys}


def ranks(answer):
    """The passages as kept, less the recording retriever's search numbers in their ids and titles."""
    return [drop(p, "id", "title") for p in answer.passages]


def question_of(qid: str) -> str:
    return list(QUESTIONS)[int(qid[1:]) - 1]


QUESTIONS = {"Where was Inchcombe born? (1)": [0.1, 0.2, 0.7], "Where was Inchcombe born? (2)": [0.7, 0.2, 0.1],
             "Where was Inchcombe born? (3)": [0.2, 0.5, 0.3], "Where was Inchcombe born? (4)": [0.5, 0.3, 0.2]}


def test_each_question_gets_exactly_the_answer_of_its_labels_strategy(monkeypatch):
    classifier = FixedClassifier(QUESTIONS)
    method, lm, retriever = build(monkeypatch, classifier)
    examples = [Example(f"q{i}", q, ["Paris"], "span") for i, q in enumerate(QUESTIONS, 1)]
    answers = method.answer_batch(examples)
    assert classifier.calls == [list(QUESTIONS)]  # one classifier call for the batch
    strategies = {"A": (WithoutRetrieval, {}), "B": (SingleRoundRetrieval, {}),
                  "C": (FixedSentenceRetrieval, {"accumulate": True})}
    queries = {"A": [], "B": [question_of("q3")], "C": [question_of("q1"), "Inchcombe was born in Paris.",
                                                        "He died in 1750."]}
    for answer, (question, p), label in zip(answers, QUESTIONS.items(), ["C", "A", "B", "A"]):
        own, own_queries = alone(*strategies[label], question)
        assert (answer.output, answer.counters(), ranks(answer)) == (own.output, own.counters(), ranks(own))
        assert answer.steps[0] == {"phase": "adaptive-rag", "classifier": "minilm-logistic", "label": label,
                                   "route": {"A": "none", "B": "single", "C": "multi"}[label],
                                   "probabilities": dict(zip("ABC", p))}
        assert [drop(step, "retrieved") for step in answer.steps[1:]] == [drop(step, "retrieved") for step in own.steps]
        assert [q for q, _ in own_queries] == queries[label]
    # A's two questions in one call, then B's, then C's loop (three retrievals: question, then each sentence)
    assert lm.batches[:2] == [2, 1]
    assert [q for q, _ in retriever.queries] == ["Where was Inchcombe born? (3)", "Where was Inchcombe born? (1)",
                                                 "Inchcombe was born in Paris.", "He died in 1750."]
    assert [a.retrievals for a in answers] == [3, 0, 1, 0]


def test_questions_the_classifier_was_trained_or_held_out_on_are_refused(monkeypatch):
    method, _, _ = build(monkeypatch, FixedClassifier(QUESTIONS, question_ids=frozenset({"q2", "q9"})))
    with pytest.raises(InputError, match=r"questions q2 are among the labelled questions of "
                                         r"data/complexity/classifier.safetensors: evaluate on questions the "
                                         r"classifier was neither trained nor held out on"):
        method.answer_batch([Example(f"q{i}", q, ["Paris"], "span") for i, q in enumerate(QUESTIONS, 1)])


def test_a_classifier_of_another_kind_than_the_settings_say_is_refused(monkeypatch):
    with pytest.raises(InputError, match=r"classifier.safetensors: a t5 classifier, but this method's classifier_kind "
                                         r"is 'minilm-logistic'; set classifier_kind: t5 or retrain"):
        build(monkeypatch, FixedClassifier(QUESTIONS, kind="t5"))


def test_branches_are_the_strategies_of_the_demo_and_take_the_methods_retriever():
    """The demo's strategies answer in SUGAR's prompt (its Table I's rows); unset, a branch is its type's
    defaults (the chain of thought, IRCoT without a cap)."""
    demo = yaml.safe_load((REPO / "params.yaml").read_text())
    params = parse_params(demo)
    settings = params.methods["adaptive-rag"].settings
    for branch, name in (("none", "wo-rag-qa"), ("single", "sr-rag-qa"), ("multi", "ircot-8")):
        assert settings[branch] == params.methods[name].settings
    bare = settings_of(AdaptiveRAG, {}, "methods.a")
    assert (bare["none"], bare["single"]) == ({}, {"top_k": 3, "retriever": None})
    dense = settings_of(AdaptiveRAG, {"retriever": "dense", "single": {"top_k": 5}}, "methods.a")
    assert dense["single"] == {"top_k": 5, "retriever": "dense"} and dense["multi"]["retriever"] == "dense"
    assert dense["multi"]["accumulate"] is True and "retriever" not in dense["none"]
    assert AdaptiveRAG.inputs(dense, "demo", "a") == {"classifier": "data/complexity/classifier.safetensors"}
    assert AdaptiveRAG.row_note(dense) is None and AdaptiveRAG.row_note(settings) == "classifier: minilm-logistic"
    for branch, key in (("single", "retriever"), ("multi", "accumulate")):
        with pytest.raises(ConfigError, match=rf"methods.a.{branch}.{key}: not a branch setting"):
            settings_of(AdaptiveRAG, {branch: {key: "dense" if key == "retriever" else False}}, "methods.a")


def refused(edit):
    data = copy.deepcopy(yaml.safe_load((REPO / "params.yaml").read_text()))
    edit(data)
    with pytest.raises(ConfigError) as info:
        parse_params(data)
    return str(info.value)


def test_check_params_refuses_what_the_labels_and_the_routing_cannot_agree_on():
    assert refused(lambda d: d["complexity_classifier"]["datasets"].update({"demo-calib": "two-hop"})) == (
        "params.yaml: complexity_classifier.datasets.demo-calib: must be one of single-hop, multi-hop; got 'two-hop'")
    assert refused(lambda d: d["complexity_classifier"]["datasets"].update({"demo-small": "multi-hop"})).startswith(
        "params.yaml: complexity_classifier.datasets.demo-small: 'demo-small' is evaluated (method ")
    assert refused(lambda d: d["complexity_classifier"]["strategies"].update(C="fs-rag")) == (
        "params.yaml: complexity_classifier.strategies.C: 'fs-rag' is of type 'fs-rag'; strategy C must be a "
        "method of type fs-rag with accumulate: true (IRCoT)")
    assert refused(lambda d: d["complexity_classifier"]["strategies"].update(B="wo-rag")) == (
        "params.yaml: complexity_classifier.strategies.B: 'wo-rag' is of type 'wo-rag'; strategy B must be a "
        "method of type sr-rag")
    assert refused(lambda d: d["methods"]["adaptive-rag"].update(single={"top_k": 5})) == (
        "params.yaml: methods.adaptive-rag.single: answers label B with {'top_k': 5, 'retriever': None}, but the "
        "classifier's labels come from methods.sr-rag ({'top_k': 3, 'retriever': None}); give both the same settings")
    assert refused(lambda d: d.pop("complexity_classifier")) == (
        "params.yaml: methods.sugar-table1--adaptive-rag: runs on demo-single-small read the query-complexity "
        "classifier data/complexity/classifier.safetensors, which only complexity_classifier: trains; configure "
        "that section (docs/configuration.md#adaptive-rags-classifier) or set `classifier` to a trained file")
    assert refused(lambda d: d["methods"]["adaptive-rag"].update(classifier_kind="t5")) == (
        "params.yaml: methods.adaptive-rag.classifier_kind: 't5', but complexity_classifier.classifier trains "
        "'minilm-logistic'; set both to the same kind")


def test_dvc_stages_own_the_labels_and_the_classifier_and_the_runs_wait_for_it():
    from adaptive_rag.dvc_stages import build_stages

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    stages = build_stages(parse_params(data))
    labels, train = stages["complexity_labels"], stages["train_complexity_classifier"]
    assert labels["outs"] == ["data/complexity/labels.jsonl"] and labels["cmd"].endswith(" complexity_labels")
    assert {"data/splits/demo-calib.jsonl", "data/splits/demo-single-calib.jsonl", "data/index/demo/bm25"} <= set(
        labels["deps"])
    assert {"complexity_classifier.datasets", "complexity_classifier.strategies", "methods.wo-rag", "methods.sr-rag",
            "methods.ircot", "datasets.demo-calib", "datasets.demo-single-calib"} <= set(labels["params"])
    assert train["outs"] == ["data/complexity/classifier.safetensors", "data/complexity/classifier.metrics.json"]
    assert train["deps"][0] == "data/complexity/labels.jsonl"
    assert "data/complexity/classifier.safetensors" in stages["ablation_sugar_table1"]["deps"]
    data.pop("complexity_classifier")
    data["methods"]["adaptive-rag"]["classifier"] = "data/my-classifier.safetensors"  # a file of one's own
    assert not any(name in build_stages(parse_params(data)) for name in ("complexity_labels",
                                                                         "train_complexity_classifier"))


@pytest.mark.slow
def test_workflow_labels_trains_and_routes_the_demo_with_the_tiny_model(tiny_llama_dir, tmp_path):
    """The labels come from the three strategies' runs on the labelled splits (the tiny model answers
    nothing, so every label is its dataset's: C for demo-calib, B for demo-single-calib), the classifier
    trains with its metrics beside it, and the run on demo-small routes each question by its label."""
    from test_workflow import tiny_params

    copy_workflow(tmp_path)

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["datasets"]["demo-small"]["sample"]["size"] = 3
        for name in ("demo-calib", "demo-single-calib"):
            data["datasets"][name]["sample"].update(size=4, skip=3)
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "complexity_classifier", "data/runs/demo-small/adaptive-rag/predictions.jsonl")
    labels = read_jsonl(tmp_path / "data/complexity/labels.jsonl")
    assert [(r["dataset"], r["label"]) for r in labels] == [("demo-calib", "C")] * 4 + [("demo-single-calib", "B")] * 4
    assert all(r["why"].startswith("binary") for r in labels)
    metrics = json.loads((tmp_path / "data/complexity/classifier.metrics.json").read_text())["metrics"]
    assert metrics["test"]["n"] == 2 and metrics["distribution"]["all"] == {"A": 0, "B": 4, "C": 4}
    records = read_jsonl(tmp_path / "data/runs/demo-small/adaptive-rag/predictions.jsonl")
    trace = read_jsonl(tmp_path / "data/runs/demo-small/adaptive-rag/trace.jsonl")
    assert len(records) == 3 and len(trace) == 3
    for record, steps in zip(records, trace):
        first = steps["steps"][0]
        assert first["phase"] == "adaptive-rag" and first["label"] in ("B", "C")
        assert (record["counters"]["retrievals"] == 1) if first["label"] == "B" else record["counters"]["retrievals"] >= 1
    # a retrained classifier reruns the run (the weights are one of its inputs); the labels stay
    target = "data/runs/demo-small/adaptive-rag/predictions.jsonl"
    assert "Nothing to be done" in snakemake(tmp_path, "-n", target).stdout
    edit_params(tmp_path, lambda data: data["complexity_classifier"].update(seed=1))
    dry = snakemake(tmp_path, "-n", target).stdout
    assert "rule train_complexity_classifier:" in dry and "rule generate:" in dry
    assert "rule complexity_labels:" not in dry
