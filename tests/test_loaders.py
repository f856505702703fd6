"""Benchmark loaders beyond HotpotQA: hand-written fixtures in each official format, the real files
under ../shared/data read in place, and malformed inputs whose errors name file, record/line and field."""

import json
import logging
import shutil

import pytest

from adaptive_rag.data.datasets import (
    LOADERS,
    load_2wiki_aliases,
    load_2wikimultihopqa,
    load_dataset,
    load_iirc,
    load_nq,
    load_squad,
    load_strategyqa,
    load_triviaqa,
)
from adaptive_rag.errors import InputError
from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures"


def by_id(examples):
    return {e.id: e for e in examples}


def test_registry_names():
    assert set(LOADERS) == {"hotpotqa", "2wikimultihopqa", "iirc", "strategyqa", "nq", "triviaqa", "squad"}


# --- fixtures in the official formats ----------------------------------------------------------

def test_2wiki_full_maps_aliases_by_answer_id():
    examples = load_dataset("2wikimultihopqa", FIXTURES / "2wikimultihopqa" / "dev.json")
    assert [e.id for e in examples] == ["w2-fx-1", "w2-fx-2", "w2-fx-3", "w2-fx-4"]
    ex = by_id(examples)
    # gold first, aliases after, the alias equal to the gold answer not repeated
    assert ex["w2-fx-1"].answers == ["Sabine Fennimore", "Sabine F."]
    assert ex["w2-fx-2"].answers == ["The Reed Beds", "Reed Beds"]
    assert ex["w2-fx-4"].answers == ["Velmark", "Republic of Velmark", "Velmarkian"]  # demonyms count too
    assert ex["w2-fx-3"].answers == ["yes"] and ex["w2-fx-3"].answer_type == "yes/no"
    assert "answer_id" not in ex["w2-fx-3"].metadata
    first = ex["w2-fx-1"]
    assert first.answer_type == "span"
    assert first.metadata["type"] == "compositional" and first.metadata["answer_id"] == "Q9000001"
    assert first.metadata["supporting_titles"] == ["Lanterns Over Pennick", "Orla Fennimore"]
    assert first.metadata["evidences"][1] == ["Orla Fennimore", "mother", "Sabine Fennimore"]


def test_2wiki_full_without_alias_file_keeps_the_answer_only(tmp_path):
    shutil.copy(FIXTURES / "2wikimultihopqa" / "dev.json", tmp_path / "dev.json")
    examples = load_2wikimultihopqa(tmp_path / "dev.json")
    assert all(len(e.answers) == 1 for e in examples)


def test_2wiki_reduced_form():
    examples = load_2wikimultihopqa(FIXTURES / "2wikimultihopqa" / "reduced" / "dev_questions.json")
    assert [e.id for e in examples] == ["0", "1", "2", "3"]
    assert examples[0].answers == ["Sabine Fennimore", "Sabine F."]
    assert examples[2].answers == ["3 March 1702"]  # a lone string is a list of one
    assert examples[3].answer_type == "yes/no" and examples[0].answer_type == "span"


def test_iirc_answer_types_and_none_dropped_with_warning(caplog):
    path = FIXTURES / "iirc" / "dev.json"
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.data"):
        examples = load_iirc(path)
    assert [e.id for e in examples] == ["iirc-q1", "iirc-q2", "iirc-q4", "iirc-q5"]
    ex = by_id(examples)
    assert ex["iirc-q1"].answers == ["Ilse Varnholt, Teodor Quill", "Ilse Varnholt", "Teodor Quill"]
    assert ex["iirc-q1"].answer_type == "span"
    assert ex["iirc-q2"].answers == ["41", "41 years"] and ex["iirc-q2"].answer_type == "value"
    assert ex["iirc-q5"].answers == ["12"]  # empty unit: no alias
    assert ex["iirc-q4"].answers == ["yes"] and ex["iirc-q4"].answer_type == "yes/no"
    assert ex["iirc-q1"].metadata == {"title": "Marrowdale Observatory", "iirc_answer_type": "span"}
    assert ex["iirc-q4"].metadata == {"title": "Brasswick Canal", "iirc_answer_type": "binary"}
    warnings = [r for r in caplog.records if r.name == "adaptive_rag.data" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert str(path) in message and "dropped 2 of 6" in message and "'none'" in message


def test_iirc_without_none_answers_logs_nothing(tmp_path, caplog):
    articles = json.loads((FIXTURES / "iirc" / "dev.json").read_text())
    for article in articles:
        article["questions"] = [q for q in article["questions"] if q["answer"]["type"] != "none"]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(articles))
    with caplog.at_level(logging.WARNING, logger="adaptive_rag.data"):
        assert len(load_iirc(path)) == 4
    assert not [r for r in caplog.records if r.name == "adaptive_rag.data"]


