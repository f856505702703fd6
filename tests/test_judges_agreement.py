"""benchmarks/judges_agreement.py: the pair decisions, kappa and the trace reading it reports from."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))  # its `from model_args import ...`
    try:
        spec = importlib.util.spec_from_file_location("judges_agreement", REPO / "benchmarks" / "judges_agreement.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_pairs_are_in_one_class_exactly_when_their_ids_match(bench):
    # ids [0, 0, 1]: pairs (0,1) (0,2) (1,2)
    assert bench.same_class_pairs([0, 0, 1]).tolist() == [1, 0, 0]
    assert bench.same_class_pairs([0, 1, 2, 3]).sum() == 0


def test_cohen_kappa_by_hand(bench):
    a = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    b = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    # observed 0.8; chance 0.2*0.2 + 0.8*0.8 = 0.68; kappa = 0.12 / 0.32 = 0.375
    assert bench.cohen_kappa(a, b) == pytest.approx(0.375)
    assert bench.cohen_kappa(a, a) == pytest.approx(1.0)
    assert np.isnan(bench.cohen_kappa(np.zeros(4), np.zeros(4)))


def _trace(qid: str, samples: list[str], phase: str = "sugar") -> dict:
    return {"id": qid, "prompt": {"messages": [{"role": "user", "content": "Q: Where was Ada born?"}]},
            "steps": [{"phase": phase, "samples": samples, "loglik": [-1.0] * len(samples),
                       "prompt_style": "qa-oneshot", "estimator": "rao"}]}


def test_traces_give_one_record_per_question_and_bad_traces_name_the_line(bench, tmp_path):
    run = tmp_path / "runs" / "demo-small" / "sugar"
    run.mkdir(parents=True)
    trace = run / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(t) for t in [_trace("q1", ["Paris", "paris."]), _trace("q2", ["Rome"])]))
    records = bench.sampled_questions([trace, trace])  # the same run twice: each question counts once
    assert [(r["dataset"], r["id"], r["question"]) for r in records] == [("demo-small", "q1", "Where was Ada born?"),
                                                                        ("demo-small", "q2", "Where was Ada born?")]
    assert records[0]["answers"] == ["Paris", "paris"]  # the answer phrase, as the method scores it
    trace.write_text(json.dumps(_trace("q1", ["x"], phase="answer")) + "\n")
    with pytest.raises(SystemExit, match=r"trace.jsonl:1: no SUGAR sampling step"):
        bench.sampled_questions([trace])
