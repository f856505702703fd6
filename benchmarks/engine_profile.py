"""Where a generation call's time goes: `torch.profiler` over one `HFModel.generate` call of the engine.

Workload: the first N demo questions as wo-RAG prompts (as `vs_generate.py`), greedy, at most 100 new
tokens, optionally with DRAGIN's per-token reads. The whole workload runs once untimed (kernels loaded,
shared prefix encoded, CUDA graphs captured), then once under the profiler. Prints the wall time, the time
the device spent in kernels (on a GPU: how busy it was) and the operators that took the most device time
and the most host time.

Usage: python benchmarks/engine_profile.py [--questions 16] [--batch-size 8] [--extras none|dragin] [--top 15]
                                          [--threads 2] [--model-dir DIR] [--device cpu|cuda]
                                          [--dtype float32|bfloat16|float16] [--random-init SHAPE]
                                          [--attention fast|eager] [--cuda-graphs]
                                          [--kernels default|fused|modules] [--cpu-kernels auto|packed|mkl|modules]
"""

from __future__ import annotations

import argparse
import time

from engine import workload  # benchmarks/engine.py: the same demo prompts
from model_args import add_model_arguments, engine, machine_line, model_name, require_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--extras", choices=("none", "dragin"), default="none")
    parser.add_argument("--top", type=int, default=15)
    add_model_arguments(parser)
    args = parser.parse_args()
    require_model(args.model_dir)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from adaptive_rag.lm.base import Extras
    from adaptive_rag.prompts.fewshot import STOP_STRINGS

    extras = Extras(entropy=True, attention_layer=-1) if args.extras == "dragin" else Extras()
    prompts = workload(args.questions, "wo-rag")
    lm = engine(args, args.batch_size)
    lm.generate(prompts, args.max_new_tokens, STOP_STRINGS, extras)  # untimed: everything loaded and captured
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        results = lm.generate(prompts, args.max_new_tokens, STOP_STRINGS, extras)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    kept = sum(len(r.token_ids) for r in results)
    events = prof.key_averages()
    device_us = sum(e.self_device_time_total for e in events) if cuda else 0
    print("\n" + machine_line(args.device))
    print(f"{args.questions} questions, {model_name(args)} {args.dtype} on {args.device}, batch {args.batch_size}, "
          f"attention {args.attention}{' with CUDA graphs' if args.cuda_graphs else ''}, {args.kernels} kernels, "
          f"extras {args.extras}: "
          f"{wall:.2f} s, {kept} kept tokens, {kept / wall:.1f} kept tokens/s"
          + (f"; kernels ran {device_us / 1e6:.2f} s ({100 * device_us / 1e6 / wall:.0f} % of the wall time)"
             if cuda else "") + "\n")
    if cuda:
        print(events.table(sort_by="self_device_time_total", row_limit=args.top))
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