def test_iirc_binary_as_answer_binary_field(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([{"title": "T", "questions": [
        {"qid": "a", "question": "q?", "answer": {"type": "binary", "answer_binary": False}},
        {"qid": "b", "question": "r?", "answer": {"type": "binary", "answer_binary": "yes"}},
    ]}]))
    assert [e.answers for e in load_iirc(path)] == [["no"], ["yes"]]


def test_iirc_only_none_answers_is_an_error(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_iirc({"type": "none"})))
    with pytest.raises(InputError, match="contains no answerable questions"):
        load_iirc(path)


def test_triviaqa_value_then_deduplicated_aliases():
    examples = load_dataset("triviaqa", FIXTURES / "triviaqa" / "unfiltered-web-dev.json")
    ex = by_id(examples)
    assert list(ex) == ["tqa_fx_1", "tqa_fx_2", "tqa_fx_3"]
    assert ex["tqa_fx_1"].answers == ["Quillmoor", "The Quillmoor", "quillmoor"]
    assert ex["tqa_fx_2"].answers == ["seven", "7"]
    assert ex["tqa_fx_3"].answers == ["The Brass Lantern"]
    assert ex["tqa_fx_1"].question.startswith("Which invented moorland")
    assert ex["tqa_fx_2"].metadata == {"triviaqa_answer_type": "Numerical"}


def test_squad_one_example_per_qa_with_unique_answers():
    examples = load_dataset("squad", FIXTURES / "squad" / "dev-v1.1.json")
    assert [e.id for e in examples] == ["sq-fx-1", "sq-fx-2", "sq-fx-3", "sq-fx-4"]
    ex = by_id(examples)
    assert ex["sq-fx-1"].answers == ["Thursday", "every Thursday"]
    assert ex["sq-fx-2"].answers == ["the Brass Lantern", "Brass Lantern inn"]
    assert ex["sq-fx-3"].metadata == {"title": "Hollin_Cross"}
    assert ex["sq-fx-4"].metadata == {"title": "Glass_heron"}


def test_strategyqa_fixture():
    examples = load_strategyqa(FIXTURES / "strategyqa" / "dev.json")
    assert [e.answers for e in examples] == [["no"], ["yes"], ["no"]]
    assert {e.answer_type for e in examples} == {"yes/no"}
    assert examples[1].metadata["decomposition"][-1] == "Is #2 less than #1?"
    assert examples[0].metadata["facts"] == ["Glass herons nest only in reed beds.", "Deserts have no reed beds."]


def test_nq_fixture_ids_from_line_index():
    examples = load_nq(FIXTURES / "nq" / "NQ-open.dev.jsonl")
    assert [e.id for e in examples] == ["nq-0", "nq-1", "nq-2"]
    assert examples[1].answers == ["seven", "7"]
    assert examples[2].answers == ["1888", "in 1888"]


def test_examples_round_trip_through_dicts():
    for fmt, rel in [("iirc", "iirc/dev.json"), ("squad", "squad/dev-v1.1.json"), ("nq", "nq/NQ-open.dev.jsonl")]:
        for example in load_dataset(fmt, FIXTURES / rel):
            assert type(example).from_dict(json.loads(json.dumps(example.to_dict()))) == example


# --- the real files, read in place ---------------------------------------------------------------

def test_real_2wiki_reduced_file(shared_data):
    examples = load_dataset("2wikimultihopqa", shared_data / "benchmarks/2wikimultihopqa/dev_questions_1000.json")
    assert len(examples) == 1000 and len({e.id for e in examples}) == 1000
    assert all(isinstance(e.answers, list) and e.answers and all(a.strip() for a in e.answers) for e in examples)
    assert all(e.question.strip() for e in examples) and examples[0].id == "0" and examples[-1].id == "999"
    assert any(len(e.answers) > 1 for e in examples)
    assert {e.answer_type for e in examples} <= {"span", "yes/no"}


