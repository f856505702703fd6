"""Device check: do CUDA float32 and bfloat16 give the CPU's tokens, with every white-box extra on?

Workload: the first N demo questions as chat prompts with the 8 exemplars; a greedy batch (60 new
tokens, the standard stop strings) asking for what DRAGIN, SCAAR and SeaKR read (the attention row
of layer `--attention-layer`, the hidden states of layer 15, per-token entropies), and 4 seeded
samples of the first prompt with SeaKR's final-EOS states and per-token logsumexps. Every
(device, dtype) runs the same calls; the table compares each with CPU float32: same greedy tokens,
same sampled tokens, and the largest difference in the first attention row. Needs the demo model
(`snakemake --cores all model`, or `--model-dir`). Devices without CUDA run the CPU row only.

Usage: python benchmarks/devices.py [--model-dir DIR] [--questions 4] [--attention-layer 29]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=REPO / "data/models/smollm2-135m-instruct")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--attention-layer", type=int, default=29, help="0-based, as Extras takes it")
    args = parser.parse_args()
    if not (args.model_dir / "config.json").is_file():
        sys.exit(f"error: {args.model_dir} is not a built model; run `snakemake --cores all model` first")

    import torch

    from adaptive_rag.data.datasets import load_hotpotqa
    from adaptive_rag.lm.base import Extras, SamplingParams
    from adaptive_rag.lm.hf import HFModel
    from adaptive_rag.prompts.fewshot import STOP_STRINGS, build_prompt, load_exemplars

    examples = load_hotpotqa(REPO / "data/demo/hotpot_demo.json")[:args.questions]
    shots = load_exemplars(REPO / "data/demo/exemplars.json", 8)
    prompts = [build_prompt("chat", shots, e.question) for e in examples]
    greedy_extras = Extras(attention_layer=args.attention_layer, hidden_layer=15, entropy=True)
    sample_extras = Extras(final_layers=(15,), logsumexp=True)
    runs = [("cpu", "float32")]
    if torch.cuda.is_available():
        runs += [("cuda", "float32"), ("cuda", "bfloat16")]
    out = {}
    for device, dtype in runs:
        lm = HFModel(args.model_dir, dtype, device, 2, 0, len(prompts))
        greedy = lm.generate(prompts, 60, STOP_STRINGS, greedy_extras)
        samples = lm.sample(prompts[0], SamplingParams(n=4, seed=3), 40, STOP_STRINGS, sample_extras)
        out[(device, dtype)] = (greedy, samples)
    reference_greedy, reference_samples = out[("cpu", "float32")]
    print(f"\n{len(prompts)} demo questions, {args.model_dir.name}; compared with cpu float32\n")
    print("| device | dtype | greedy tokens same | sampled tokens same | max diff, first attention row |")
    print("|---|---|---|---|---|")
    for (device, dtype), (greedy, samples) in out.items():
        same_greedy = sum(a.token_ids == b.token_ids for a, b in zip(greedy, reference_greedy))
        same_samples = sum(a.token_ids == b.token_ids for a, b in zip(samples, reference_samples))
        diff = max(float(np.abs(np.asarray(a.attentions[0]) - np.asarray(b.attentions[0])).max())
                   for a, b in zip(greedy, reference_greedy))
        print(f"| {device} | {dtype} | {same_greedy}/{len(greedy)} | {same_samples}/{len(samples)} | {diff:.1e} |")


if __name__ == "__main__":
    main()
