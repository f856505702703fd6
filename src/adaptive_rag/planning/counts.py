"""Each method's work per question, read off a measured run's trace, and the table that keeps it.

A method's cost depends on what it decided on each question (how many calls, how long each ran, how
many samples, retrievals and attributions) far more than on the model, so the plan does not guess
those numbers: `benchmarks/question_counts.py` reads them from finished runs (trace.jsonl,
provenance.json) with the functions here and commits them as one JSON line per run
(`question_counts.jsonl` beside this module). Only the counts are kept, never the texts.

What is counted for a question (`Work`):
- `calls`: decode steps of each greedy call, in order: the tokens of every step the trace itemises
  (`step_record`'s token list, else the step's text re-tokenized: SeaKR records texts only); tokens the
  counters hold beyond the itemised ones (a call no step records) count as one more call.
- `cut`: which of those calls stopped at their token budget: only they would run longer under a larger one.
- `sets`: each sampling call as (rows, its longest row's tokens: the call's decode steps); `sampled`:
  the tokens of every row.
- `prefill`: the question's own prompt tokens over all its calls and sampling calls (the few-shot
  prefix every question shares is encoded once per job, so it is not the question's). The first
  prompt's own tokens are measured (its tokens minus the prefix all the run's first prompts share);
  each later call adds the output written so far (half the question's output tokens on average) and
  every passage shown (the passages each retrieval returned, at the mean tokens of the passages the
  run retrieved). An estimate from what the trace keeps: it records no per-call prompt length.
- `retrievals`: the retrieval counter; `ig_points`: Integrated-Gradients interpolation points (one
  forward + backward of the bare question each), `IGSettings.steps` per attribution the trace records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import InputError

TABLE = Path(__file__).with_name("question_counts.jsonl")
ATTRIBUTION_PHASES = ("question-attribution", "early-detection")  # DioR's steps that ran an IG attribution


@dataclass(frozen=True)
class Work:
    """One question's work (module docstring)."""

    calls: tuple[int, ...] = ()
    cut: tuple[int, ...] = ()
    sets: tuple[tuple[int, int], ...] = ()
    sampled: int = 0
    prefill: int = 0
    retrievals: int = 0
    ig_points: int = 0

    def row(self) -> list:
        return [list(self.calls), list(self.cut), [list(s) for s in self.sets], self.sampled, self.prefill,
                self.retrievals, self.ig_points]

    @classmethod
    def from_row(cls, row: Sequence) -> "Work":
        calls, cut, sets, sampled, prefill, retrievals, ig_points = row
        return cls(tuple(calls), tuple(cut), tuple(tuple(s) for s in sets), sampled, prefill, retrievals, ig_points)

    @property
    def decode_tokens(self) -> int:
        return sum(self.calls)


@dataclass(frozen=True)
class RunCounts:
    """A measured run's per-question work and what it was measured with."""

    source: str  # the build the run belongs to: `<profile>@<commit>`
    dataset: str
    format: str  # the dataset's format (hotpotqa, nq, ...): runs on another dataset of it are the nearest
    method: str
    type: str
    budget: int  # the run's max_new_tokens (the dataset's, else generation's)
    batch_size: int
    chunk_size: int
    questions: tuple[Work, ...]
    hits: dict = field(default_factory=dict)  # op -> [hits, misses] of the call cache in that build
    wall_time_s: float = 0.0  # the runner's own wall time (model load included, process start not)
    model: str = ""  # the model the run decided with
    questions_file: str = ""  # the dataset's file its questions came from (the demo's are not the shared ones)

    @property
    def profile(self) -> str:
        return self.source.split("@")[0]

    def mean(self, what: Callable[[Work], float]) -> float:
        return sum(what(w) for w in self.questions) / max(1, len(self.questions))

    def record(self) -> dict:
        return {"source": self.source, "dataset": self.dataset, "format": self.format, "method": self.method,
                "type": self.type,
                "budget": self.budget, "batch_size": self.batch_size, "chunk_size": self.chunk_size,
                "wall_time_s": self.wall_time_s, "hits": self.hits, "model": self.model,
                "questions_file": self.questions_file, "work": [w.row() for w in self.questions]}

    @classmethod
    def from_record(cls, record: dict) -> "RunCounts":
        return cls(record["source"], record["dataset"], record["format"], record["method"], record["type"],
                   record["budget"],
                   record["batch_size"], record["chunk_size"], tuple(Work.from_row(r) for r in record["work"]),
                   record.get("hits", {}), record.get("wall_time_s", 0.0), record.get("model", ""),
                   record.get("questions_file", ""))


