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


class TinyModel:
    """What `RowState` reads of the hf backend: the tokenizer, the end ids and the special-token choice."""

    def __init__(self, tokenizer, skip_special: bool):
        self.tokenizer, self.eos_ids, self.skip_special = tokenizer, {0}, skip_special

    def token_texts(self, ids):
        return token_texts(self.tokenizer, ids, self.skip_special)


@pytest.mark.parametrize("skip_special, tokens, logprobs, fed", [
    (True, ["\nassistant"], [-0.1], None),  # the end token leaves no trace but the finish reason
    (False, ["\nassistant", "<|im_end|>"], [-0.1, -0.7], (0, 11)),  # a token, its log-probability, fed once more
])
def test_an_end_token_is_a_token_of_the_continuation_only_when_special_tokens_are_kept(
        tiny_model_dir, skip_special, tokens, logprobs, fed):
    from adaptive_rag.lm.base import NO_EXTRAS
    from adaptive_rag.lm.rows import Chosen, RowState

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = TinyModel(tokenizer, skip_special)
    words = tokenizer("\nassistant", add_special_tokens=False)["input_ids"]
    row = RowState(prompt_len=10 - len(words) + 1)
    for token in words:
        row.take(Chosen([token], [-0.1 / len(words)], None, None), 0, model, (), 50, True, ())
    # the end token (id 0), chosen with log-probability -0.7; the caller wants attention rows
    assert row.take(Chosen([0], [-0.7], None, None), 0, model, (), 50, True, ()) == fed
    c = row.result(model, (), NO_EXTRAS)
    assert c.finish_reason == "eos"
    assert ["".join(c.tokens[:len(words)]), *c.tokens[len(words):]] == tokens
    assert [round(sum(c.logprobs[:len(words)]), 6), *c.logprobs[len(words):]] == logprobs


def test_an_end_token_already_in_the_text_is_not_appended_again():
    from adaptive_rag.lm.base import Continuation
    from adaptive_rag.methods.parts.rules import Rules

    class EndText:
        end_of_turn_text = "<|im_end|>"

    kept = Continuation(text=" Paris.<|im_end|>", tokens=[" Paris", ".", "<|im_end|>"], logprobs=[-0.1] * 3,
                        finish_reason="eos")
    assert Rules(end_of_turn="continue").ended(kept, EndText()).text == " Paris.<|im_end|>"
    skipped = Continuation(text=" Paris.", tokens=[" Paris", "."], logprobs=[-0.1] * 2, finish_reason="eos")
    assert Rules(end_of_turn="continue").ended(skipped, EndText()).text == " Paris.<|im_end|>"
