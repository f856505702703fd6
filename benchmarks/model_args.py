"""The model options every benchmark takes, and the check that the model was built, in one place."""

from __future__ import annotations

import argparse
import sys
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
