"""Parity with another implementation: how often a run of this project and another implementation's
run make the same decisions, per method, and where each question first parts ways.

Two implementations that give the same model the same prompt should make the same calls, retrieve at
the same points, with the same queries, get the same passages and give the same answer. This script
lines up a run of this project (its `predictions.jsonl` and `trace.jsonl`) with per-question records
of the other run, in the order the loop makes its decisions: call by call where both record calls
(prompt, generated text, fired sentence, query, passages), then retrieval 1's query, its passages,
retrieval 2's query, ..., the number of retrievals, the answer. It prints the agreement per method and, for every question that
differs, the first point of divergence.

The other implementation's records are JSONL, one object per question and method (docs/
reproducing-papers.md#reproducing-another-implementations-set-up has an example):

    {"method": "flare", "id": "demo-002", "retrievals": 2,
     "queries": ["The Hockin Glassworks was founded by", "Aldous Hockin was born in"],
     "passages": [["296", "100", "177"], ["100", "12", "5"]],
     "answer": "Velmora", "output": "The Hockin Glassworks ... So the answer is Velmora."}

- `method`: matched to a run by the run's method name, else its method type (provenance.json);
  `--map THEIRS=OURS` renames; `id`: the question id of this project's split; `retrievals` (int) and `answer` (the
  extracted answer, compared with this project's `prediction`) are required;
- `queries` (one string per retrieval, compared with whitespace collapsed), `passages` (one list of
  passage ids per retrieval, in rank order) and `output` (the whole generated text) are optional:
  what a record leaves out is not compared;
- `seconds` (optional): the question's wall time; the table gives the mean per question of both
  sides over the questions both record it for (this project's: the trace's `wall_time_s`);
- `calls` (optional): every model call in order, each an object with any of `prompt` (the prompt's
  text), `text` (what the call generated), `fired` (the sentence that triggered a retrieval; a call
  with a `text` and no `fired` fired nothing), `query`
  and `passages` (that retrieval's query and passage ids). Where both sides record calls they are
  compared call by call, each field that both record, and the first divergence names the call and
  the field; this project's calls are its trace's steps (`text`, `fired`, `query`, `retrieved`; no
  prompt). benchmarks/dragin_reference.py writes the DRAGIN reference code's records with calls.

`--theirs` may also name a run directory of this project (its records are read the same way), to
compare two set-ups of this project, e.g. the default template against another implementation's.

Usage: python benchmarks/parity.py --theirs RECORDS.jsonl|RUN_DIR RUN_DIR [RUN_DIR ...] [--map A=B] [--export OUT.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_rag.errors import InputError
from adaptive_rag.io import iter_jsonl, read_json, read_jsonl


@dataclass
class Record:
    """One question's decisions as one implementation made them (None: not recorded)."""

    id: str
    retrievals: int
    answer: str
    queries: list[str] | None = None
    passages: list[list[str]] | None = None
    output: str | None = None
    extra: dict = field(default_factory=dict)
    calls: list[dict] | None = None
    seconds: float | None = None  # the question's wall time

    def as_json(self, method: str) -> dict:
        record = {"method": method, "id": self.id, "retrievals": self.retrievals, "answer": self.answer}
        for key in ("queries", "passages", "output", "calls", "seconds"):
            if getattr(self, key) is not None:
                record[key] = getattr(self, key)
        return record


# ---- reading ---------------------------------------------------------------------------------------

def run_names(run: Path) -> tuple[str, str | None]:
    """The method configuration a run directory holds and its type (provenance.json; the directory's
    name and no type without one). Records are matched to a run by its name, else by its type."""
    provenance = run / "provenance.json"
    if provenance.is_file():
        record = read_json(provenance, "provenance.json")
        return record.get("method") or run.name, record.get("method_type")
    return run.name, None


