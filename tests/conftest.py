"""Shared fixtures: a tiny random Llama with a tiny tokenizer, built in the test session.

The model goes through exactly the code SmolLM2 uses (a Hugging Face directory loaded by `HFModel`),
so generation tests need neither a hub nor the 500 MB materialised SmolLM2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_llama(directory: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    text = (REPO / "data" / "demo" / "psgs_demo.tsv").read_text(encoding="utf-8").splitlines()[:200]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|im_end|>", "<|im_start|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(text, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        pad_token="<|im_end|>")
    tokenizer.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_llama_dir, tmp_path_factory) -> Path:
    """The tiny Llama after the workflow's `model` step (with its identity.json)."""
    from adaptive_rag.lm.models import materialise

    out = tmp_path_factory.mktemp("models") / "tiny"
    materialise(str(tiny_llama_dir), out)
    return out


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (it lives beside the checkout as ../shared/data)")
    return SHARED_DATA


def write_params(path: Path, **overrides) -> Path:
    """params.yaml from the repository's own file with some sections replaced."""
    import yaml

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value in overrides.items():
        data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def copy_workflow(dest: Path) -> Path:
    """A runnable copy of the workflow (Snakefile, rules, params, demo data) in a scratch directory."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "params.yaml", "dvc.yaml"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(REPO / "workflow", dest / "workflow")
    shutil.copytree(REPO / "data" / "demo", dest / "data" / "demo")
    return dest


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- running the real workflow in a scratch copy (used by several test modules) ----

BIN = Path(sys.executable).parent


def run(args, cwd, check=True, timeout=900):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def snakemake(cwd, *args, check=True):
    return run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd, check)


def planned_jobs(cwd) -> dict[str, int]:
    """Job counts per rule of a dry run ({} when nothing is to be done)."""
    out = snakemake(cwd, "-n", "--quiet", "rules").stdout
    jobs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            jobs[parts[0]] = int(parts[1])
    return jobs


def edit_params(cwd, edit):
    import yaml

    path = Path(cwd) / "params.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
