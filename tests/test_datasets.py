"""The HotpotQA-format loader on the embedded demo, the real sample, and malformed files."""

import json

import pytest

from adaptive_rag.data.datasets import load_dataset, load_hotpotqa
from adaptive_rag.errors import InputError
from adaptive_rag.prompts.fewshot import load_exemplars
from conftest import REPO

DEMO = REPO / "data" / "demo"


def test_demo_dataset_loads_in_official_format():
    raw = json.loads((DEMO / "hotpot_demo.json").read_text())
    examples = load_hotpotqa(DEMO / "hotpot_demo.json")
    assert 30 <= len(examples) <= 60 and len(examples) == len(raw)
    assert {e.metadata["type"] for e in examples} == {"bridge", "comparison"}
    assert len({e.id for e in examples}) == len(examples)
    first = examples[0]
    assert first.id == raw[0]["_id"] and first.answers == [raw[0]["answer"]]
    assert set(first.metadata["supporting_titles"]) == {t for t, _ in raw[0]["supporting_facts"]}


def test_demo_gold_paragraphs_are_in_the_demo_corpus():
    from adaptive_rag.data.corpus import iter_passages

    titles = {p.title for p in iter_passages(DEMO / "psgs_demo.tsv")}
    assert 200 <= len(titles) <= 500
    for example in load_hotpotqa(DEMO / "hotpot_demo.json"):
        assert set(example.metadata["supporting_titles"]) <= titles, example.id


def test_demo_exemplars_do_not_leak_test_questions():
    exemplars = load_exemplars(DEMO / "exemplars.json", 8)
    questions = {e.question for e in load_hotpotqa(DEMO / "hotpot_demo.json")}
    assert len(exemplars) == 8 and not questions & {e.question for e in exemplars}


def test_real_hotpotqa_sample_loads(shared_data):
    examples = load_dataset("hotpotqa", shared_data / "benchmarks/hotpotqa/hotpot_train_sample.json")
    assert len(examples) == 100
    assert all(e.question and e.answers[0] for e in examples)


@pytest.mark.parametrize(
    "records, message",
    [
        ({"not": "a list"}, "expected a JSON list"),
        ([], "contains no records"),
        ([{"_id": "a", "answer": "x"}], "record 0, field 'question': missing"),
        ([{"_id": "a", "question": "q?", "answer": 3}], "record 0, field 'answer': expected str, got int"),
        ([{"_id": "a", "question": "q?", "answer": "x"}, "oops"], "record 1: expected an object"),
        ([{"_id": "a", "question": "q?", "answer": " "}], "record 0, field 'answer': is empty"),
        ([{"_id": "a", "question": "q?", "answer": "x", "context": [["t"]]}], "field 'context': entry 0"),
        ([{"_id": "a", "question": "q?", "answer": "x"}, {"_id": "a", "question": "r?", "answer": "y"}],
         "record 1: id 'a' repeats record 0"),
    ],
)
def test_malformed_records_name_file_record_and_field(tmp_path, records, message):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(records))
    with pytest.raises(InputError) as err:
        load_hotpotqa(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text('[\n{"_id": "a",\n "question": }\n]')
    with pytest.raises(InputError, match=r"dev.json: line 3: invalid JSON"):
        load_hotpotqa(path)


def test_exemplar_file_errors(tmp_path):
    path = tmp_path / "ex.json"
    path.write_text(json.dumps([{"question": "q", "reasoning": "r"}]))
    with pytest.raises(InputError, match="record 0, field 'answer'"):
        load_exemplars(path, 1)
    path.write_text(json.dumps([{"question": "q", "reasoning": "r", "answer": "a"}]))
    with pytest.raises(InputError, match="num_exemplars is 2 but the file has only 1"):
        load_exemplars(path, 2)
