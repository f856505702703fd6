"""The fast path's CPU linear kernels on this machine: their speed per row count, and the greedy outputs.

`model.cpu_kernels: auto` chooses among oneDNN's inner product on packed weights (`packed`), MKL's GEMM
on weights packed for the batch's rows (`mkl`) and `torch.nn.functional.linear` on the modules' weights
(`modules`, MKL's plain GEMM) by timing them when the model loads (`adaptive_rag.lm.cpu_kernels`). This
prints what that choice sees, at more row counts: the seconds of one pass over every linear layer of the
model (what a decode step's products cost), the weight bytes streamed per second and the arithmetic
rate; then the first N demo questions (wo-RAG prompts, greedy, batch B, at most 100 new tokens)
generated with each kernel, timed, and how many outputs equal the packed kernel's. (`mkl` is packed
for B rows: at another row count it pads up to B rows where it has at least a quarter of them, and runs
MKL's plain GEMM otherwise.) Run it with `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2` on an AVX-512 machine to see the AVX2 code paths (the machine line says
which settings were in force).

Usage: python benchmarks/cpu_kernels.py [--questions 32] [--batch-size 8] [--rows 1 4 8 32] [--threads 2]
                                        [--model-dir DIR] [--dtype float32|bfloat16] [--random-init SHAPE]
"""

from __future__ import annotations

import argparse
import time

from engine import workload  # benchmarks/engine.py: the same demo prompts
from model_args import add_model_arguments, engine, load_model, machine_line, model_name, require_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=100)
    add_model_arguments(parser)
    args = parser.parse_args()
    require_model(args.model_dir)

    import torch

    from adaptive_rag.lm.cpu_kernels import available, pack, time_kernels
    from adaptive_rag.prompts.fewshot import STOP_STRINGS

    loaded = load_model(args, "eager")
    packed_lm = engine(args, args.batch_size, loaded=loaded, cpu_kernels="packed")
    modules = packed_lm.decoder.products()
    kernels = available(modules[0].weight.dtype, args.batch_size)
    if "packed" not in kernels:
        raise SystemExit("error: oneDNN's packed kernel is unavailable in this torch build; nothing to compare")
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in modules)
    flops_per_row = 2 * sum(m.weight.numel() for m in modules)
    packs = {kernel: packed_lm.decoder.packed if kernel == "packed" else pack(kernel, modules, args.batch_size)
             for kernel in kernels}
    seconds = time_kernels(modules, packs, args.rows, args.batch_size)
    del packs

    print(f"\n{model_name(args)} {args.dtype}, {len(modules)} linear layers ({weight_bytes / 1e9:.2f} GB of weights), "
          f"{args.threads} threads")
    print(machine_line(args.device) + "\n")
    print("| rows | kernel | ms per pass over every linear layer | weights GB/s | GFLOP/s | vs packed |")
    print("|--:|---|--:|--:|--:|--:|")
    for rows in args.rows:
        for kernel in kernels:
            s = seconds[kernel][str(rows)]
            ratio = s / seconds["packed"][str(rows)]
            print(f"| {rows} | {kernel} | {1e3 * s:.2f} | {weight_bytes / s / 1e9:.1f} | "
                  f"{rows * flops_per_row / s / 1e9:.1f} | {ratio:.2f}x |")

    prompts = workload(args.questions, "wo-rag")
    print(f"\n{args.questions} demo questions (wo-rag prompts), greedy, batch {args.batch_size}, at most "
          f"{args.max_new_tokens} new tokens\n")
    print("| kernel | seconds | generated tokens | tokens/s | same output as packed |")
    print("|---|--:|--:|--:|--:|")
    reference = None
    for kernel in kernels:
        lm = packed_lm if kernel == "packed" else engine(args, args.batch_size, loaded=loaded, cpu_kernels=kernel)
        lm.generate(prompts[:args.batch_size], 2, STOP_STRINGS)  # untimed: the shared prefix, the kernels' first use
        start = time.perf_counter()
        with torch.inference_mode():
            out = lm.generate(prompts, args.max_new_tokens, STOP_STRINGS)
        wall = time.perf_counter() - start
        tokens = [c.token_ids for c in out]
        reference = reference or tokens
        same = sum(a == b for a, b in zip(tokens, reference))
        generated = sum(len(t) for t in tokens)
        print(f"| {kernel} | {wall:.1f} | {generated} | {generated / wall:.1f} | {same}/{len(tokens)} |")


if __name__ == "__main__":
    main()
