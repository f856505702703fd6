"""One answered question as the trace explorer shows it: a plain record per question and per step,
built from a run's `predictions.jsonl` and `trace.jsonl` lines (or `ask`'s records), which the
explorer page (`reports/explorer.py`) renders in the browser.

Why it is built this way: the page must show what the run decided, never a look-alike. So every
number here is copied from the trace: a step's text is shaded only where the trace holds the score
its trigger read (a `detection`'s units and scores, DioR's attribution of the question), and a
per-step score (SeaKR's U, SUGAR's SE/PE, DioR's early p(hallucination), Self-RAG's retrieve score)
is shown against the threshold the step records or the run's settings name. A method whose trace
holds no score gets its text and decisions without shading. The units of a detection are placed on
the step's text by finding them in order inside the fired sentence; a unit that cannot be found
leaves the whole detection shown as a list of units instead, with the same numbers.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ..evaluation.metrics import contains_gold, score_answer
from .steps import step_facts

FIRST_CHARS = 240  # characters of a passage's text shown under its title
# Keys a step view shows in a place of its own; every other key of a step is listed as it is.
SHOWN = frozenset({"phase", "text", "tokens", "finish", "kept", "sentence", "fired", "detection", "judged", "query",
                   "retrieved", "u", "delta", "probability", "threshold", "fire", "attribution", "value",
                   "thresholds", "branch", "signal", "retrieve_score", "retrieve"})
# Step keys that hold a decision: the side-by-side view compares two runs' steps on them.
DECISION_KEYS = ("phase", "sentence", "fired", "query", "retrieved", "branch", "fire", "retrieve", "chosen")
_THRESHOLD_KEY = re.compile(r"(theta|threshold|delta)", re.I)


def threshold_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run's triggers compare with (`theta`, `mask_theta`, `early_threshold`, `delta`,
    ...): shown beside each judged step, as the run's provenance records them."""
    return {k: v for k, v in settings.items() if _THRESHOLD_KEY.search(k) and not isinstance(v, (dict, list))}


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def query_sources(query: str, question: str, generated: str) -> list[list[str]]:
    """Each word of a query with where it occurs: `q` (the question), `g` (the text generated so far),
    `qg` (both) or `` (neither): the words the query was built from, as a reader checks them."""
    in_question, in_generated = set(words(question)), set(words(generated))
    out = []
    for word in query.split():
        key = " ".join(words(word))
        parts = set(key.split())
        where = ("q" if parts and parts <= in_question else "") + ("g" if parts and parts <= in_generated else "")
        out.append([word, where])
    return out


def align(text: str, start: int, units: list[str]) -> list[tuple[int, int]] | None:
    """Character spans of `units`, found in order in `text` from `start` (their whitespace dropped);
    None when one is not found (the units are then shown as a list)."""
    spans, at = [], start
    for unit in units:
        needle = unit.strip()
        if not needle:
            spans.append((at, at))
            continue
        found = text.find(needle, at)
        if found < 0:
            return None
        spans.append((found, found + len(needle)))
        at = found + len(needle)
    return spans


def fired_span(step: dict) -> tuple[int, int] | None:
    """Where the fired sentence sits in the step's text: from the kept prefix on (the text is cut
    before it), else its first occurrence; None when it is not there."""
    text, fired = step.get("text"), step.get("fired")
    if not isinstance(text, str) or not isinstance(fired, str) or not fired:
        return None
    kept = step.get("kept") if isinstance(step.get("kept"), int) else 0
    found = text.find(fired, min(kept, len(text)))
    if found < 0:
        found = text.find(fired)
    return (found, found + len(fired)) if found >= 0 else None


def detection_view(record: dict, text: str, start: int, fired: bool) -> dict:
    """One detection's units with their scores, flags and per-unit thresholds (`units`), placed on the
    step's text from `start` where they can be (`marks`: [start, end, unit index]; absent when a unit is
    not found, and the units are then listed)."""
    units, scores = list(record.get("units", [])), list(record.get("scores", []))
    flagged, thresholds = set(record.get("flagged", [])), record.get("thresholds")
    rows = [{"unit": u, "score": s, "flagged": k in flagged,
             **({"threshold": thresholds[k]} if thresholds and k < len(thresholds) else {})}
            for k, (u, s) in enumerate(zip(units, scores))]
    view = {"fired": fired, "sentence": record.get("sentence"), "units": rows,
            "extra": {k: v for k, v in record.items()
                      if k not in ("units", "scores", "flagged", "thresholds", "sentence", "start")}}
    spans = align(text, start, units[:len(scores)]) if text else None
    if spans is not None:
        view["marks"] = [[a, b, k] for k, (a, b) in enumerate(spans) if b > a]
    return view


def detections(step: dict) -> list[dict]:
    """A look-ahead's detections in the order the trigger judged them: the sentences it passed (`judged`,
    placed from their recorded start), then the one that fired (placed from where the fired sentence is)."""
    text = step.get("text") if isinstance(step.get("text"), str) else ""
    out = [detection_view(d, text, d.get("start", 0) if isinstance(d.get("start"), int) else 0, False)
           for d in step.get("judged") or [] if isinstance(d, dict)]
    if isinstance(step.get("detection"), dict):
        span = fired_span(step)
        out.append(detection_view(step["detection"], text, span[0] if span else 0, True))
    return out


