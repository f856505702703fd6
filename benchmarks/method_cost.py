"""Method cost benchmark: what one question costs each method on the demo, measured cold (no call cache).

Runs `adaptive-rag generate` for each method on the first N questions of a dataset's split, in a fresh
process with a fresh, empty call cache (so every model call is made), and prints per question: wall time,
retrievals (Rc), greedy LLM calls (Gc), sampled sequences (SeaKR's k per judged context), generated and
sampled tokens (Tc) and sentences (Sc), each with its ratio to the first method named (the baseline).
Wall time covers the whole `generate` process, model load included (the same few seconds for every
method); the runner's own wall time, without start-up, is printed below the table.

Needs what the workflow builds first: the model, the index, the split and, for `delta: calibrated`
configurations, their calibration (`snakemake --cores all data/scores/demo-small/seakr.json` builds all).
`--keep DIR` keeps each method's run directory (DIR/<dataset>/<method>/: predictions, trace, provenance)
for `benchmarks/question_counts.py`, which reads the plan's per-question work off it.
Usage: python benchmarks/method_cost.py [--methods flare seakr] [--dataset demo-small] [--questions 4]
                                        [--params params.yaml] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from model_args import machine_line

REPO = Path(__file__).resolve().parents[1]
COUNTERS = (("retrievals", "Rc"), ("llm_calls", "Gc"), ("sampled_sequences", "sampled seqs"),
            ("generated_tokens", "Tc"), ("sentences", "Sc"))


def run(method: str, dataset: str, split: Path, params: Path, work: Path, model_dir: str, index: str) -> dict:
    out_dir = work / method
    command = [sys.executable, "-m", "adaptive_rag", "--params", str(params), "generate", "--dataset", dataset,
               "--method", method, "--split", str(split), "--out-dir", str(out_dir), "--model-dir", model_dir,
               "--index", index]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"error: {method}: generate failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines() if line]
    provenance = json.loads((out_dir / "provenance.json").read_text())
    totals = {name: sum(r["counters"].get(name, 0) for r in records) for name, _ in COUNTERS}
    return {"questions": len(records), "seconds": seconds, "generate_s": provenance["wall_time_s"],
            "misses": sum(v.get("misses", 0) for v in provenance["call_cache"].values() if isinstance(v, dict)),
            "hits": sum(v.get("hits", 0) for v in provenance["call_cache"].values() if isinstance(v, dict)),
            **totals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["flare", "seakr"], help="the first is the baseline")
    parser.add_argument("--dataset", default="demo-small")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--model-dir", default="data/models/smollm2-135m-instruct")
    parser.add_argument("--index", default="data/index/demo/bm25")
    parser.add_argument("--keep", type=Path, help="keep each run as DIR/<dataset>/<method>/ (for question_counts.py)")
    args = parser.parse_args()

    split = REPO / "data/splits" / f"{args.dataset}.jsonl"
    for needed in (split, REPO / args.model_dir, REPO / args.index):
        if not needed.exists():
            sys.exit(f"error: {needed} missing: build it first (`snakemake --cores all "
                     f"data/scores/{args.dataset}/{args.methods[-1]}.json` builds model, index, split and calibration)")
    params = yaml.safe_load(args.params.read_text())
    with tempfile.TemporaryDirectory(prefix="method-cost-") as tmp:
        work = Path(tmp)
        params["generation"]["cache"] = str(work / "calls.sqlite")  # cold: every call is made
        params_file = work / "params.yaml"
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        lines = [line for line in split.read_text().splitlines() if line][:args.questions]
        small = work / f"{args.dataset}.jsonl"
        small.write_text("\n".join(lines) + "\n")
        results = {m: run(m, args.dataset, small, params_file, work, args.model_dir, args.index)
                   for m in args.methods}
        for method in args.methods if args.keep else ():
            kept = args.keep / args.dataset / method
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(work / method, kept, ignore=shutil.ignore_patterns(".progress"))

    model = params["model"]
    print(f"\n{args.questions} questions of {args.dataset}, {model['name']} {model['dtype']} on {model['device']}, "
          f"{params['generation']['threads']} threads, batch {params['generation']['batch_size']}, "
          f"cold call cache; per question (ratio to {args.methods[0]})")
    print(machine_line(model["device"]) + "\n")
    header = ["method", "wall s/q", *[label + "/q" for _, label in COUNTERS], "model calls made", "cache hits"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    base = results[args.methods[0]]
    for method, r in results.items():
        n = r["questions"]

        def cell(value: float, reference: float) -> str:
            ratio = f" ({value / reference:.1f}x)" if reference else ""
            return f"{value / n:.1f}{ratio}"

        cells = [method, cell(r["seconds"], base["seconds"]),
                 *[cell(r[name], base[name]) for name, _ in COUNTERS], str(r["misses"]), str(r["hits"])]
        print("| " + " | ".join(cells) + " |")
    print("\nwall s/q: the whole generate process (model load included) over the questions; the runner's own "
          "timing without start-up: " + ", ".join(f"{m} {r['generate_s'] / r['questions']:.1f} s/q"
                                                 for m, r in results.items()))


if __name__ == "__main__":
    main()
