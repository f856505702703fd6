"""This engine against transformers' own `generate` on the same work: what a user would write instead.

Workload: the first N demo questions as wo-RAG prompts (chat format, the demo's 8 exemplars; no
passages, so no index and no JVM are needed) or SR-RAG prompts (top-3 BM25 passages), greedy, at most
100 new tokens, cut at the project's stop strings ("\\n\\n", "Question:"). The same token ids go into
both: the engine's own encoding of each prompt.

- `engine`: `HFModel.generate` at batch size B, all N prompts in one call (`--attention fast`, the
  default: shared few-shot prefix held once, each prompt prefilled alone, B rows decoded together with
  continuous batching; `--attention eager`: transformers' forward in lockstep batches of B).
- `generate`: `AutoModelForCausalLM.generate` at batch size B as a user would call it: default
  attention (sdpa), left padding, `do_sample=False`, `stop_strings` with the tokenizer, and the
  generated text cut at the first stop string afterwards (rows keep decoding until the whole batch
  stops).

Reported per configuration: kept tokens (generated up to the stop string), kept tokens/s, forward
tokens per kept token (every position a forward pass computed, padding included, over the kept
tokens), the share of the memory-bandwidth bound reached (B rows x measured copy bandwidth / bytes of
weights a decode step reads: no decode step can stream the weights faster), peak memory (host RSS; GPU
peak on CUDA), and how many outputs equal the engine's batch-1 output. Each configuration runs in a
fresh process; model load is excluded from the time.

Usage: python benchmarks/vs_generate.py [--method wo-rag|sr-rag] [--questions 32] [--batch-sizes 1 8 32]
                                        [--threads 2] [--model-dir DIR] [--device cpu|cuda]
                                        [--dtype float32|bfloat16|float16] [--random-init llama-2-7b]
                                        [--attention fast|eager] [--cuda-graphs] [--max-new-tokens 100]
                                        [--extras none|dragin] [--kernels default|fused|modules]
                                        [--cpu-kernels auto|packed|mkl|modules]
                                        [--modes engine generate]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from engine import workload  # benchmarks/engine.py: the same demo prompts
from model_args import (REPO, add_model_arguments, engine, load_model, machine_line, memory_bandwidth, model_argv,
                        model_name,
                        require_model, weight_bytes)

MODES = ("engine", "generate")
KERNEL_CHOICE: dict = {}  # the engine child's CPU linear kernel (lm.cpu_kernels), for the header


def kept_tokens(tokenizer, ids: list[int], stop) -> list[int]:
    """The leading tokens whose text lies before the first stop string (what the engine keeps)."""
    from adaptive_rag.lm.base import cut_at_stop
    from adaptive_rag.lm.hf import token_texts

    text, _ = cut_at_stop(tokenizer.decode(ids), stop)
    kept, length = [], 0
    for token, piece in zip(ids, token_texts(tokenizer, ids)):
        if length + len(piece) > len(text):
            break
        kept.append(token)
        length += len(piece)
    return kept


def run_engine(args, prompts, stop):
    from adaptive_rag.lm.base import Extras

    # DRAGIN's per-token reads: the entropy of every next-token distribution and the last layer's attention row
    extras = Extras(entropy=True, attention_layer=-1) if args.extras == "dragin" else Extras()
    lm = engine(args, args.batch_size)
    KERNEL_CHOICE.update(lm.kernel_choice or {})
    # untimed: loads kernels and encodes the shared few-shot prefix once; with CUDA graphs, the whole workload
    # once, so that every batch bucket's graph is captured before the clock starts (a generation job captures
    # each bucket once and replays it for the rest of its run)
    lm.generate(prompts if args.cuda_graphs else prompts[:args.batch_size],
                args.max_new_tokens if args.cuda_graphs else 2, stop, extras)
    lm.forward_tokens = 0
    start = _sync_clock(lm.torch, args.device)
    results = lm.generate(prompts, args.max_new_tokens, stop, extras)
    seconds = _sync_clock(lm.torch, args.device) - start
    return lm.torch, seconds, [r.token_ids for r in results], lm.forward_tokens, lm.model


def run_generate(args, prompts, stop):
    import torch

    from adaptive_rag.lm.hf import HFModel

    model, tokenizer = load_model(args)  # transformers' default attention (sdpa)
    encoder = HFModel.__new__(HFModel)  # the engine's prompt encoding only, no second model in memory
    encoder.tokenizer = tokenizer
    ids = [HFModel.encode(encoder, p)[0] for p in prompts]
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = dict(max_new_tokens=args.max_new_tokens, do_sample=False, stop_strings=list(stop), tokenizer=tokenizer,
                  pad_token_id=tokenizer.pad_token_id, temperature=None, top_p=None, top_k=None)
    with torch.no_grad():
        batch = tokenizer.pad({"input_ids": ids[:1]}, return_tensors="pt").to(args.device)
        model.generate(**batch, **{**config, "max_new_tokens": 1})  # untimed warm-up
    outputs, forward = [], 0
    start = _sync_clock(torch, args.device)
    with torch.no_grad():
        for first in range(0, len(ids), args.batch_size):
            chunk = ids[first:first + args.batch_size]
            batch = tokenizer.pad({"input_ids": chunk}, return_tensors="pt").to(args.device)
            out = model.generate(**batch, **config)
            width = batch["input_ids"].shape[1]
            steps = out.shape[1] - width
            forward += len(chunk) * (width + max(steps - 1, 0))  # prefill, then one position per row per step
            outputs.extend(row[width:].tolist() for row in out)
    seconds = _sync_clock(torch, args.device) - start
    eos = model.generation_config.eos_token_id
    ends = {tokenizer.pad_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}
    return torch, seconds, [kept_tokens(tokenizer, _until(o, ends), stop) for o in outputs], forward, model


def _until(ids: list[int], ends: set[int]) -> list[int]:
    """The generated ids before the first end-of-sequence or padding id (the engine keeps no EOS)."""
    cut = next((i for i, token in enumerate(ids) if token in ends), len(ids))
    return ids[:cut]


def _sync_clock(torch, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


def child(args) -> None:
    from adaptive_rag.prompts.fewshot import STOP_STRINGS

    prompts = workload(args.questions, args.method)
    torch, seconds, tokens, forward, model = (run_engine if args.child == "engine" else run_generate)(
        args, prompts, STOP_STRINGS)
    cuda = args.device.startswith("cuda")
    record = {"seconds": seconds, "tokens": tokens, "forward_tokens": forward, "weight_bytes": weight_bytes(model),
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}
    record["bandwidth"] = memory_bandwidth(torch, args.device)  # after the memory readings: it allocates 2 GB
    record["cpu_kernels"] = KERNEL_CHOICE.get("kernel")
    print(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("wo-rag", "sr-rag"), default="wo-rag")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--extras", choices=("none", "dragin"), default="none",
                        help="what the engine returns per token besides log-probabilities (dragin: entropies and "
                             "the last layer's attention rows); transformers generate returns none")
    add_model_arguments(parser)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="what to measure (default: both; the engine alone when comparing its own settings)")
    args = parser.parse_args()
    if args.child:
        return child(args)
    require_model(args.model_dir)

    def measure(mode: str, batch_size: int) -> dict:
        command = [sys.executable, __file__, "--child", mode, "--batch-size", str(batch_size), "--method",
                   args.method, "--questions", str(args.questions), "--max-new-tokens", str(args.max_new_tokens),
                   "--extras", args.extras, *model_argv(args)]
        out = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            sys.exit(f"error: {mode} at batch {batch_size} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    modes = [m for m in MODES if m in args.modes]
    runs = {(mode, b): measure(mode, b) for b in args.batch_sizes for mode in modes}
    first = runs[(modes[0], args.batch_sizes[0])]
    reference = first["tokens"]
    gpu = args.device.startswith("cuda")
    chosen = sorted({r["cpu_kernels"] for r in runs.values() if r.get("cpu_kernels")})  # lm.cpu_kernels' choice
    print(f"\n{args.questions} demo questions ({args.method} prompts, chat format), {model_name(args)} {args.dtype} "
          f"on {args.device}{'' if gpu else f', {args.threads} threads'}, greedy, at most {args.max_new_tokens} new "
          f"tokens; engine attention {args.attention}{' with CUDA graphs' if args.cuda_graphs else ''}, "
          f"{args.kernels} kernels"
          f"{'' if gpu or not chosen else ', CPU linear kernel ' + '/'.join(chosen)}"
          f"{', with entropies and last-layer attention rows (DRAGIN)' if args.extras == 'dragin' else ''}; a decode "
          f"step reads {first['weight_bytes'] / 1e9:.2f} GB of weights, measured copy bandwidth "
          f"{first['bandwidth'] / 1e9:.1f} GB/s: at most {first['bandwidth'] / first['weight_bytes']:.1f} "
          f"steps/s")
    print(machine_line(args.device, first["bandwidth"]) + "\n")
    print("| batch | implementation | seconds | kept tokens | kept tokens/s | engine speed-up | % of bandwidth bound | "
          f"forward tokens per kept token | peak RSS (MB) |{' peak GPU (MB) |' if gpu else ''} same output as "
          f"{'engine' if modes[0] == 'engine' else 'generate'} batch {args.batch_sizes[0]} |")
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if gpu else "") + "---|")
    for b in args.batch_sizes:
        rate = {}
        for mode in modes:
            r = runs[(mode, b)]
            kept = sum(len(t) for t in r["tokens"])
            rate[mode] = kept / r["seconds"]
            same = sum(a == c for a, c in zip(r["tokens"], reference))
            speed = f"{rate['engine'] / rate['generate']:.2f}x" if mode == "generate" and "engine" in rate else ""
            name = "this engine" if mode == "engine" else "transformers generate"
            bound = b * r["bandwidth"] / r["weight_bytes"]
            print(f"| {b} | {name} | {r['seconds']:.1f} | {kept} | {rate[mode]:.1f} | {speed} | "
                  f"{100 * rate[mode] / bound:.0f} % | "
                  f"{r['forward_tokens'] / max(kept, 1):.2f} | {r['peak_rss_mb']:.0f} |"
                  + (f" {r['peak_gpu_mb']:.0f} |" if gpu else "") + f" {same}/{len(reference)} |")


if __name__ == "__main__":
    main()