def read_run(run: Path) -> dict[str, Record]:
    """This project's decisions per question: retrievals and answer from predictions.jsonl, each
    retrieval's query from the trace's steps (a step that retrieved records `query` and `retrieved`;
    a method that retrieves once with the question, SR-RAG, records none: its query is the question)
    and its passages from the trace's passages (grouped by their `retrieval` index)."""
    predictions = read_jsonl(run / "predictions.jsonl", "predictions.jsonl (run the generate step first)")
    traces = {t["id"]: t for t in read_jsonl(run / "trace.jsonl", "trace.jsonl")}
    records = {}
    for p in predictions:
        trace = traces.get(p["id"], {})
        queries = [s["query"] for s in trace.get("steps", []) if s.get("query") is not None and "retrieved" in s]
        groups: dict[int, list[str]] = {}
        for passage in trace.get("passages", []):
            groups.setdefault(passage.get("retrieval", 0), []).append(passage["id"])
        n = p["retrievals"]
        passages = [groups.get(k, []) for k in range(n)]  # a search may return nothing
        if not queries and n == 1 and "steps" in trace:
            queries = [p["question"]]  # retrieved once, before generating (SR-RAG)
        records[p["id"]] = Record(p["id"], n, p["prediction"], queries if len(queries) == n else None,
                                  passages if set(groups) <= set(range(n)) else None, p.get("output"),
                                  calls=trace_calls(trace["steps"]) if "steps" in trace else None,
                                  seconds=trace.get("counters", {}).get("wall_time_s"))
    return records


def trace_calls(steps: list[dict]) -> list[dict] | None:
    """A trace's steps as calls (what each generated, the sentence that fired, its query and passages);
    None when the steps were trimmed of their text."""
    if not all("text" in s for s in steps):
        return None
    calls = []
    for step in steps:
        call = {"phase": step.get("phase"), "text": step["text"]}
        for ours, key in (("fired", "fired"), ("query", "query"), ("retrieved", "passages")):
            if step.get(ours) is not None:
                call[key] = step[ours]
        calls.append(call)
    return calls


def read_records(path: Path, rename: dict[str, str]) -> dict[str, dict[str, Record]]:
    """The other implementation's records: method -> id -> Record; a bad record fails naming its line."""
    out: dict[str, dict[str, Record]] = {}
    for line, data in iter_jsonl(path, "parity records"):
        where = f"{path}: line {line}"
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected an object")
        for key, kind in (("method", str), ("id", str), ("retrievals", int), ("answer", str)):
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise InputError(f"{where}: field '{key}': missing or not a {kind.__name__}")
        queries, passages, output = data.get("queries"), data.get("passages"), data.get("output")
        if queries is not None and not (isinstance(queries, list) and all(isinstance(q, str) for q in queries)):
            raise InputError(f"{where}: field 'queries': expected a list of strings")
        if passages is not None and not (isinstance(passages, list) and all(
                isinstance(g, list) and all(isinstance(i, (str, int)) for i in g) for g in passages)):
            raise InputError(f"{where}: field 'passages': expected a list of lists of passage ids")
        if output is not None and not isinstance(output, str):
            raise InputError(f"{where}: field 'output': expected a string")
        seconds = data.get("seconds")
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)):
            raise InputError(f"{where}: field 'seconds': expected a number")
        calls = data.get("calls")
        if calls is not None and not (isinstance(calls, list) and all(
                isinstance(c, dict) and set(c) <= {"phase", *CALL_FIELDS} for c in calls)):
            raise InputError(f"{where}: field 'calls': expected a list of objects with any of "
                             f"phase, {', '.join(CALL_FIELDS)}")
        method = rename.get(data["method"], data["method"])
        if data["id"] in out.setdefault(method, {}):
            raise InputError(f"{where}: a second record of {method}/{data['id']}")
        out[method][data["id"]] = Record(data["id"], data["retrievals"], data["answer"], queries,
                                         [[str(i) for i in g] for g in passages] if passages is not None else None,
                                         output, calls=calls, seconds=seconds)
    return out


# ---- comparing -------------------------------------------------------------------------------------

ASPECTS = ("calls", "retrievals", "queries", "passages", "answer", "output")
CALL_FIELDS = ("prompt", "text", "fired", "query", "passages")  # in the order a call makes them