@pytest.mark.parametrize("split, count", [("train", 2061), ("dev", 229)])
def test_real_strategyqa(shared_data, split, count):
    examples = load_dataset("strategyqa", shared_data / f"benchmarks/strategyqa/{split}.json")
    assert len(examples) == count
    assert {tuple(e.answers) for e in examples} == {("yes",), ("no",)}
    assert all(e.answer_type == "yes/no" and e.question for e in examples)
    assert all(e.metadata["decomposition"] for e in examples)


def test_real_nq_open_dev(shared_data):
    examples = load_dataset("nq", shared_data / "benchmarks/nq/NQ-open.dev.jsonl")
    assert len(examples) == 3610
    assert examples[0].id == "nq-0" and examples[-1].id == "nq-3609"
    assert all(e.answers and all(a.strip() for a in e.answers) and e.question for e in examples)


# --- malformed input: file + record/line + field -------------------------------------------------

def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _raises(loader, path, *fragments):
    with pytest.raises(InputError) as err:
        loader(path)
    message = str(err.value)
    assert message.startswith(str(path)), message
    for fragment in fragments:
        assert fragment in message, message
    return message


W2 = {"_id": "a", "type": "comparison", "question": "q?", "context": [], "supporting_facts": [],
      "evidences": [], "answer": "x"}


@pytest.mark.parametrize("records, fragments", [
    ([dict(W2, answer=["x"])], ["record 0, field 'answer': expected str, got list"]),
    ([W2, dict(W2, _id="b", evidences=[["s", "r"]])], ["record 1, field 'evidences': entry 0"]),
    ([W2, dict(W2, _id="b", context=[["t"]])], ["record 1, field 'context': entry 0"]),
    ([W2, dict(W2, _id="b", answer_id=7)], ["record 1, field 'answer_id': expected str or null, got int"]),
    ([W2, {"test_id": 1, "question": "q?", "answer": ["x"]}], ["record 1, field '_id': missing"]),
    ([W2, dict(W2)], ["record 1: id 'a' repeats record 0"]),
    ([{"test_id": 0, "question": "q?", "answer": []}], ["record 0, field 'answer': is an empty list"]),
    ([{"test_id": 0, "question": "q?", "answer": ["x", 3]}], ["record 0, field 'answer[1]': expected str, got int"]),
    ([{"test_id": True, "question": "q?", "answer": "x"}],
     ["record 0, field 'test_id': expected int or str, got bool"]),
    ([{"test_id": 0, "question": "q?", "answer": "x"}, {"test_id": 0, "question": "r?", "answer": "y"}],
     ["record 1: id '0' repeats record 0"]),
    ([{"id": 0, "question": "q?"}], ["record 0: has neither '_id'", "'test_id'"]),
    ([], ["contains no records"]),
])
def test_2wiki_errors(tmp_path, records, fragments):
    _raises(load_2wikimultihopqa, _write(tmp_path, "dev.json", records), *fragments)


def test_2wiki_alias_file_errors_name_line_and_field(tmp_path):
    path = _write(tmp_path, "dev.json", [dict(W2, answer_id="Q1")])
    aliases = tmp_path / "id_aliases.json"
    aliases.write_text('{"Q_id": "Q1", "aliases": ["x"], "demonyms": []}\n{"Q_id": "Q2", "aliases": "y"}\n')
    _raises(load_2wiki_aliases, aliases, "line 2, field 'aliases': expected list, got str")
    with pytest.raises(InputError, match="line 2, field 'aliases'"):
        load_2wikimultihopqa(path)
    aliases.write_text('{"Q_id": "Q1", "aliases": ["x"]}\n{"Q_id": "Q1", "aliases": ["z"]}\n')
    _raises(load_2wiki_aliases, aliases, "line 2, field 'Q_id': 'Q1' already listed with other aliases on line 1")
    aliases.write_text('{"Q_id": "Q1", "aliases": ["x"]}\n{"Q_id": "Q1", "aliases": ["x"]}\n')
    assert load_2wiki_aliases(aliases) == {"Q1": ["x"]}
    aliases.write_text('{"Q_id": "Q1", "aliases": ["x"]}\n{"Q_id": \n')
    _raises(load_2wiki_aliases, aliases, "line 2: invalid JSON")


def _iirc(answer, **question):
    return [{"title": "T", "text": "t", "links": [],
             "questions": [dict({"qid": "a", "question": "q?", "answer": answer, "context": []}, **question)]}]


