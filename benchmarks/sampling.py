"""Sampling benchmark: sampled tokens/second of SeaKR-style sampling, k samples batched vs one at a time.

Workload: the first N demo questions as chat-format prompts with the demo's 8 exemplars (no passages),
k seeded samples each (temperature 1, top-k 50, top-p 0.9; continuation j seeded seed + j), at most 100
new tokens, cut at the first sentence (stop strings "\\n\\n", "Question:" and ". ", SeaKR's pseudo-step),
with SeaKR's final-EOS state at layer 15 of SmolLM2-135M-Instruct's 30 (`Extras(final_layers=(15,))`).
Per k, three modes: `batched`, one `sample(n=k)` call per question (k rows decoded together after one
shared prefill); `sequential`, k `sample(n=1, seed=seed + j)` calls per question; `sample_batch`, one
`sample_batch` call over all N questions (what SeaKR calls: batched samples plus one Gram per
question). Each runs in a fresh process, so its peak RSS is its own; wall time and forward tokens
cover the sampling calls only (model load and the shared few-shot prefix, encoded once before, are
excluded). Also checks that the modes give the same token ids (they should: the seeds are the
same), and how far apart their final states and Grams are.

`--workload sugar` measures SUGAR's sampling instead: the one-shot `Q: ... A:` prompt, M samples at
temperature 1.0 with no top-k/top-p filter, at most 32 new tokens cut at SUGAR's stop strings, no
hidden states (SUGAR needs only the log-probabilities); its `sample_batch` mode goes through the `sugar`
method's own sampling step (`Sugar.sample` over the whole batch), so the engine-call count it reports is
the method's.

Needs the demo model: `snakemake --cores all model` first (or `--model-dir` pointing at a built one).
Usage: python benchmarks/sampling.py [--workload seakr|sugar] [--k 10 20] [--questions 4] [--threads 2] [--seed 0]
                                     [--model-dir DIR]
                                     [--device cpu|cuda] [--dtype float32|bfloat16|float16]
On a GPU, peak RSS is host memory; the table adds the peak GPU memory of the sampling calls.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace

import numpy as np

from model_args import REPO, add_model_arguments, machine_line, measured, model_argv, require_model, start_clock
STOP = ("\n\n", "Question:", ". ")  # one sentence: SeaKR's pseudo-step
MAX_NEW_TOKENS = 100
LAYER = 15  # 1-based, the middle of SmolLM2-135M's 30 layers
MODES = ("batched", "sequential", "sample_batch")


def workload(n: int):
    from adaptive_rag.data.datasets import load_hotpotqa
    from adaptive_rag.prompts.fewshot import build_prompt, load_exemplars

    examples = load_hotpotqa(REPO / "data/demo/hotpot_demo.json")[:n]
    exemplars = load_exemplars(REPO / "data/demo/exemplars.json", 8)
    return [build_prompt("chat", exemplars, e.question) for e in examples], [e.question for e in examples], exemplars


class CountingLM:
    """The engine as the method sees it, counting the calls that reach it."""

    def __init__(self, lm):
        self.lm, self.calls = lm, 0

    def sample_batch(self, *args, **kwargs):
        self.calls += 1
        return self.lm.sample_batch(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.lm, name)


def sugar_method(lm, exemplars, k: int, seed: int):
    """SUGAR with its defaults (M = k samples), as the runner builds it on the demo's chat prompts."""
    from adaptive_rag.methods.base import Context
    from adaptive_rag.methods.sugar.sugar import Sugar
    from adaptive_rag.settings import Section

    section = Section({"samples": k, "seed": seed, "thresholds": [0.5, 1.0]}, "methods.sugar", "benchmark")
    return Sugar(Sugar.read_settings(section), Context(lm=lm, exemplars=exemplars, prompt_format="chat",
                                                       max_new_tokens=MAX_NEW_TOKENS))


def child(args) -> None:
    """One (mode, k), measured in this process; prints one JSON line."""
    from adaptive_rag.lm.base import Extras, SamplingParams
    from adaptive_rag.lm.hf import HFModel

    prompts, questions, exemplars = workload(args.questions)
    lm = HFModel(args.model_dir, args.dtype, args.device, args.threads)
    extras = Extras(final_layers=(LAYER,))
    k, seed = args.k[0], args.seed
    params, max_new, stop = SamplingParams(n=k, seed=seed), MAX_NEW_TOKENS, STOP
    if args.workload == "sugar":
        method = sugar_method(CountingLM(lm), exemplars, k, seed)
        prompts, params = [method.prompt(q) for q in questions], method.sampling
        max_new, stop, extras = method.sample_tokens, method.stop, Extras()
    grams, calls = None, 0
    lm.generate(prompts[:1], 1)  # untimed: encodes the shared few-shot prefix (once per dataset in a run)
    lm.forward_tokens = 0
    start = start_clock(lm.torch, args.device)
    if args.child == "batched":
        samples = [lm.sample(p, params, max_new, stop, extras) for p in prompts]
        calls = len(prompts)
    elif args.child == "sequential":
        samples = [[lm.sample(p, replace(params, n=1, seed=seed + j), max_new, stop, extras)[0]
                    for j in range(k)] for p in prompts]
        calls = k * len(prompts)
    elif args.workload == "sugar":  # the method's own sampling step over the whole batch
        sets, _ = method.sample(questions)
        samples, calls = [s.samples for s in sets], method.ctx.lm.calls
    else:
        sets = lm.sample_batch(prompts, params, max_new, stop, extras)
        samples, grams, calls = [s.samples for s in sets], [s.grams[str(LAYER)].tolist() for s in sets], 1
    print(json.dumps({
        **measured(lm.torch, args.device, start), "forward_tokens": lm.forward_tokens, "calls": calls,
        "tokens": [[c.token_ids for c in row] for row in samples],
        "finals": None if grams or args.workload == "sugar" else [[c.final_hidden[0].tolist() for c in row]
                                                                  for row in samples],
        "grams": grams,
    }))


