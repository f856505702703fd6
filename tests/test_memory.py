"""Sizes as `serve --max-cache-memory` reads them, and the KV-cache estimate of each engine path."""

from __future__ import annotations

import pytest

from adaptive_rag.lm.memory import cache_estimate, format_size, parse_size


@pytest.mark.parametrize("text,size", [
    ("1000000", 1_000_000), ("512", 512), ("512B", 512), ("8GiB", 8 * 2**30), ("8gib", 8 * 2**30), ("8G", 8 * 2**30),
    ("2GB", 2 * 10**9), ("1.5 GiB", 3 * 2**29), ("512MiB", 512 * 2**20), ("300M", 300 * 2**20), ("64KB", 64_000),
    ("1TiB", 2**40), ("0.5K", 512), (" 4 MiB ", 4 * 2**20),
])
def test_sizes_people_write_are_read_in_bytes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "8 gigs", "-1G", "1e9", "8 GiB 2", "0", "0.1B", "inf", "nan"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_sizes_are_written_for_people():
    assert [format_size(n) for n in (512, 2048, 3 * 2**29, 9439281152)] == ["512 bytes", "2.0 KiB", "1.5 GiB",
                                                                           "8.8 GiB"]


def test_the_fast_path_holds_a_sampled_prompt_once_and_the_eager_path_once_a_row():
    # 128 samples of 4500 prompt tokens, 1 token each: the prompt once plus two slot positions a row,
    # against a whole copy of the prompt per row
    assert cache_estimate([4500], 128, 1, sampled=True, fast=True, batch_size=8)[0] == 4500 + 128 * 2
    assert cache_estimate([4500], 128, 1, sampled=True, fast=False, batch_size=8)[0] == 128 * 4501
    # greedy: min(prompts, batch size) slots of the longest prompt and its tokens
    assert cache_estimate([10, 30, 20], 1, 5, sampled=False, fast=True, batch_size=2)[0] == 2 * (30 + 5 + 1)
    assert cache_estimate([10, 30, 20], 1, 5, sampled=False, fast=False, batch_size=8)[0] == 3 * (30 + 5)
