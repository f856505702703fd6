"""The DRAGIN reference runner's token patches (benchmarks/dragin_reference.py): the reference reads
tokens as Llama's SentencePiece tokenizer writes them, and the runner must hand it SmolLM2's tokens the
same way, newline tokens included (its per-token decode keeps a newline; `convert_ids_to_tokens` spells
it as the byte token "<0x0A>")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]


def load_runner():
    spec = importlib.util.spec_from_file_location("dragin_reference", REPO / "benchmarks" / "dragin_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dragin_reference"] = module
    spec.loader.exec_module(module)
    return module


runner = load_runner()


class ByteLevelTokenizer:
    """Decodes ids as a byte-level BPE tokenizer decodes one token: a leading space kept."""

    pieces = {0: " The", 1: "\n", 2: " cat", 3: "\n\n", 4: "sat", 5: " ", 6: "  two"}

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


def recorded_tokens(pieces: str, tokens: list[str]) -> list[str]:
    """What the runner hands `TokenRAG.modifier` for a generation whose per-token texts are `tokens`."""
    generator = SimpleNamespace(generate=lambda prompt, n, logprobs=False: ("text", list(tokens), [0.0] * len(tokens)),
                                generate_attn=lambda *a, **k: None)
    model = SimpleNamespace(generator=generator, retriever=None)
    runner.Recorder(model, SimpleNamespace(), pieces)  # wraps generator.generate
    return generator.generate("prompt", 10, True)[1]


def test_flare_per_token_texts_lose_exactly_one_leading_space_and_keep_a_newline():
    tokens = [" The", "\n", " cat", "\n\n", "sat", " ", "  two"]
    # SentencePiece's decode of one token: "▁The" -> "The", "<0x0A>" -> "\n", "▁" -> "", "▁▁two" -> " two"
    assert recorded_tokens("llama", tokens) == ["The", "\n", "cat", "\n\n", "sat", "", " two"]
    # the earlier reading stripped every leading whitespace character: a newline token became ""
    assert recorded_tokens("decoded", tokens) == ["The", "", "cat", "", "sat", "", "two"]


def test_token_strings_spell_a_newline_as_llamas_byte_token():
    convert = runner.spelled_tokens(ByteLevelTokenizer(), "▁")
    assert convert([0, 1, 2, 3, 4]) == ["▁The", "<0x0A>", "▁cat", "<0x0A><0x0A>", "sat"]
    assert convert(1) == "<0x0A>"
    # merged as `generate_attn` merges them (a word starts at the space marker or at the newline id)
    assert "".join(convert([1, 4])).replace("▁", "") == "<0x0A>sat"
    assert runner.spelled_tokens(ByteLevelTokenizer(), "▁", "decoded")([1, 2]) == ["\n", "▁cat"]
