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
    assert out.splitlines()[2] == "| flare | 4 | 3/4 | 3/4 | 2/3 | 3/4 | 0/1 | 1/4 |"
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
    assert "| flare-variant (flare) | 4 | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 | 4/4 |" in capsys.readouterr().out


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