@pytest.mark.parametrize("articles, fragments", [
    (_iirc({"type": "span", "answer_spans": []}),
     ["record 0, field 'questions[0].answer.answer_spans': is an empty list"]),
    (_iirc({"type": "span", "answer_spans": [{"text": "x"}, {"start": 3}]}),
     ["record 0, field 'questions[0].answer.answer_spans[1].text': missing"]),
    (_iirc({"type": "value", "answer_value": "", "answer_unit": "m"}),
     ["record 0, field 'questions[0].answer.answer_value': is empty"]),
    (_iirc({"type": "value", "answer_value": "3", "answer_unit": 5}),
     ["record 0, field 'questions[0].answer.answer_unit': expected str, got int"]),
    (_iirc({"type": "binary", "answer_value": "maybe"}),
     ["record 0, field 'questions[0].answer.answer_value': expected yes or no"]),
    (_iirc({"type": "count"}), ["record 0, field 'questions[0].answer.type': unknown answer type 'count'"]),
    (_iirc({"answer_value": "3"}), ["record 0, field 'questions[0].answer.type': missing"]),
    (_iirc("yes"), ["record 0, field 'questions[0].answer': expected dict, got str"]),
    (_iirc({"type": "none"}), ["contains no answerable questions (1 questions, 1 of type 'none')"]),
    ([{"title": "T", "questions": ["q"]}], ["record 0, field 'questions[0]': expected an object, got str"]),
    ([{"questions": []}], ["record 0, field 'title': missing"]),
    (_iirc({"type": "value", "answer_value": "1"}) + _iirc({"type": "value", "answer_value": "2"}),
     ["record 1, field 'questions[0]': id 'a' repeats record 0, field 'questions[0]'"]),
])
def test_iirc_errors(tmp_path, articles, fragments):
    path = _write(tmp_path, "dev.json", articles)
    _raises(load_iirc, path, *fragments)


S = {"qid": "a", "term": "t", "description": "d", "question": "q?", "answer": True, "facts": [], "decomposition": []}


@pytest.mark.parametrize("records, fragments", [
    ([dict(S, answer="true")], ["record 0, field 'answer': expected bool, got str"]),
    ([S, dict(S, qid="b", answer=1)], ["record 1, field 'answer': expected bool, got int"]),
    ([S, {k: v for k, v in S.items() if k != "answer"} | {"qid": "b"}], ["record 1, field 'answer': missing"]),
    ([dict(S, facts="f")], ["record 0, field 'facts': expected list, got str"]),
    ([dict(S, decomposition=["ok", ""])], ["record 0, field 'decomposition[1]': is empty"]),
    ([S, S], ["record 1: id 'a' repeats record 0"]),
])
def test_strategyqa_errors(tmp_path, records, fragments):
    _raises(load_strategyqa, _write(tmp_path, "dev.json", records), *fragments)


@pytest.mark.parametrize("text, fragments", [
    ('{"question": "q", "answer": ["a"]}\n{"question": "r", "answer": "b"}\n',
     ["line 2, field 'answer': expected list, got str"]),
    ('{"question": "q", "answer": ["a"]}\n{"question": "r", "answer": ["b", 2]}\n',
     ["line 2, field 'answer[1]': expected str, got int"]),
    ('{"question": "q", "answer": ["a"]}\n{"question": "r", "answer": []}\n',
     ["line 2, field 'answer': is an empty list"]),
    ('{"answer": ["a"]}\n', ["line 1, field 'question': missing"]),
    ('{"question": "q", "answer": ["a"]}\n{"question": "r", \n', ["line 2: invalid JSON"]),
    ('["q", ["a"]]\n', ["line 1: expected an object, got list"]),
    ("", ["contains no records"]),
    ("\n  \n", ["contains no records"]),
])
def test_nq_errors_name_the_line(tmp_path, text, fragments):
    _raises(load_nq, _write(tmp_path, "NQ-open.dev.jsonl", text), *fragments)


def test_nq_a_blank_line_inside_the_file_is_an_error_not_shifted_ids(tmp_path):
    path = _write(tmp_path, "nq.jsonl", '{"question": "q", "answer": ["a"]}\n\n{"question": "r", "answer": ["b"]}\n')
    _raises(load_nq, path, "nq.jsonl: line 2: blank line", "shift every later question's id")


