"""Sizes as `serve --max-cache-memory` reads them, and the KV-cache estimate of each engine path."""

from __future__ import annotations

import pytest

from adaptive_rag.lm.memory import cache_estimate, format_size, parse_size
from conftest import build_wide_llama


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


# One request's model work in a fresh process, its peak resident memory over what the process held before it
# (VmHWM reset through /proc/self/clear_refs), next to `request_estimate` for it: each case is
# (attention, prompt tokens, n, max_tokens, echo).
MEASURE = """
import json, re, sys
from pathlib import Path
from adaptive_rag.lm.base import Prompt, SamplingParams
from adaptive_rag.lm.hf import HFModel
from adaptive_rag.lm.memory import Shape, position_bytes, request_estimate, return_freed_tensors

def status(key):
    return int(re.search(key + r":\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024

return_freed_tensors()  # as `serve` does at start
model_dir, cases = sys.argv[1], json.loads(sys.argv[2])
for attention, tokens, n, max_tokens, echo in cases:
    model = HFModel(model_dir, attention=attention)
    prompt = Prompt(text=" hello" * (tokens // 3))
    count = len(model.encode(prompt)[0])
    model.generate([Prompt(text=" hello")], 1)  # one-time allocations (kernels' caches) before the measurement
    Path("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS")
    if echo:
        model.score(Prompt(text=""), prompt.text)
    else:
        model.sample(prompt, SamplingParams(n=n, seed=1), max_tokens)
    peak = status("VmHWM") - before
    need, _ = request_estimate(Shape.of(model), position_bytes(model), [count], n, 0 if echo else max_tokens,
                               True, attention == "fast", 8, echo)
    print(json.dumps([attention, count, n, echo, peak, need]), flush=True)
"""


@pytest.mark.slow  # runs the model on prompts of thousands of tokens, in a subprocess
def test_the_request_estimate_bounds_what_a_request_really_allocates(tiny_model_dir, tmp_path):
    """On a model whose attention is wide (16 heads of 64 over a 32-wide stream, as in tests/test_serve.py), so
    that the attention terms dominate: the estimate is above the measured peak of each engine path's prefill,
    decoding and echo, and within a small factor of it (an estimate that refused everything would pass the
    first check alone)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("the peak is read from /proc/self/status after a reset through /proc/self/clear_refs (Linux)")
    wide = build_wide_llama(tiny_model_dir, tmp_path / "wide")
    cases = [("fast", 4000, 1, 1, False), ("fast", 2000, 128, 4, False), ("eager", 2000, 1, 1, False),
             ("eager", 1000, 16, 2, False), ("fast", 2000, 1, 0, True)]
    result = subprocess.run([sys.executable, "-c", MEASURE, str(wide), json.dumps(cases)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(cases), result.stdout
    for attention, tokens, n, echo, peak, need in rows:
        assert tokens > 900 and peak > 0, rows
        assert peak <= need <= 4 * peak + 64 * 2**20, (attention, tokens, n, echo, peak, need)


# Allocates and frees a 24 MiB tensor, then a 16 MiB one, and prints how much resident memory the process kept
# after the second free.
KEPT = """
import re, sys
from pathlib import Path
import torch
from adaptive_rag.lm.memory import return_freed_tensors

def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024

if sys.argv[1] == "set":
    print(return_freed_tensors(), file=sys.stderr)
block = torch.ones(6 * 2**20)  # 24 MiB, every page written: its free raises glibc's dynamic threshold to 24 MiB
del block
before = rss()
block = torch.ones(4 * 2**20)
del block
print(rss() - before)
"""


@pytest.mark.parametrize("setting", ["set", "default"])
def test_freed_tensors_go_back_to_the_system_once_the_threshold_is_fixed(setting):
    """glibc's default keeps a freed 16 MiB block in its heap once a larger block was freed before; with the
    threshold fixed (`serve` fixes it at start) the block is unmapped when freed."""
    import os
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc" or not os.path.exists("/proc/self/status"):
        pytest.skip("the threshold is glibc's and the resident memory is read from /proc/self/status (Linux)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    result = subprocess.run([sys.executable, "-c", KEPT, setting], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    kept = int(result.stdout.split()[-1])
    if setting == "set":
        assert "4.0 MiB or more go back to the system (glibc" in result.stderr
        assert kept < 2**20
    else:
        assert kept > 8 * 2**20  # the control: without the setting the block stays


def test_a_threshold_the_user_set_is_kept(monkeypatch):
    from adaptive_rag.lm.memory import return_freed_tensors

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert return_freed_tensors() == "the allocator's mmap threshold as MALLOC_MMAP_THRESHOLD_ sets it (65536)"
