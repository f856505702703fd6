"""`model.special_tokens: keep`: the special tokens a continuation generates are written into its text
and token texts, as the DRAGIN reference code's `tokenizer.decode` (without `skip_special_tokens`)
writes them; the default leaves them out. Checked on the tiny test tokenizer, whose special tokens are
"<|im_end|>" (id 0) and "<|im_start|>" (id 1)."""

from __future__ import annotations

import pytest
import yaml
from transformers import AutoTokenizer

from adaptive_rag.config import parse_params
from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.hf import token_texts

from conftest import REPO


def test_a_special_token_is_written_only_when_kept(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    words = tokenizer("\nassistant", add_special_tokens=False)["input_ids"]
    ids = [1, *words]  # "<|im_start|>" then "\nassistant", as SmolLM2 writes after an end of turn
    skipped = token_texts(tokenizer, ids)
    kept = token_texts(tokenizer, ids, skip_special=False)
    assert skipped[0] == "" and "".join(skipped) == "\nassistant"
    assert kept[0] == "<|im_start|>" and "".join(kept) == "<|im_start|>\nassistant"
    assert kept[1:] == skipped[1:]


def test_special_tokens_keep_enters_the_model_key_only_when_set_and_needs_the_eager_path():
    raw = yaml.safe_load((REPO / "params" / "reference.yaml").read_text())
    model = {k: v for k, v in raw["model"].items() if k != "special_tokens"}
    assert "special_tokens" not in parse_params({**raw, "model": model}).model.key()
    assert parse_params({**raw, "model": {**model, "special_tokens": "keep"}}).model.key()["special_tokens"] == "keep"
    with pytest.raises(ConfigError, match="model.special_tokens: keep decodes special tokens in the hf backend's "
                                          "eager path"):
        parse_params({**raw, "model": {**model, "special_tokens": "keep", "attention": "fast"}})
