"""Per-question work of finished runs, read off their traces, into the plan's counts table.

`adaptive-rag plan` multiplies each method's work per question by per-unit costs. The work comes from
here: for every run directory given (data/runs/<dataset>/<method>/ with trace.jsonl and provenance.json),
each question's greedy calls and their decode steps, sampling calls, prompt tokens prefilled,
retrievals and Integrated-Gradients points (src/adaptive_rag/planning/counts.py says how each is read),
with the run's token budget, batch shape, call-cache hits, model and questions' file. The runs given
together are one build and share a source name, `<profile>@<commit>`: the commit of the run that
finished last (a build made over several commits, like the demo's, is named by its newest). Entries of
the same profile, dataset and method are replaced; the rest of the table is kept.

Sampling methods are read the same way: SUGAR's step keeps its M sampled answers (one sampling call of
M rows) before the branch it chose, whose calls and retrievals follow; SeaKR's steps keep their k
samples beside the greedy text. A profile's runs on its own questions are the best counts for it; the
demo's questions (data/demo/) are synthetic and over the demo's corpus, not the shared profile's
benchmark samples, and the plan says which build each method's counts come from.

Reading a trace needs the model's tokenizer (SeaKR's and SUGAR's steps keep texts, not tokens, and the
prompt's length is measured on its text) and the corpus (the passages' lengths).

Usage: python benchmarks/question_counts.py --profile demo [--model-dir DIR] [--corpus TSV]
                                            [--table FILE] RUN_DIR...
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from adaptive_rag.io import read_jsonl  # noqa: E402
from adaptive_rag.lm.base import IGSettings  # noqa: E402
from adaptive_rag.planning.counts import TABLE, RunCounts, load_table, question_work, shared_prefix, write_table  # noqa: E402


def passage_texts(corpus: Path, wanted: set[str]) -> dict[str, str]:
    """id -> "title\\ntext" of the passages wanted, from a DPR-layout TSV (id, text, title)."""
    csv.field_size_limit(sys.maxsize)
    found = {}
    with corpus.open(encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t"):
            if row and row[0] in wanted:
                found[row[0]] = f"{row[2] if len(row) > 2 else ''}\n{row[1]}"
    return found


def encode_prompt(tokenizer, prompt) -> list[int]:
    """The ids of a traced prompt as the engine encodes it (chat messages through the chat template)."""
    if isinstance(prompt, dict):
        text = tokenizer.apply_chat_template(prompt["messages"], tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text + prompt.get("prefix", ""), add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def build_source(profile: str, run_dirs: list[Path]) -> str:
    """`<profile>@<commit>` of the run among `run_dirs` that finished last (module docstring)."""
    provenances = [json.loads((d / "provenance.json").read_text()) for d in run_dirs]
    newest = max(provenances, key=lambda p: p.get("finished") or "")
    return f"{profile}@{((newest.get('git') or {}).get('sha') or 'unknown')[:7]}"


def run_counts(run_dir: Path, source: str, tokenizer, corpus: Path) -> RunCounts:
    provenance = json.loads((run_dir / "provenance.json").read_text())
    traces = read_jsonl(run_dir / "trace.jsonl", "trace")
    params = provenance["params"]
    budget = params["dataset"].get("max_new_tokens") or params["generation"]["max_new_tokens"]

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    wanted = {str(p["id"]) for t in traces for p in t.get("passages", [])}
    wanted |= {str(i) for t in traces for s in t.get("steps", []) for i in (s.get("retrieved") or [])}
    texts = passage_texts(corpus, wanted) if wanted else {}
    passage_tokens = sum(count(t) for t in texts.values()) / len(texts) if texts else 0.0
    encoded = [encode_prompt(tokenizer, t["prompt"]) for t in traces]
    shared = shared_prefix(encoded)
    work = []
    for trace, ids in zip(traces, encoded):
        in_prompt = [p for p in trace.get("passages", []) if p.get("title") and p["title"] in json.dumps(trace["prompt"])]
        own = max(1, len(ids) - shared - round(len(in_prompt) * passage_tokens))
        work.append(question_work(trace, count, own, passage_tokens, IGSettings().steps))
    cache = provenance.get("call_cache") or {}
    hits = {op: [v["hits"], v["misses"]] for op, v in cache.items()
            if isinstance(v, dict) and "hits" in v and (v["hits"] or v["misses"])}
    return RunCounts(source, provenance["dataset"], params["dataset"]["format"], provenance["method"],
                     provenance["method_type"],
                     budget, params["generation"]["batch_size"], params["generation"].get("chunk_size", 32),
                     tuple(work), hits, provenance["wall_time_s"], (provenance.get("model") or {}).get("model", ""),
                     params["dataset"]["path"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="data/runs/<dataset>/<method>")
    parser.add_argument("--profile", required=True, help="the profile the runs were built with (demo, shared)")
    parser.add_argument("--model-dir", type=Path, default=REPO / "data/models/smollm2-135m-instruct",
                        help="the runs' model (its tokenizer is read)")
    parser.add_argument("--corpus", type=Path, default=REPO / "data/demo/psgs_demo.tsv",
                        help="the runs' passages TSV (the profile's corpus.passages)")
    parser.add_argument("--table", type=Path, default=TABLE, help="the counts table to update")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    table = {(r.profile, r.dataset, r.method): r for r in (load_table(args.table) if args.table.is_file() else [])}
    source = build_source(args.profile, args.runs)
    for run_dir in args.runs:
        run = run_counts(run_dir, source, tokenizer, args.corpus)
        table[(run.profile, run.dataset, run.method)] = run
        calls = run.mean(lambda w: len(w.calls))
        print(f"{run.source} {run.dataset}/{run.method}: {len(run.questions)} questions; per question "
              f"{calls:.2f} calls, {run.mean(lambda w: w.decode_tokens):.1f} decode tokens, "
              f"{run.mean(lambda w: len(w.sets)):.2f} sampling calls ({run.mean(lambda w: w.sampled):.1f} tokens), "
              f"{run.mean(lambda w: w.prefill):.0f} prefill tokens, {run.mean(lambda w: w.retrievals):.2f} "
              f"retrievals, {run.mean(lambda w: w.ig_points):.0f} IG points")
    write_table(table.values(), args.table)
    print(f"{args.table}: {len(table)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
