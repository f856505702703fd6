"""Integrated-Gradients cost per question (DioR's early detection): interpolation points batched vs one at a time.

Workload: the first N demo questions as bare raw-text prompts (what DioR's reference attributes: the
question alone, no few-shot part, the tokenizer's BOS where it adds one), `HFModel.attribution` with the
reference settings (probability of the greedy next token, zero baseline, 64 Gauss-Legendre nodes). Per
`--batches` value B, B interpolation points go through the model as the rows of one forward + backward
(64 / B passes per question); B = 1 is the one-step-at-a-time path. Each B runs in a fresh process (its
peak RSS is its own); wall time covers the attribution calls only (model load and one untimed 2-node
warm-up call excluded). Also reports how far each B's per-token L2 norms are from B = 1's (they differ only
by float rounding in differently shaped matrix products), and the completeness error
|sum IG - (F(x) - F(0))| / |F(x) - F(0)| of B = 1 per question (the quadrature error of the path).

The default model is the test suite's tiny random Llama (2 layers, hidden size 32, built in a temporary
directory: no download, no model step), so the table shows the engine's overhead structure rather than a
real model's cost; `--smollm2` runs the bundled SmolLM2-135M-Instruct instead (`--model-dir`, default
data/models/smollm2-135m-instruct: `snakemake --cores all model` first).

Usage: python benchmarks/attribution.py [--smollm2] [--questions 8] [--batches 1 4 16 64] [--steps 64]
                                        [--threads 2] [--model-dir DIR] [--device cpu|cuda]
                                        [--dtype float32|bfloat16|float16]
On a GPU, peak RSS is host memory; the table adds the peak GPU memory of the attribution calls.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from model_args import REPO, add_model_arguments, machine_line, measured, model_argv, require_model, start_clock


def questions(n: int) -> list[str]:
    from adaptive_rag.data.datasets import load_hotpotqa

    return [e.question for e in load_hotpotqa(REPO / "data/demo/hotpot_demo.json")[:n]]


def child(args) -> None:
    """One batch size, measured in this process; prints one JSON line."""
    from adaptive_rag.lm.base import IGSettings, Prompt
    from adaptive_rag.lm.hf import HFModel

    prompts = [Prompt(text=q) for q in questions(args.questions)]
    lm = HFModel(args.model_dir, args.dtype, args.device, args.threads)
    settings = IGSettings(steps=args.steps, batch=args.child)
    lm.attribution(prompts[0], IGSettings(steps=2, batch=2))  # untimed warm-up (first-call allocations)
    lm.forward_tokens = 0
    start = start_clock(lm.torch, args.device)
    results = [lm.attribution(p, settings) for p in prompts]
    print(json.dumps({
        **measured(lm.torch, args.device, start), "forward_tokens": lm.forward_tokens,
        "tokens": [len(r.token_ids) for r in results],
        "l2": [r.l2.tolist() for r in results],
        "completeness": [abs(r.dot.sum() - (r.value - r.baseline_value)) / abs(r.value - r.baseline_value)
                         for r in results],
    }))


def tiny_model(directory: Path) -> Path:
    """The tests' tiny random Llama (tests/conftest.py), materialised as the model step would."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import build_tiny_llama

    from adaptive_rag.lm.models import materialise

    out = directory / "tiny"
    materialise(str(build_tiny_llama(directory / "source")), out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smollm2", action="store_true",
                        help="measure the bundled SmolLM2-135M-Instruct (--model-dir) instead of the tiny Llama")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64],
                        help="interpolation points per forward + backward (1: one step at a time)")
    parser.add_argument("--steps", type=int, default=64, help="Gauss-Legendre nodes (the reference: 64)")
    add_model_arguments(parser)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if 1 not in args.batches:
        args.batches = [1, *args.batches]  # the one-step-at-a-time reference every row is compared with
    with tempfile.TemporaryDirectory() as scratch:
        if args.smollm2:
            require_model(args.model_dir)
        else:
            args.model_dir = tiny_model(Path(scratch))

        def measure(batch: int) -> dict:
            command = [sys.executable, __file__, "--child", str(batch), "--questions", str(args.questions),
                       "--steps", str(args.steps), *model_argv(args)]
            out = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
            if out.returncode:
                sys.exit(f"error: batch {batch} failed:\n{out.stderr[-3000:]}")
            return json.loads(out.stdout.strip().splitlines()[-1])

        runs = {b: measure(b) for b in args.batches}
    reference = runs[1]
    model = "SmolLM2-135M-Instruct" if args.smollm2 else "the tiny random Llama (2 layers, hidden 32)"
    gpu = args.device.startswith("cuda")
    tokens = reference["tokens"]
    print(f"\n{args.questions} demo questions as bare prompts ({min(tokens)}-{max(tokens)} tokens), {model} "
          f"{args.dtype} on {args.device}, {args.threads} threads; IG: probability of the greedy next token, "
          f"zero baseline, {args.steps} Gauss-Legendre nodes")
    print(machine_line(args.device) + "\n")
    print("| points per pass | forward+backward passes per question | s per question | speed-up over one at a time | "
          "forward tokens per question | max rel. difference of the L2 scores from one at a time | peak RSS (MB) |"
          + (" peak GPU memory (MB) |" if gpu else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if gpu else ""))
    for b in args.batches:
        r = runs[b]
        if b == 1:
            difference = "(reference)"
        else:
            difference = max(float(np.abs(np.array(x) - np.array(y)).max() / np.abs(np.array(y)).max())
                             for x, y in zip(r["l2"], reference["l2"]))
            difference = f"{difference:.1e}"
        print(f"| {b}{' (one at a time)' if b == 1 else ''} | {-(-args.steps // b)} | "
              f"{r['seconds'] / args.questions:.3f} | {reference['seconds'] / r['seconds']:.2f}x | "
              f"{r['forward_tokens'] / args.questions:.0f} | {difference} | {r['peak_rss_mb']:.0f} |"
              + (f" {r['peak_gpu_mb']:.0f} |" if gpu else ""))
    errors = reference["completeness"]
    print(f"\ncompleteness error |sum IG - (F(x) - F(0))| / |F(x) - F(0)| per question (one at a time): "
          f"median {np.median(errors):.1e}, max {max(errors):.1e}")


if __name__ == "__main__":
    main()
