"""The model options every benchmark takes, the check that the model was built, and the clock and memory
readings of a measured section, in one place."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "data/models/smollm2-135m-instruct"


def add_model_arguments(parser: argparse.ArgumentParser, threads: int = 2) -> None:
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--model-dir", type=Path, default=MODEL)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def require_model(model_dir: Path) -> None:
    if not (model_dir / "config.json").is_file():
        sys.exit(f"error: {model_dir} missing (no config.json); run `snakemake --cores all model` first, "
                 f"or pass --model-dir DIR of a built model")


def model_argv(args) -> list[str]:
    """The options back as command-line words, for the child process that measures one configuration."""
    return ["--threads", str(args.threads), "--model-dir", str(args.model_dir), "--device", args.device,
            "--dtype", args.dtype]


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
