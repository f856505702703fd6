"""Engine benchmark: questions/second and peak memory on a fixed demo workload.

Workload: the first N demo questions as SR-RAG prompts (top-3 BM25 passages from the demo index)
or wo-RAG prompts (no passages), with the demo's 8 chat-format exemplars, greedy, 100 new tokens,
the standard stop strings, on the materialised SmolLM2-135M-Instruct. The two differ where the
time goes: SR-RAG prompts carry ~350 question-specific tokens (prefill, compute-bound), wo-RAG
prompts a few dozen (decode steps dominate, and batching amortises them). Configurations: batch size 1 and the default batch size with
an empty call cache, then the default batch size again on the warm cache. Each runs in a fresh
process so its peak RSS is its own. Also reports the forward tokens the model actually ran against
the minimum (every distinct prompt token once, plus the generated tokens), and whether batched
greedy tokens equal one-at-a-time tokens.

Needs the demo model and index: `snakemake --cores all model indexes` first.
Usage: python benchmarks/engine.py [--method sr-rag|wo-rag] [--questions 16] [--batch-size 8] [--threads 2]
                                  [--model-dir DIR] [--device cpu|cuda] [--dtype float32|bfloat16|float16]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from model_args import machine_line

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "data/models/smollm2-135m-instruct"
INDEX = REPO / "data/index/demo/bm25"


def workload(n: int, method: str):
    from adaptive_rag.data.datasets import load_hotpotqa
    from adaptive_rag.prompts.fewshot import build_prompt, load_exemplars

    examples = load_hotpotqa(REPO / "data/demo/hotpot_demo.json")[:n]
    exemplars = load_exemplars(REPO / "data/demo/exemplars.json", 8)
    if method == "wo-rag":  # no index, no JVM: runs where pyserini is not installed (a bare GPU box)
        return [build_prompt("chat", exemplars, e.question) for e in examples]
    from adaptive_rag.retrieval.bm25 import BM25Retriever

    retriever = BM25Retriever(INDEX)
    return [build_prompt("chat", exemplars, e.question, retriever.search(e.question, 3)) for e in examples]


def distinct_prefix_tokens(model, prompts) -> int:
    """Tokens a perfect prefix cache would run: the nodes of the prompts' token trie."""
    sequences = sorted(model.encode(p)[0] for p in prompts)
    total, previous = 0, []
    for ids in sequences:
        common = 0
        while common < min(len(ids), len(previous)) and ids[common] == previous[common]:
            common += 1
        total += len(ids) - common
        previous = ids
    return total


def child(args) -> None:
    """One configuration, measured in this process."""
    from adaptive_rag.lm.cache import CachedModel, CallCache
    from adaptive_rag.lm.hf import HFModel
    from adaptive_rag.prompts.fewshot import STOP_STRINGS

    prompts = workload(args.questions, args.method)
    base = HFModel(args.model_dir, args.dtype, args.device, args.threads, 0, args.batch_size)
    lm = CachedModel(base, CallCache(args.cache)) if args.cache else base
    cuda = args.device.startswith("cuda")
    if cuda:
        base.torch.cuda.synchronize()
    start = time.perf_counter()
    results = lm.generate(prompts, 100, STOP_STRINGS)
    if cuda:
        base.torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    generated = sum(len(r.token_ids) for r in results)
    print(json.dumps({
        "seconds": seconds, "qps": len(prompts) / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "forward_tokens": base.forward_tokens, "minimum_tokens": distinct_prefix_tokens(base, prompts) + generated,
        "tokens": [r.token_ids for r in results],
        "cache": lm.stats() if args.cache else None,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("sr-rag", "wo-rag"), default="sr-rag")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model-dir", type=Path, default=MODEL)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    for path in (args.model_dir, INDEX) if args.method == "sr-rag" else (args.model_dir,):
        if not path.exists():
            sys.exit(f"error: {path} missing; run `snakemake --cores all model indexes` first")

    def measure(batch_size: int, cache: str | None) -> dict:
        command = [sys.executable, __file__, "--child", "--method", args.method, "--questions", str(args.questions),
                   "--batch-size",
                   str(batch_size), "--threads", str(args.threads), "--model-dir", str(args.model_dir),
                   "--device", args.device, "--dtype", args.dtype] + (["--cache", cache] if cache else [])
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
        return json.loads(out.stdout.strip().splitlines()[-1])

    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "calls.sqlite")
        rows = [
            ("batch 1, no cache", measure(1, None)),
            (f"batch {args.batch_size}, cold cache", measure(args.batch_size, cache)),
            (f"batch {args.batch_size}, warm cache", measure(args.batch_size, cache)),
        ]
    single = rows[0][1]["tokens"]
    print(f"\n{args.questions} demo questions ({args.method} prompts, SmolLM2-135M {args.dtype} on {args.device}, {args.threads} threads, "
          f"100 new tokens max)")
    print(machine_line(args.device) + "\n")
    print("| configuration | questions/s | seconds | peak RSS (MB) | forward tokens | minimum tokens | "
          "same tokens as batch 1 |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows:
        same = sum(a == b for a, b in zip(r["tokens"], single))
        print(f"| {name} | {r['qps']:.2f} | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} | {r['forward_tokens']} | "
              f"{r['minimum_tokens']} | {same}/{len(single)} |")
    warm = rows[2][1]["cache"]["generate"]
    print(f"\nwarm-cache run: {warm['hits']} hits, {warm['misses']} misses; "
          f"speed-up of batching: {rows[1][1]['qps'] / rows[0][1]['qps']:.2f}x")


if __name__ == "__main__":
    main()
