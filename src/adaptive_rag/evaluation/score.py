"""Score one run's predictions against the split's gold answers."""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from ..errors import InputError
from ..io import read_jsonl
from .metrics import score_answer

METRICS = ("em", "f1", "precision", "recall", "acc")


def score_run(predictions_path: Path, trace_path: Path | None = None) -> dict:
    predictions = read_jsonl(predictions_path, "predictions file")
    if not predictions:
        raise InputError(f"{predictions_path}: no predictions to score")
    per_question = []
    for index, record in enumerate(predictions):
        for key in ("id", "prediction", "answers"):
            if key not in record:
                raise InputError(f"{predictions_path}: line {index + 1}: missing '{key}'")
        per_question.append({"id": record["id"], **score_answer(record["prediction"], record["answers"],
                                                                  record.get("answer_type", "span"))})
    summary = {metric: round(mean(q[metric] for q in per_question), 4) for metric in METRICS}
    summary["questions"] = len(per_question)
    summary["answer_found"] = round(mean(float(r.get("answer_found", False)) for r in predictions), 4)
    summary["retrievals_mean"] = round(mean(r.get("retrievals", 0) for r in predictions), 4)
    if trace_path is not None:
        traces = read_jsonl(trace_path, "trace file")
        summary["generated_tokens_mean"] = round(mean(t["counters"]["generated_tokens"] for t in traces), 2)
        summary["llm_calls_mean"] = round(mean(t["counters"]["llm_calls"] for t in traces), 4)
    return {"summary": summary, "per_question": per_question}
