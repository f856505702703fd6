"""The demo's single-hop set (`data/demo/single_demo.json`) and its exemplars keep the promises of its README.

The set exists to show what retrieval does for a small model, so what matters is that each answer can
only come from one passage: it is in that passage verbatim, no other passage states the fact, and no
exemplar gives it away.
"""

import importlib.util
import json
import re

import pytest

from adaptive_rag.config import load_params
from adaptive_rag.data.corpus import iter_passages
from adaptive_rag.data.datasets import load_dataset
from adaptive_rag.prompts.fewshot import load_exemplars
from conftest import REPO

DEMO = REPO / "data" / "demo"


@pytest.fixture(scope="module")
def dataset():
    """The dataset as the workflow reads it: through params.yaml's `demo-single` entry and the loader."""
    return load_params(REPO / "params.yaml").dataset("demo-single")


@pytest.fixture(scope="module")
def raw():
    return json.loads((DEMO / "single_demo.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def corpus():
    return {p.title: p.text for p in iter_passages(DEMO / "psgs_demo.tsv")}


def builder():
    spec = importlib.util.spec_from_file_location("build_single_demo", DEMO / "build_single_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def whole_words(phrase: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def test_loads_through_the_project_loader(dataset, raw):
    examples = load_dataset(dataset.format, dataset.path)
    assert len(examples) == len(raw) == 48
    assert [e.id for e in examples] == [f"single-{n:03d}" for n in range(1, 49)]
    assert {(e.metadata["type"], e.metadata["level"]) for e in examples} == {("single-hop", "easy")}
    assert all(e.answer_type == "span" and len(e.metadata["supporting_titles"]) == 1 for e in examples)


def test_each_answer_is_in_its_one_gold_passage(raw, corpus):
    for record in raw:
        [(title, index)] = record["supporting_facts"]
        context = dict(record["context"])
        assert len(record["context"]) == len(context) == 10 and title in context, record["_id"]
        assert all(" ".join(sentences) == corpus[t] for t, sentences in context.items()), record["_id"]
        assert 0 <= index < len(context[title]), record["_id"]
        assert whole_words(record["answer"], corpus[title]), record["_id"]


def test_no_other_passage_states_the_fact_and_the_file_is_what_the_script_builds(raw, corpus):
    """The build script's own check (no other passage names both the subject and the answer, answers used
    at most twice, gold passages apart from the two-hop set's and the exemplars') passes, and rebuilding
    gives the committed file, so the file and the hand-written questions in the script cannot drift apart."""
    build = builder()
    build.check(build.passages())  # exits with the broken rule otherwise
    assert build.build(build.passages()) == raw


def test_exemplars_are_single_hop_and_give_no_answer_away(dataset, raw):
    exemplars = load_exemplars(dataset.exemplars, dataset.num_exemplars)
    assert len(exemplars) == 8
    for e in exemplars:  # one step: a single sentence, so the prompt never shows a second hop
        assert len(re.split(r"(?<=\.)\s+(?=[A-Z])", e.reasoning)) == 1, e.question
    two_hop = load_exemplars(DEMO / "exemplars.json", 8)
    answers = {r["answer"] for r in raw}
    assert not answers & {e.answer for e in exemplars + two_hop}
    assert not {r["question"] for r in raw} & {e.question for e in exemplars + two_hop}
