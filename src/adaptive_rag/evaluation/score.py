"""Score one run's predictions against the split's gold answers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from statistics import mean

from ..errors import InputError
from ..io import read_json, read_jsonl
from .metrics import score_answer

METRICS = ("em", "f1", "precision", "recall", "acc")


def score_run(predictions_path: Path, trace_path: Path | None = None, provenance_path: Path | None = None) -> dict:
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
    summary.update(efficiency(predictions))
    if trace_path is not None:
        traces = read_jsonl(trace_path, "trace file")
        summary["wall_time_s_mean"] = round(mean(t["counters"].get("wall_time_s", 0.0) for t in traces), 3)
    if provenance_path is not None:
        summary["cache_hits"] = cache_hits(read_json(provenance_path, "provenance file"))
    return {"summary": summary, "per_question": per_question}


def cache_hits(provenance: dict) -> int | None:
    """Calls the run took from the call cache, all operations together: 0 with the cache off; None when
    unknown (a run resumed from an earlier process, or split over several, records only its own
    process's counts). Wall times compare only between runs with 0 (`time_rel`)."""
    if provenance.get("params", {}).get("generation", {}).get("cache") is None:
        return 0
    stats = provenance.get("call_cache")
    if stats is None or provenance.get("resumed_batches") != 0 or provenance.get("processes") != 1:
        return None
    return sum(counts.get("hits", 0) for counts in stats.values() if isinstance(counts, dict))


# DioR's efficiency counters (mean per question) and the prediction fields they come from. Sampling
# methods add Ks, the sampled sequences per question, which Gc (greedy calls) leaves out.
COUNTERS = {"Rc": "retrievals", "Gc": "llm_calls", "Hc": "detections", "Tc": "generated_tokens", "Sc": "sentences"}


def efficiency(predictions: list[dict]) -> dict:
    """N_R (SCAAR: mean retrievals per question, = DioR's Rc), the other counters, and how many
    questions retrieved 0, 1, 2, ... times (dynamic methods should vary)."""
    out = {}
    for name, field in COUNTERS.items():
        out[name] = round(mean(float(r.get("counters", {}).get(field, r.get(field, 0))) for r in predictions), 4)
    out["N_R"] = out["Rc"]
    if any("sampled_sequences" in r.get("counters", {}) for r in predictions):  # sampling methods (SeaKR)
        out["Ks"] = round(mean(float(r["counters"].get("sampled_sequences", 0)) for r in predictions), 4)
    histogram = Counter(int(r.get("retrievals", 0)) for r in predictions)
    out["retrievals_histogram"] = {str(k): histogram[k] for k in sorted(histogram)}
    return out