def compare(reference: dict, other: dict) -> tuple[int, int, float | None, float | None]:
    """Continuations with the same token ids; over those questions whose continuations all match, the
    largest final-state difference (batched) or relative Gram difference (sample_batch)."""
    from adaptive_rag.lm.base import gram

    same = total = 0
    state_diff = gram_diff = None
    for q, (ref_row, row) in enumerate(zip(reference["tokens"], other["tokens"])):
        matches = [a == b for a, b in zip(ref_row, row)]
        same, total = same + sum(matches), total + len(matches)
        if not all(matches) or reference["finals"] is None:  # SUGAR's workload has no states
            continue
        ref_states = np.array(reference["finals"][q])
        if other["finals"] is not None:
            diff = float(np.abs(np.array(other["finals"][q]) - ref_states).max())
            state_diff = max(state_diff or 0.0, diff)
        else:
            expected = gram(ref_states)
            diff = float(np.abs(np.array(other["grams"][q]) - expected).max() / np.abs(expected).max())
            gram_diff = max(gram_diff or 0.0, diff)
    return same, total, state_diff, gram_diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["seakr", "sugar"], default="seakr",
                        help="SeaKR's pseudo-step with final states, or SUGAR's one-shot answers (M = --k)")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 20], help="samples per question")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    add_model_arguments(parser)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    require_model(args.model_dir)

    def measure(mode: str, k: int) -> dict:
        command = [sys.executable, __file__, "--child", mode, "--k", str(k), "--questions", str(args.questions),
                   "--seed", str(args.seed), "--workload", args.workload, *model_argv(args)]
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
        return json.loads(out.stdout.strip().splitlines()[-1])

    runs = {(k, mode): measure(mode, k) for k in args.k for mode in MODES}
    if args.workload == "sugar":
        what = ("SUGAR's one-shot `Q: ... A:` chat prompts, temperature 1.0, no top-k/top-p, at most 32 new "
                "tokens, log-probabilities only; sample_batch = the method's own sampling step")
    else:
        what = (f"chat prompts, 8 exemplars, one sentence of at most {MAX_NEW_TOKENS} new tokens, final state at "
                f"layer {LAYER}")
    print(f"\n{args.questions} demo questions, {what}; SmolLM2-135M {args.dtype} on {args.device}, "
          f"{args.threads} threads, seed {args.seed}")
    print(machine_line(args.device) + "\n")
    gpu = args.device.startswith("cuda")
    print("| k | mode | engine calls | wall s | sampled tokens | sampled tokens/s | forward tokens | speed-up over "
          "sequential | identical to sequential | peak RSS (MB) |" + (" peak GPU memory (MB) |" if gpu else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if gpu else ""))
    notes = []
    for k in args.k:
        reference = runs[(k, "sequential")]
        for mode in MODES:
            r = runs[(k, mode)]
            sampled = sum(len(ids) for row in r["tokens"] for ids in row)
            if mode == "sequential":
                identical = "(reference)"
            else:
                same, total, state_diff, gram_diff = compare(reference, r)
                identical = "yes" if same == total else f"no ({same}/{total})"
                if state_diff is not None:
                    notes.append(f"k={k}: final states, batched vs sequential: max |difference| {state_diff:.1e}")
                if gram_diff is not None:
                    notes.append(f"k={k}: sample_batch Grams vs the Grams of the sequential final states: max "
                                 f"relative difference {gram_diff:.1e}; {r['seconds'] / args.questions:.2f} s "
                                 f"per prompt")
            label = f"{mode} (all {args.questions} prompts)" if mode == "sample_batch" else mode
            print(f"| {k} | {label} | {r['calls']} | {r['seconds']:.1f} | {sampled} | {sampled / r['seconds']:.1f} | "
                  f"{r['forward_tokens']} | {reference['seconds'] / r['seconds']:.2f}x | {identical} | "
                  f"{r['peak_rss_mb']:.0f} |" + (f" {r['peak_gpu_mb']:.0f} |" if gpu else ""))
    print()
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
