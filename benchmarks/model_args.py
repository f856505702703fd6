"""The model options every benchmark takes, the check that the model was built, the clock and memory
readings of a measured section, and the hardware's memory-bandwidth bound, in one place.

`--random-init SHAPE` measures a paper model's shape without its weights (no hub needed, nothing written
to disk): a Llama of that shape, randomly initialised on the device in the benchmark's dtype, with the
tokenizer of `--model-dir` (SmolLM2's: vocabulary 49,152). Random weights rarely produce a stop string,
so rows run to their token budget: a throughput measurement, not a quality one."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "data/models/smollm2-135m-instruct"


# Decoder shapes of the papers' models (Llama-2-7B: the DRAGIN lineage, SeaKR, DioR; Llama-3-8B: SUGAR's
# generation), SmolLM2-135M (the demo's) and a tiny one for tests. The vocabulary is the tokenizer's.
SHAPES = {
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32, max_position_embeddings=4096),
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=8192),
}


def add_model_arguments(parser: argparse.ArgumentParser, threads: int = 2) -> None:
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--model-dir", type=Path, default=MODEL,
                        help="a built model (with --random-init: only its tokenizer is read)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--random-init", choices=sorted(SHAPES), default=None,
                        help="measure a randomly initialised Llama of this shape instead of --model-dir's weights")
    parser.add_argument("--attention", choices=["fast", "eager"], default="fast",
                        help="the engine's attention path (model.attention)")
    parser.add_argument("--cuda-graphs", action="store_true", help="capture decode steps as CUDA graphs")
    parser.add_argument("--kernels", choices=["default", "fused", "modules"], default="default",
                        help="the fast path's layers: fused products and fewer kernels, or the model's modules "
                             "one by one (default: fused on a GPU, modules on the CPU)")
    parser.add_argument("--cpu-kernels", choices=["auto", "packed", "mkl", "modules"], default="auto",
                        help="the fast path's linear kernel on the CPU (model.cpu_kernels; auto: the fastest on "
                             "this machine, timed at load and remembered)")


def require_model(model_dir: Path) -> None:
    if not (model_dir / "config.json").is_file() and not (model_dir / "tokenizer.json").is_file():
        sys.exit(f"error: {model_dir} missing (no config.json); run `snakemake --cores all model` first, "
                 f"or pass --model-dir DIR of a built model")


def model_argv(args) -> list[str]:
    """The options back as command-line words, for the child process that measures one configuration."""
    return ["--threads", str(args.threads), "--model-dir", str(args.model_dir), "--device", args.device,
            "--dtype", args.dtype, "--attention", args.attention,
            *(["--random-init", args.random_init] if args.random_init else []),
            *(["--cuda-graphs"] if args.cuda_graphs else []), "--kernels", args.kernels,
            "--cpu-kernels", args.cpu_kernels]


def model_name(args) -> str:
    return f"random {args.random_init} shape" if args.random_init else args.model_dir.name


def load_model(args, attn_implementation: str | None = None):
    """(model, tokenizer) on args.device in args.dtype: `--model-dir`'s weights, or a random Llama of the
    `--random-init` shape (seed 0) built directly on the device."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    dtype = getattr(torch, args.dtype)
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if not args.random_init:
        model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype, **extra)
        return model.to(args.device).eval(), tokenizer
    config = LlamaConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
                         **SHAPES[args.random_init])
    if attn_implementation:
        config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(args.device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval(), tokenizer


def engine(args, batch_size: int, seed: int = 0, loaded: tuple | None = None, cpu_kernels: str | None = None):
    """The project's white-box backend over `load_model`'s model (or `loaded`, a model already in memory),
    as the benchmark's options set it."""
    from adaptive_rag.lm.hf import HFModel

    loaded = loaded or (load_model(args, "eager") if args.random_init else None)
    name = Path(f"random-{args.random_init}") if args.random_init else args.model_dir
    return HFModel(name, args.dtype, args.device, args.threads, seed, batch_size, args.attention, args.cuda_graphs,
                   loaded=loaded, fused_kernels=None if args.kernels == "default" else args.kernels == "fused",
                   cpu_kernels=cpu_kernels or args.cpu_kernels)


def weight_bytes(model) -> int:
    """Bytes a decode step reads of the weights: every parameter, except an untied input embedding table
    (a step gathers only its rows' embeddings; a tied table is read whole by the output head)."""
    embedding = model.get_input_embeddings().weight
    tied = model.get_output_embeddings() is not None and model.get_output_embeddings().weight is embedding
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    return total if tied else total - embedding.numel() * embedding.element_size()


def memory_bandwidth(torch, device: str, megabytes: int = 1024, repeats: int = 5) -> float:
    """Measured bytes/s of the device's memory: the best of `repeats` copies of a `megabytes` tensor
    (each copy reads and writes it once). What a decode step that streams the weights can at best reach."""
    n = megabytes * 2**20 // 4
    source = torch.ones(n, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = start_clock(torch, device)
        target.copy_(source)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n * 4 / best


def machine_line(device: str = "cpu", bandwidth: float | None = None) -> str:
    """The machine a table was measured on, printed with it: the CPU's model, cores and ISA (and the ISA
    PyTorch's kernels use, any forced-ISA setting), torch's MKL and oneDNN versions, and the measured copy
    bandwidth (measured here when not given); on a GPU also the GPU's name."""
    import torch

    from adaptive_rag.hardware import describe

    bandwidth = bandwidth or memory_bandwidth(torch, device, megabytes=512)
    gpu = f"{torch.cuda.get_device_name(device)}; host " if device.startswith("cuda") else ""
    return f"machine: {gpu}{describe(bandwidth)}"


def start_clock(torch, device: str) -> float:
    """perf_counter once the device has finished its queued work, with the GPU peak-memory counter reset,
    so what follows is measured alone."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    return time.perf_counter()


def measured(torch, device: str, start: float) -> dict:
    """Seconds since `start_clock` (after the device's queued work), this process's peak RSS and, on a GPU,
    the peak GPU memory since `start_clock`."""
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - start,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}