def load_table(path: Path = TABLE) -> list[RunCounts]:
    if not path.is_file():
        raise InputError(f"{path}: missing; `python benchmarks/question_counts.py` writes it from built runs")
    runs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                runs.append(RunCounts.from_record(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{path}:{number}: not a run's counts ({exc})") from None
    return runs


def write_table(runs: Iterable[RunCounts], path: Path = TABLE) -> None:
    from ..io import atomic_write

    with atomic_write(path) as handle:
        for run in sorted(runs, key=lambda r: (r.source, r.dataset, r.method)):
            handle.write(json.dumps(run.record(), sort_keys=True, separators=(",", ":")) + "\n")


# ---- from a trace ------------------------------------------------------------------------------


def _itemised(step: dict) -> bool:
    """A `step_record`: its tokens are [token, probability] pairs (DioR's attribution steps list the
    question's token texts instead)."""
    tokens = step.get("tokens")
    return isinstance(tokens, list) and all(isinstance(t, list) for t in tokens)


def question_work(trace: dict, count: Callable[[str], int], own_prompt: int, passage_tokens: float,
                  ig_steps: int) -> Work:
    """One trace record's work. `count(text)` is the model's token count of a text; `own_prompt` the
    first prompt's own tokens (without the shared few-shot prefix and without passages);
    `passage_tokens` the mean tokens of a passage as shown."""
    calls, cut, sets, sampled, ig_points, shown = [], [], [], 0, 0, 0
    for step in trace.get("steps", []):
        if step.get("phase") in ATTRIBUTION_PHASES:
            ig_points += ig_steps
            continue
        if isinstance(step.get("samples"), list):
            lengths = [count(s) for s in step["samples"]]
            if lengths:
                sets.append((len(lengths), max(lengths)))
                sampled += sum(lengths)
        if _itemised(step):
            calls.append(len(step["tokens"]))
        elif isinstance(step.get("text"), str) and ("finish" in step or step.get("phase") == "force-answer"):
            calls.append(count(step["text"]))
        else:
            continue
        if step.get("finish") == "length":
            cut.append(len(calls) - 1)
        shown += len(step.get("retrieved") or [])
    counters = trace.get("counters", {})
    unitemised = counters.get("generated_tokens", 0) - sum(calls) - sampled
    if unitemised > 0:  # a call no step records (its tokens are in the counters)
        calls.append(unitemised)
    if not shown:  # one call shown the run's passages (SR-RAG, whose trace steps carry no retrieval)
        shown = len(trace.get("passages", []))
    output = count(trace.get("output", ""))
    later = len(calls) + len(sets) - 1
    prefill = (len(calls) + len(sets)) * own_prompt + shown * passage_tokens + later * output / 2
    return Work(tuple(calls), tuple(cut), tuple(sets), sampled, round(prefill), counters.get("retrievals", 0),
                ig_points)


def shared_prefix(encoded: Sequence[Sequence[int]]) -> int:
    """How many leading ids all the prompts share (the few-shot part the engine encodes once)."""
    if not encoded:
        return 0
    first, n = encoded[0], len(encoded[0])
    for ids in encoded[1:]:
        n = next((i for i, (a, b) in enumerate(zip(first[:n], ids)) if a != b), min(n, len(ids)))
    return n if len(encoded) > 1 else 0
