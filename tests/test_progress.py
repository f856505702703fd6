"""Progress logs: a resumed run uses only batches made from the same inputs, and one writer at a time."""

import json
import os

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.progress import ProgressLog, code_digest

PARTS = {"settings": "s1", "split": "p1", "model": "m1", "code": "c1"}
IDS = [["q1", "q2"], ["q3", "q4"], ["q5"]]


def records(ids):
    return [{"prediction": {"id": i, "prediction": f"answer {i}"}, "trace": {"id": i}} for i in ids]


def test_batches_are_found_again_with_the_same_inputs(tmp_path):
    with ProgressLog(tmp_path, 0, PARTS) as log:
        assert log.finished(IDS) == {}
        log.append(0, records(IDS[0]))
        log.append(2, records(IDS[2]))
    with ProgressLog(tmp_path, 0, dict(PARTS)) as log:
        assert sorted(log.finished(IDS)) == [0, 2]
        assert log.discarded == 0


def test_changed_settings_discard_the_log_and_say_which_input_changed(tmp_path, caplog):
    with ProgressLog(tmp_path, 0, PARTS) as log:
        log.append(0, records(IDS[0]))
    with ProgressLog(tmp_path, 0, {**PARTS, "settings": "s2", "code": "c2"}) as log:
        assert log.finished(IDS) == {}
        assert log.discarded == 1
    assert "discarding 1 finished batch(es) made with different code, settings" in caplog.text
    lines = (tmp_path / ".progress/rank0.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["parts"]["settings"] == "s2"  # only the new key line


def test_a_log_from_an_older_version_without_a_key_is_discarded(tmp_path, caplog):
    (tmp_path / ".progress").mkdir()
    (tmp_path / ".progress/rank0.jsonl").write_text(json.dumps({"batch": 0, "records": records(IDS[0])}) + "\n")
    with ProgressLog(tmp_path, 0, PARTS) as log:
        assert log.finished(IDS) == {}
    assert "a log without a key" in caplog.text


def test_a_batch_whose_questions_differ_never_fills_the_slot(tmp_path):
    """Same key by construction, but batch 0 holds other questions (as a different batch size would)."""
    with ProgressLog(tmp_path, 0, PARTS) as log:
        log.append(0, records(["q1", "q2", "q3", "q4"]))
        log.append(1, records(IDS[1]))
        log.append(7, records(["q9"]))  # no such batch
        assert sorted(log.finished(IDS)) == [1]


def test_a_second_writer_is_refused_while_the_first_holds_the_log(tmp_path):
    with ProgressLog(tmp_path, 0, PARTS):
        with pytest.raises(InputError, match=rf"another process \(pid {os.getpid()}\) is writing this run"):
            with ProgressLog(tmp_path, 0, PARTS):
                pass
    with ProgressLog(tmp_path, 0, PARTS):  # released on exit
        pass


def test_other_ranks_logs_are_read_but_never_trimmed(tmp_path):
    with ProgressLog(tmp_path, 1, PARTS) as other:
        other.append(1, records(IDS[1]))
    torn = tmp_path / ".progress/rank1.jsonl"
    with open(torn, "ab") as handle:
        handle.write(b'{"batch": 2, "reco')  # its writer may still be writing this line
    size = torn.stat().st_size
    with ProgressLog(tmp_path, 0, PARTS) as log:
        assert sorted(log.finished(IDS)) == [1]
    assert torn.stat().st_size == size


def test_the_code_digest_covers_the_package_source():
    assert len(code_digest()) == 16 and code_digest() == code_digest()
