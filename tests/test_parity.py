"""The parity harness (benchmarks/parity.py): agreement per method and the first point of divergence
per question, on a fixture run of this project (four questions of a FLARE run on demo-small, steps
trimmed to their decisions) against hand-written records of "another implementation"."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "parity"
RUN = FIXTURES / "flare"


def load_harness():
    spec = importlib.util.spec_from_file_location("parity", REPO / "benchmarks" / "parity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["parity"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


parity = load_harness()


def test_a_run_is_read_as_its_decisions_per_question():
    records = parity.read_run(RUN)
    assert sorted(records) == ["demo-002", "demo-006", "demo-034", "demo-037"]
    r = records["demo-034"]
    assert (r.retrievals, r.answer) == (2, "Hennagh Library")
    assert r.queries == ["The Hennagh Library was founded in 1 .", "The Nancarrow Library was founded in 1793."]
    assert r.passages == [["63", "116", "232"], ["332", "162", "232"]]


def test_agreement_per_method_and_the_first_divergence_per_question(capsys):
    assert parity.main(["--theirs", str(FIXTURES / "theirs.jsonl"), "--map", "FLARE=flare", str(RUN)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == "| flare | 4 | – | 3/4 | 3/4 | 2/3 | 3/4 | 0/1 | 1/4 | – |"
    # in the loop's order: queries (whitespace collapsed) and passages retrieval by retrieval, then the
    # number of retrievals, then the answer
    assert "- demo-034: retrieval 2: passages differ: ours ['332', '162', '232'], theirs ['332', '162', '5']" in out
    assert "- demo-037: retrievals: ours 4, theirs 6" in out
    assert "- demo-006: answer differs: ours 'Idris Inchcombe', theirs 'Idris Inchcombe.<|im_end|>'" in out
    assert "demo-002" not in out.split("first divergence")[1]  # identical (its extra space is not a difference)
    assert "- only in the other records: demo-099" in out


def test_two_runs_of_this_project_compare_by_method_type(tmp_path, capsys):
    other = shutil.copytree(RUN, tmp_path / "flare-variant")
    provenance = json.loads((other / "provenance.json").read_text())
    (other / "provenance.json").write_text(json.dumps({**provenance, "method": "flare-variant"}))
    assert parity.main(["--theirs", str(RUN), str(other)]) == 0
    assert "| flare-variant (flare) | 4 | – | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 |" in capsys.readouterr().out


def test_seconds_per_question_are_averaged_over_the_questions_both_sides_time(tmp_path, capsys):
    # the fixture run's wall times: demo-002 6.007 s, demo-034 12.062 s, demo-037 23.241 s, demo-006 4.02 s
    records = [{"method": "flare", "id": "demo-002", "retrievals": 1, "answer": "x", "seconds": 10},
               {"method": "flare", "id": "demo-034", "retrievals": 1, "answer": "x", "seconds": 20.5},
               {"method": "flare", "id": "demo-037", "retrievals": 1, "answer": "x"}]
    path = tmp_path / "theirs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert parity.main(["--theirs", str(path), str(RUN)]) == 0
    # ours (6.007 + 12.062) / 2 = 9.03, theirs (10 + 20.5) / 2 = 15.25; demo-037 has no time of theirs
    assert capsys.readouterr().out.splitlines()[2].endswith("| 9.0 / 15.2 |")


def test_export_writes_the_schema_the_harness_reads(tmp_path, capsys):
    out = tmp_path / "records.jsonl"
    assert parity.main(["--export", str(out), str(RUN)]) == 0
    theirs = parity.read_records(out, {})
    assert theirs["flare"]["demo-037"] == parity.read_run(RUN)["demo-037"]


@pytest.mark.parametrize("line, message", [
    ('{"method": "flare", "id": "q", "answer": "x"}', "line 1: field 'retrievals': missing or not a int"),
    ('{"method": "flare", "id": "q", "retrievals": true, "answer": "x"}', "field 'retrievals'"),
    ('{"method": "flare", "id": "q", "retrievals": 1, "answer": "x", "queries": "q"}', "field 'queries': expected a list"),
    ('{"method": "flare", "id": "q", "retrievals": 1, "answer": "x", "passages": ["1"]}', "field 'passages'"),
    ('{"method": "flare", "id": "q", "retrievals": 1, "answer": "x", "seconds": "3"}',
     "line 1: field 'seconds': expected a number"),
    ('{"method": "flare", "id": "q", "retrievals": 0, "answer": "x"}\n'
     '{"method": "flare", "id": "q", "retrievals": 0, "answer": "y"}', "line 2: a second record of flare/q"),
])
def test_a_bad_record_fails_naming_its_line(tmp_path, capsys, line, message):
    path = tmp_path / "theirs.jsonl"
    path.write_text(line + "\n")
    assert parity.main(["--theirs", str(path), str(RUN)]) == 2
    assert message in capsys.readouterr().err


def test_records_of_no_compared_method_say_what_they_hold(capsys):
    assert parity.main(["--theirs", str(FIXTURES / "theirs.jsonl"), str(RUN)]) == 2
    assert "no records of flare (it has: DRAGIN, FLARE; rename with --map THEIRS=OURS)" in capsys.readouterr().err


# Two hand-made record files of one question, the calls of a FLARE-like loop: the second file's third
# call (the regeneration) writes another text, so the per-question columns agree while the calls do not.
CALLS = [{"phase": "look-ahead", "prompt": "Q: x\nAnswer: ", "text": "He was born in 1722. So",
          "fired": "He was born in 1722.", "query": "He was born in", "passages": ["3", "1", "2"]},
         {"phase": "regenerate", "prompt": "Context: ...\nQ: x\nAnswer: ", "text": "He was born in 1750."},
         {"phase": "look-ahead", "text": " So the answer is 1750."}]


def write_records(path, calls):
    path.write_text(json.dumps({"method": "flare", "id": "q1", "retrievals": 1, "queries": ["He was born in"],
                                "passages": [["3", "1", "2"]], "answer": "1750", "calls": calls}) + "\n")
    return path


@pytest.mark.parametrize("edit, first", [
    (lambda c: c[2].update(text="So the answer is 1751."),
     "call 3 (look-ahead): text differs: ours ' So the answer is 1750.', theirs 'So the answer is 1751.'"),
    (lambda c: c[0].update(fired="He was born in 1722. So"),
     "call 1 (look-ahead): fired differs: ours 'He was born in 1722.', theirs 'He was born in 1722. So'"),
    (lambda c: c[1].update(prompt="Context: ...\nQ: x\nAnswer:  He"),
     "call 2 (regenerate): prompt differs"),
    (lambda c: c[0].update(passages=[3, 2, 1]), "call 1 (look-ahead): passages differs: ours ['3', '1', '2'], theirs [3, 2, 1]"),
    (lambda c: c.append({"text": "more"}), "calls: ours 3, theirs 4"),
    (lambda c: c[2].update(fired="So the answer is 1750."),
     "call 3 (look-ahead): fired differs: ours None, theirs 'So the answer is 1750.'"),
    (lambda c: c[0].pop("fired"), "call 1 (look-ahead): fired differs: ours 'He was born in 1722.', theirs None"),
])
def test_calls_are_compared_one_by_one_and_the_first_divergence_named(tmp_path, capsys, edit, first):
    theirs = json.loads(json.dumps(CALLS))
    edit(theirs)
    ours = parity.read_records(write_records(tmp_path / "ours.jsonl", CALLS), {})["flare"]["q1"]
    other = parity.read_records(write_records(tmp_path / "theirs.jsonl", theirs), {})["flare"]["q1"]
    agree, divergence = parity.compare(ours, other)
    assert agree["calls"] is False and agree["answer"] and agree["queries"]
    assert divergence.startswith(first)
    assert parity.compare(ours, ours) == ({a: True for a in parity.ASPECTS} | {"output": None}, None)


def test_calls_differing_in_whitespace_around_a_text_or_inside_a_query_agree(tmp_path):
    theirs = json.loads(json.dumps(CALLS))
    theirs[2]["text"] = "So the answer is 1750.  "
    theirs[0]["query"] = "He  was born in"
    ours = parity.read_records(write_records(tmp_path / "ours.jsonl", CALLS), {})["flare"]["q1"]
    other = parity.read_records(write_records(tmp_path / "theirs.jsonl", theirs), {})["flare"]["q1"]
    assert parity.compare(ours, other)[0]["calls"] is True


def test_a_call_with_an_unknown_field_is_refused(tmp_path, capsys):
    path = write_records(tmp_path / "theirs.jsonl", [{"text": "x", "logits": []}])
    assert parity.main(["--theirs", str(path), str(RUN)]) == 2
    assert "field 'calls': expected a list of objects with any of phase, prompt, text, fired, query, passages" \
        in capsys.readouterr().err