def gauges(step: dict) -> list[dict]:
    """Per-step scores against what they were compared with: SeaKR's U vs delta, DioR's early
    p(hallucination) vs its threshold, SUGAR's signal vs t1, t2 and its route, Self-RAG's retrieve score."""
    out = []
    if "u" in step:
        verdict = None
        if "delta" in step:
            verdict = ("undefined" if step["u"] is None else "uncertain: retrieve" if step["u"] > step["delta"]
                       else "sure")
        out.append({"name": "U (EigenScore)", "value": step["u"], "threshold": step.get("delta"), "verdict": verdict})
    if "probability" in step:
        out.append({"name": "p(hallucination)", "value": step["probability"], "threshold": step.get("threshold"),
                    "verdict": "fires: retrieve" if step.get("fire") else "does not fire"})
    if "value" in step:
        out.append({"name": step.get("signal", "value"), "value": step["value"], "threshold": step.get("thresholds"),
                    "verdict": f"route: {step.get('branch', '?')}"})
    if "retrieve_score" in step:
        out.append({"name": "retrieve score", "value": step["retrieve_score"], "threshold": None,
                    "verdict": "retrieve" if step.get("retrieve") else "no retrieval"})
    return out


def decision(step: dict) -> str:
    """The step's decisions on one line (what the side-by-side view compares)."""
    return json.dumps({k: step[k] for k in DECISION_KEYS if k in step}, ensure_ascii=False, sort_keys=True)


def step_view(step: dict, question: str, before: str) -> dict:
    """One trace step: its text (shaded where a detection scored it), the per-step scores, the fired
    sentence, the query with the words it was built from, the retrieved ids and every other key."""
    view: dict[str, Any] = {"phase": step.get("phase", "?"), "decision": decision(step)}
    view["facts"] = ", ".join(step_facts(step))
    if isinstance(step.get("text"), str):
        view["text"] = step["text"]
    found = detections(step)
    if found:
        view["detections"] = found
    if "attribution" in step and isinstance(step.get("tokens"), list):  # DioR: the question's tokens
        view["attribution"] = [[t if isinstance(t, str) else str(t), a]
                               for t, a in zip(step["tokens"], step["attribution"])]
    if step.get("fired"):
        view["fired"] = step["fired"]
        span = fired_span(step)
        if span is not None:
            view["fired_span"] = list(span)
    if isinstance(step.get("query"), str):
        view["query"] = step["query"]
        view["query_words"] = query_sources(step["query"], question, before + (step.get("text") or ""))
    if isinstance(step.get("retrieved"), list):
        view["retrieved"] = [str(p) for p in step["retrieved"]]
    view["gauges"] = gauges(step)
    view["other"] = [[k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)]
                     for k, v in step.items() if k not in SHOWN]
    return view


def question_view(prediction: dict, trace: dict) -> dict:
    """A question's line in the explorer's list (gold, prediction, EM/F1/Acc, retrievals, tokens) and
    its steps in order."""
    golds = list(prediction.get("answers") or [])
    scores = score_answer(prediction.get("prediction", ""), golds, prediction.get("answer_type", "span")) \
        if golds else {}
    counters = trace.get("counters") or prediction.get("counters") or {}
    steps, before = [], ""
    for step in trace.get("steps", []):
        steps.append(step_view(step, prediction.get("question", ""), before))
        if isinstance(step.get("text"), str) and isinstance(step.get("kept"), int):
            before += step["text"][:step["kept"]]
    return {"id": str(prediction.get("id")), "question": prediction.get("question", ""), "gold": golds,
            "prediction": prediction.get("prediction", ""), "output": prediction.get("output", ""),
            "em": scores.get("em"), "f1": None if "f1" not in scores else round(scores["f1"], 4),
            "acc": scores.get("acc"), "retrievals": prediction.get("retrievals", counters.get("retrievals", 0)),
            "tokens": counters.get("generated_tokens"), "counters": counters,
            "passages": [str(p.get("id")) for p in trace.get("passages", [])], "steps": steps}


def passage_ids(trace: dict) -> set[str]:
    """Every passage id a trace names: retrieved by a step, among its candidates, or used at the end."""
    ids = {str(p.get("id")) for p in trace.get("passages", [])}
    for step in trace.get("steps", []):
        ids.update(str(p) for p in step.get("retrieved") or [] if isinstance(p, (str, int)))
        ids.update(str(c["id"]) for c in step.get("candidates") or [] if isinstance(c, dict) and "id" in c)
    return ids


def passage_view(title: str, text: str) -> dict:
    return {"title": title, "text": text[:FIRST_CHARS] + ("…" if len(text) > FIRST_CHARS else "")}


def gold_passages(golds: list[str], ids: set[str], texts: Mapping[str, tuple[str, str]]) -> list[str]:
    """The passages (of `ids`) whose title or text contains a gold answer (normalised as Acc is)."""
    return sorted(pid for pid in ids if pid in texts
                  and any(contains_gold(f"{texts[pid][0]} {texts[pid][1]}", g) for g in golds))