def _same_query(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _same_field(key: str, a, b) -> bool:
    if key == "passages":
        return [str(i) for i in a] == [str(i) for i in b]
    if key == "query":
        return _same_query(a, b)
    return a.strip() == b.strip()  # a prompt or a text: its surrounding whitespace aside


def first_call_divergence(ours: list[dict], theirs: list[dict]) -> str | None:
    """The first call where the two differ, and in it the first field both record that differs (in
    `CALL_FIELDS` order), where a call that records its `text` but no `fired` fired nothing (so one
    side firing where the other did not is a difference); then a difference in the number of calls.
    None: the same calls."""
    for k, (a, b) in enumerate(zip(ours, theirs), 1):
        for key in CALL_FIELDS:
            if key == "fired" and "text" in a and "text" in b and ("fired" in a) != ("fired" in b):
                differs = True  # a call that records its text and no `fired` fired nothing
            else:
                differs = key in a and key in b and not _same_field(key, a[key], b[key])
            if differs:
                phase = a.get("phase") or b.get("phase")
                return (f"call {k}{f' ({phase})' if phase else ''}: {key} differs: "
                        f"ours {a.get(key)!r}, theirs {b.get(key)!r}")
    if len(ours) != len(theirs):
        return f"calls: ours {len(ours)}, theirs {len(theirs)}"
    return None


def compare(ours: Record, theirs: Record) -> tuple[dict[str, bool | None], str | None]:
    """Per aspect: agree (True), differ (False) or not recorded by one side (None); and the first
    point of divergence in the order the loop decides (None: they agree on everything recorded)."""
    agree: dict[str, bool | None] = {"retrievals": ours.retrievals == theirs.retrievals,
                                     "answer": ours.answer.strip() == theirs.answer.strip()}
    for key, same in (("queries", _same_query), ("passages", lambda a, b: a == b)):
        a, b = getattr(ours, key), getattr(theirs, key)
        agree[key] = None if a is None or b is None else len(a) == len(b) and all(map(same, a, b))
    agree["output"] = None if ours.output is None or theirs.output is None else \
        ours.output.strip() == theirs.output.strip()
    by_call = None if ours.calls is None or theirs.calls is None else first_call_divergence(ours.calls, theirs.calls)
    agree["calls"] = None if ours.calls is None or theirs.calls is None else by_call is None
    first = by_call
    for i in range(min(ours.retrievals, theirs.retrievals) if first is None else 0):
        if ours.queries is not None and theirs.queries is not None and i < min(len(ours.queries), len(theirs.queries)) \
                and not _same_query(ours.queries[i], theirs.queries[i]):
            first = f"retrieval {i + 1}: query differs: ours {ours.queries[i]!r}, theirs {theirs.queries[i]!r}"
            break
        if ours.passages is not None and theirs.passages is not None \
                and i < min(len(ours.passages), len(theirs.passages)) and ours.passages[i] != theirs.passages[i]:
            first = f"retrieval {i + 1}: passages differ: ours {ours.passages[i]}, theirs {theirs.passages[i]}"
            break
    if first is None and not agree["retrievals"]:
        first = f"retrievals: ours {ours.retrievals}, theirs {theirs.retrievals}"
    if first is None and not agree["answer"]:
        first = f"answer differs: ours {ours.answer!r}, theirs {theirs.answer!r}"
    if first is None and agree["output"] is False:
        first = "output differs (same answer)"
    return agree, first


@dataclass
class MethodParity:
    method: str
    compared: int = 0
    agree: dict[str, int] = field(default_factory=lambda: {a: 0 for a in ASPECTS})
    recorded: dict[str, int] = field(default_factory=lambda: {a: 0 for a in ASPECTS})
    identical: int = 0
    divergences: list[tuple[str, str]] = field(default_factory=list)  # (id, first divergence)
    only_ours: list[str] = field(default_factory=list)
    only_theirs: list[str] = field(default_factory=list)
    seconds: list[tuple[float, float]] = field(default_factory=list)  # (ours, theirs) where both record it

    def mean_seconds(self) -> str:
        if not self.seconds:
            return "–"
        return " / ".join(f"{sum(pair[k] for pair in self.seconds) / len(self.seconds):.1f}" for k in (0, 1))


def parity(method: str, ours: dict[str, Record], theirs: dict[str, Record]) -> MethodParity:
    result = MethodParity(method, only_ours=sorted(set(ours) - set(theirs)),
                          only_theirs=sorted(set(theirs) - set(ours)))
    for qid in sorted(set(ours) & set(theirs)):
        agree, first = compare(ours[qid], theirs[qid])
        result.compared += 1
        if ours[qid].seconds is not None and theirs[qid].seconds is not None:
            result.seconds.append((ours[qid].seconds, theirs[qid].seconds))
        for aspect, value in agree.items():
            if value is not None:
                result.recorded[aspect] += 1
                result.agree[aspect] += bool(value)
        if first is None:
            result.identical += 1
        else:
            result.divergences.append((qid, first))
    return result


def report(results: list[MethodParity]) -> str:
    def cell(r: MethodParity, aspect: str) -> str:
        n = r.recorded[aspect]
        return f"{r.agree[aspect]}/{n}" if n else "–"

    lines = ["| method | questions | same calls | same retrieval count | same queries | same passages | same answer | "
             "same output | identical | s/question ours / theirs |", "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        lines.append(f"| {r.method} | {r.compared} | " + " | ".join(cell(r, a) for a in ASPECTS)
                     + f" | {r.identical}/{r.compared} | {r.mean_seconds()} |")
    for r in results:
        if r.divergences or r.only_ours or r.only_theirs:
            lines.append("")
            lines.append(f"{r.method}: first divergence per question")
            lines.extend(f"- {qid}: {first}" for qid, first in r.divergences)
            if r.only_ours:
                lines.append(f"- only in this project's run: {', '.join(r.only_ours)}")
            if r.only_theirs:
                lines.append(f"- only in the other records: {', '.join(r.only_theirs)}")
    return "\n".join(lines)


# ---- the command -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="run directories of this project (data/runs/<dataset>/<method>)")
    parser.add_argument("--theirs", type=Path, help="the other implementation's records (JSONL) or a run directory")
    parser.add_argument("--map", action="append", default=[], metavar="THEIRS=OURS",
                        help="their method name -> this project's (repeatable)")
    parser.add_argument("--export", type=Path, metavar="OUT.jsonl",
                        help="write the runs' records in the parity schema instead of comparing")
    args = parser.parse_args(argv)
    try:
        if not args.runs:
            parser.error("name at least one run directory")
        names = {run: run_names(run) for run in args.runs}
        ours = {names[run][0]: read_run(run) for run in args.runs}
        if args.export:
            with open(args.export, "w", encoding="utf-8") as handle:
                for method, records in ours.items():
                    for record in records.values():
                        handle.write(json.dumps(record.as_json(method), ensure_ascii=False) + "\n")
            print(f"{sum(map(len, ours.values()))} records -> {args.export}")
            return 0
        if args.theirs is None:
            parser.error("--theirs is required unless --export is given")
        rename = dict(pair.split("=", 1) for pair in args.map if "=" in pair)
        if args.theirs.is_dir():
            name, kind = run_names(args.theirs)
            records = read_run(args.theirs)
            theirs = {rename.get(n, n): records for n in (kind, name) if n}
        else:
            theirs = read_records(args.theirs, rename)
        results, missing = [], []
        for run, (name, kind) in names.items():
            key = name if name in theirs else kind if kind in theirs else None
            if key is None:
                missing.append(name)
            else:
                results.append(parity(name if key == name else f"{name} ({key})", ours[name], theirs[key]))
        if not results:
            raise InputError(f"{args.theirs}: no records of {', '.join(sorted(ours))} (it has: "
                             f"{', '.join(sorted(theirs)) or 'none'}; rename with --map THEIRS=OURS)")
        print(report(results))
        if missing:
            print(f"\nno records of: {', '.join(missing)}")
        return 0
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