def test_nq_ids_are_line_positions_and_trailing_blank_lines_are_harmless(tmp_path):
    path = _write(tmp_path, "nq.jsonl", '{"question": "q", "answer": ["a"]}\n{"question": "r", "answer": ["b"]}\n\n')
    assert [e.id for e in load_nq(path)] == ["nq-0", "nq-1"]


T = {"Question": "q?", "QuestionId": "t1", "Answer": {"Value": "v", "Aliases": ["v", "w"], "Type": "FreeForm"}}


@pytest.mark.parametrize("document, fragments", [
    ({"Data": [T, dict(T, QuestionId="t2", Answer={"Aliases": ["x"]})]}, ["record 1, field 'Answer.Value': missing"]),
    ({"Data": [dict(T, Answer={"Value": "v", "Aliases": ["ok", 3]})]},
     ["record 0, field 'Answer.Aliases[1]': expected str"]),
    ({"Data": [dict(T, Answer="v")]}, ["record 0, field 'Answer': expected dict, got str"]),
    ({"Data": [{k: v for k, v in T.items() if k != "QuestionId"}]}, ["record 0, field 'QuestionId': missing"]),
    ({"Data": [T, T]}, ["record 1: id 't1' repeats record 0"]),
    ({"Data": []}, ["'Data' contains no records"]),
    ({"data": [T]}, ["top-level field 'Data' is missing"]),
    ([T], ["expected a JSON object with a 'Data' list, got list"]),
])
def test_triviaqa_errors(tmp_path, document, fragments):
    _raises(load_triviaqa, _write(tmp_path, "dev.json", document), *fragments)


def _squad(qa):
    return {"version": "1.1", "data": [{"title": "A", "paragraphs": [{"context": "c", "qas": [
        {"id": "s1", "question": "q?", "answers": [{"text": "x", "answer_start": 0}]}, qa]}]}]}


@pytest.mark.parametrize("document, fragments", [
    (_squad({"id": "s2", "question": "q?", "answers": []}),
     ["record 0, field 'paragraphs[0].qas[1].answers': is an empty list"]),
    (_squad({"id": "s2", "question": "q?", "answers": [{"answer_start": 0}]}),
     ["record 0, field 'paragraphs[0].qas[1].answers[0].text': missing"]),
    (_squad({"id": "s2", "question": "q?", "answers": [{"text": "x", "answer_start": "0"}]}),
     ["record 0, field 'paragraphs[0].qas[1].answers[0].answer_start': expected int, got str"]),
    (_squad({"id": "s2", "question": "q?", "answers": [], "is_impossible": True}),
     ["record 0, field 'paragraphs[0].qas[1].is_impossible': SQuAD 2.0"]),
    (_squad({"id": "s1", "question": "r?", "answers": [{"text": "y", "answer_start": 0}]}),
     ["record 0, field 'paragraphs[0].qas[1]': id 's1' repeats record 0, field 'paragraphs[0].qas[0]'"]),
    ({"version": "1.1", "data": [{"paragraphs": []}]}, ["record 0, field 'title': missing"]),
    ({"version": "1.1", "data": [{"title": "A", "paragraphs": []}]}, ["contains no questions"]),
])
def test_squad_errors(tmp_path, document, fragments):
    _raises(load_squad, _write(tmp_path, "dev.json", document), *fragments)


@pytest.mark.parametrize("fmt", sorted(LOADERS))
def test_every_loader_rejects_an_empty_or_missing_file(tmp_path, fmt):
    path = _write(tmp_path, "empty.json", "")
    with pytest.raises(InputError) as err:
        load_dataset(fmt, path)
    assert str(err.value).startswith(str(path)) and ("empty" in str(err.value) or "no records" in str(err.value))
    with pytest.raises(InputError, match="not found"):
        load_dataset(fmt, tmp_path / "absent.json")


@pytest.mark.parametrize("fmt", sorted(set(LOADERS) - {"nq"}))
def test_invalid_json_names_the_line(tmp_path, fmt):
    path = _write(tmp_path, "dev.json", '[\n{"a": 1,\n "b": }\n]')
    with pytest.raises(InputError, match=r"dev.json: line 3: invalid JSON"):
        load_dataset(fmt, path)


def test_unknown_format_lists_the_available_ones():
    with pytest.raises(InputError, match="available: hotpotqa, 2wikimultihopqa, iirc"):
        load_dataset("musique", "x.json")
