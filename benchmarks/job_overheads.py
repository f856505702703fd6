"""Where each generation job of a build spends its time besides answering: one row per run directory.

Reads every `data/runs/<dataset>/<method>/provenance.json` under the given directories (default
data/runs) and prints, per job, what its `timings` record: the process's start (Python, the imports and
the command line before the runner's clock began), opening the retriever (Anserini's JVM and index),
loading the model (and choosing its CPU kernels), setting the method up, the first chunk and the other
chunks, and what is left of the runner's wall time (writing the outputs). The first chunk also pays what a
method loads on first use (spaCy, a similarity encoder) and the shared prefix's encoding; the table's
"first-chunk excess" is its time beyond what its questions cost at the other chunks' rate per question,
when there are others. The model's load includes importing torch and transformers (the command line
imports them only then) and choosing the CPU kernels. The totals say how much of a build is fixed cost
per job, which no faster kernel removes. Runs on the fast attention path also record how their answering
split between prompt prefill (tokens and seconds: compute-bound) and decode steps (steps, the rows they
advanced, seconds: bound by reading the weights); the second table shows that split. The machine printed
is the one the runs recorded.

Usage: python benchmarks/job_overheads.py [RUNS_DIR ...] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model_args import REPO

COLUMNS = ("process_start_s", "retriever_open_s", "model_load_s", "method_setup_s")


def job_row(provenance: dict) -> dict | None:
    timings = provenance.get("timings")
    if not timings:
        return None
    chunks = timings.get("chunks_s") or []
    fixed = {key: timings.get(key) or 0.0 for key in COLUMNS}
    questions = provenance.get("questions") or 0
    size = ((provenance.get("params") or {}).get("generation") or {}).get("chunk_size") or questions
    sizes = [min(size, questions - i * size) for i in range(len(chunks))]  # a resumed run's are approximate
    rest, rest_questions = sum(chunks[1:]), sum(sizes[1:])
    excess = max(0.0, chunks[0] - sizes[0] * rest / rest_questions) if chunks[1:] and rest_questions > 0 else None
    wall = provenance.get("wall_time_s") or 0.0
    outside = wall - sum(chunks) - sum(fixed[k] for k in COLUMNS[1:])
    return {"job": f"{provenance['dataset']}/{provenance['method']}", "questions": provenance.get("questions"),
            **fixed, "chunks": len(chunks), "answering_s": sum(chunks), "first_chunk_excess_s": excess,
            "other_s": max(0.0, outside), "total_s": wall + fixed["process_start_s"],
            "engine": timings.get("engine")}


def engine_table(rows: list[dict]) -> list[str]:
    """Markdown lines: per job on the fast path, prefill and decode counts and seconds, and the rest of its
    answering time (retrieval, the method's own work, the engine's host-side work between steps)."""
    timed = [r for r in rows if r.get("engine")]
    if not timed:
        return []
    lines = ["| job | answering s | prefill tokens | prefill s | ms per prefill token | decode steps | rows per step "
             "| decode s | ms per step | rest of answering s |", "|---|" + "--:|" * 9]
    total = {"answering_s": 0.0, "prefill_tokens": 0, "prefill_s": 0.0, "decode_steps": 0, "decode_rows": 0,
             "decode_s": 0.0}

    def line(job, answering, e):
        rest = answering - e["prefill_s"] - e["decode_s"]
        return (f"| {job} | {answering:.1f} | {e['prefill_tokens']} | {e['prefill_s']:.1f} | "
                f"{1e3 * e['prefill_s'] / max(e['prefill_tokens'], 1):.2f} | {e['decode_steps']} | "
                f"{e['decode_rows'] / max(e['decode_steps'], 1):.1f} | {e['decode_s']:.1f} | "
                f"{1e3 * e['decode_s'] / max(e['decode_steps'], 1):.0f} | {rest:.1f} |")

    for r in timed:
        lines.append(line(r["job"], r["answering_s"], r["engine"]))
        total["answering_s"] += r["answering_s"]
        for key in total:
            if key != "answering_s":
                total[key] += r["engine"][key]
    lines.append(line("all jobs", total.pop("answering_s"), total))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, default=[REPO / "data/runs"])
    args = parser.parse_args()
    rows, machines = [], set()
    for root in args.runs:
        for path in sorted(root.glob("*/*/provenance.json")):
            record = json.loads(path.read_text())
            row = job_row(record)
            if row:
                rows.append(row)
                machines.add(json.dumps((record.get("host") or {}).get("cpu"), sort_keys=True))
    if not rows:
        sys.exit(f"error: no provenance.json with timings under {', '.join(map(str, args.runs))} "
                 "(runs finished before timings were recorded have none: rebuild them)")
    print(f"\n{len(rows)} generation jobs; recorded machine: {'; '.join(sorted(machines))}\n")
    head = ["job", "questions", "process start s", "retriever open s", "model load s", "method setup s", "chunks",
            "answering s", "first-chunk excess s", "other s", "total s", "outside answering"]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "--:|" * (len(head) - 1))
    fmt = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    for r in rows:
        outside = r["total_s"] - r["answering_s"]
        print(f"| {r['job']} | {r['questions']} | " + " | ".join(fmt(r[k]) for k in COLUMNS)
              + f" | {r['chunks']} | {fmt(r['answering_s'])} | {fmt(r['first_chunk_excess_s'])} | {fmt(r['other_s'])} | "
              f"{fmt(r['total_s'])} | {100 * outside / max(r['total_s'], 1e-9):.0f} % |")
    total = sum(r["total_s"] for r in rows)
    answering = sum(r["answering_s"] for r in rows)
    print(f"\nall jobs: {total:.0f} s, of which {total - answering:.0f} s ({100 * (total - answering) / total:.0f} %) "
          f"outside answering: " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {sum(r[k] for r in rows):.0f} s"
                                            for k in COLUMNS)
          + f", first-chunk excess {sum(r['first_chunk_excess_s'] or 0 for r in rows):.0f} s")
    engine = engine_table(rows)
    if engine:
        print("\nanswering on the fast path: prompt prefill against decode steps\n")
        print("\n".join(engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
