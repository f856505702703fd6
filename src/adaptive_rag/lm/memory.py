"""Memory for `serve`: what a request's KV cache and its passes will take, how much a process may still
use, and byte sizes as people write them (`8GiB`, `512MB`).

A request's cache is estimated before the model runs (`cache_estimate` positions x `position_bytes`),
from the engine's layout rather than measured, so that a request too large is refused before it
allocates anything. So is its peak (`request_estimate`): the cache plus the largest transient of its
passes, which for a long prompt is most of it (the eager path's attention scores grow with the square
of the prompt, echo's log-probabilities with prompt x vocabulary). Those estimates bound the tensors
alive at once; `serve` fixes the C library's mmap threshold (`return_freed_tensors`) so that the
process's resident memory follows them. `serve` sizes its budget (`--max-cache-memory auto`) from
`headroom`: what is left of the tightest limit that applies to this process, because any one of them
ends it. On the CPU those are the machine's available memory, the memory limit of the process's cgroup
(a container, a Slurm job) and its address-space limit (`ulimit -v`, RLIMIT_AS); on a CUDA device, the
device's free memory. Each is read where the system exposes it and skipped where it does not.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .kv_cache import SlotKV

UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
         "t": 2**40, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
SIZE_SYNTAX = ("a number of bytes with an optional unit: KiB, MiB, GiB, TiB (or K, M, G, T: powers of 1024) "
               "or KB, MB, GB, TB (powers of 1000), e.g. 8GiB, 512MiB, 2GB")
UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


def parse_size(text: str) -> int:
    """Bytes of a size such as `8GiB`, `1.5G`, `512MB` or `1000000` (units are case-insensitive);
    ValueError for anything else, or for a size of 0 bytes."""
    found = SIZE.fullmatch(text)
    unit = found.group(2).lower() if found else None
    if unit not in UNITS:
        raise ValueError(f"not a size ({SIZE_SYNTAX}): {text!r}")
    size = int(float(found.group(1)) * UNITS[unit])
    if size < 1:
        raise ValueError(f"a size of less than one byte: {text!r}")
    return size


def format_size(size: int) -> str:
    """`size` bytes for people: 1.5 GiB, 300.0 MiB, 512 bytes."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} bytes"


def cache_estimate(prompt_tokens: Sequence[int], n: int, max_tokens: int, sampled: bool, fast: bool,
                   batch_size: int) -> tuple[int, str]:
    """The cached positions (keys and values of one token of one row) a generation of `n` continuations
    (sampled) or one (greedy) of `max_tokens` tokens after prompts of `prompt_tokens` tokens holds at its
    peak, and how they add up, from the engine's layout (`lm.continuous`, `HFModel._run_eager`):

    - fast path, sampling: the prompt once (the rows' shared prefix) and each of the n rows its own
      max_tokens + 1 slot positions; prompts of a list are sampled one after another;
    - fast path, greedy: min(prompts, batch_size) slots of (longest prompt + max_tokens + 1) positions;
    - eager path: every row holds its own copy of the whole prompt's cache and grows it by one position a
      token: n rows (sampling) or min(prompts, batch_size) rows (greedy) of (prompt + max_tokens).
    """
    longest, m = max(prompt_tokens), max_tokens
    if sampled:
        if fast:
            return longest + n * (m + 1), f"{longest} prompt tokens + n={n} x (max_tokens={m} + 1)"
        return n * (longest + m), f"n={n} x ({longest} prompt tokens + max_tokens={m})"
    rows = min(len(prompt_tokens), batch_size)
    what = f"{rows} {'slots' if fast else 'rows'} (of {len(prompt_tokens)} prompt(s), --batch-size {batch_size})"
    prompt = f"{longest} tokens of the longest prompt" if len(prompt_tokens) > 1 else f"{longest} prompt tokens"
    if fast:
        return rows * (longest + m + 1), f"{what} x ({prompt} + max_tokens={m} + 1)"
    return rows * (longest + m), f"{what} x ({prompt} + max_tokens={m})"


def position_bytes(model) -> int | None:
    """Bytes one cached position of one row costs (keys and values of every layer): the fast decoder's own
    figure, or for transformers' forward (the eager path) the same sum from the model's config; None for a
    model that is not a transformers causal LM."""
    decoder = getattr(model, "decoder", None)
    if decoder is not None:
        return decoder.position_bytes()
    shape = Shape.of(model)
    return None if shape is None else shape.position_bytes


# The transient memory of a forward pass, measured (peak resident memory, /proc/self/status VmHWM) on SmolLM2-135M,
# the tests' tiny Llama and a wide variant of it (16 heads of 64), prompts of 1,000-16,000 tokens, and set above
# every measurement: per token, FLOAT x (4 x hidden + 4 x (query + 2 x key/value width) + 10 x MLP width) bytes
# plus TOKEN_OVERHEAD (linear layers, norms, rotary tables, the kernels' own buffers); SCORE_COPIES attention-score
# tensors of rows x heads x queries x keys floats live at once on the eager path (scores, scaled, softmax), and
# LOGIT_COPIES rows x vocabulary tensors when a step chooses tokens (log-softmax, sampling's filtered copies).
FLOAT = 4  # scores, softmax and logits are float32 whatever the weights' dtype
TOKEN_OVERHEAD = 4096
SCORE_COPIES = 3
LOGIT_COPIES = 8


@dataclass(frozen=True)
class Shape:
    """What the estimates read of a causal LM: its config's sizes and the weights' element size."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    element_size: int

    @classmethod
    def of(cls, model) -> "Shape | None":
        """The shape of `model` (an `HFModel`, or anything with a transformers `model`); None otherwise."""
        module = getattr(model, "model", None)
        try:
            config = module.config
            heads = config.num_attention_heads
            hidden = config.hidden_size
            return cls(layers=config.num_hidden_layers, hidden=hidden, heads=heads,
                       kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                       head_dim=getattr(config, "head_dim", None) or hidden // heads,
                       intermediate=getattr(config, "intermediate_size", None) or 4 * hidden,
                       vocab=config.vocab_size, element_size=next(module.parameters()).element_size())
        except (AttributeError, TypeError, StopIteration):
            return None

    @property
    def position_bytes(self) -> int:
        return SlotKV.bytes_per_position(self.layers, self.kv_heads, self.head_dim, self.element_size)

    @property
    def token_bytes(self) -> int:
        """Transient bytes one token adds to a forward pass, attention scores aside."""
        width = self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim
        return FLOAT * (4 * self.hidden + 4 * width + 10 * self.intermediate) + TOKEN_OVERHEAD

    def scores(self, rows: int, queries: int, keys: int) -> int:
        """The eager kernel's attention scores and mask for one layer."""
        return SCORE_COPIES * rows * self.heads * queries * keys * FLOAT + rows * queries * keys * (FLOAT + 1)

    def logits(self, rows: int) -> int:
        return LOGIT_COPIES * rows * self.vocab * FLOAT


def request_estimate(shape: Shape, position_bytes: int, prompt_tokens: Sequence[int], n: int, max_tokens: int,
                     sampled: bool, fast: bool, batch_size: int, echo: bool) -> tuple[int, str]:
    """The bytes a request holds at its peak, and how they add up, from the engine's layout
    (`lm.continuous`, `HFModel._run_eager`, `HFModel.score`): the largest of its phases, which run one after
    another -

    - echo (scoring the prompt): one eager forward over the longest prompt, its attention scores and its
      log-probabilities over the vocabulary at every position;
    - generation: the KV cache (`cache_estimate`), the prompt's pass - on the fast path the prompt's tokens
      (attention runs in blocks: no square term), on the eager path the rows prefilled together with their
      attention scores (prompt x prompt) - and a decoding step, each row's attention scores over what it reads
      and its logits.
    """
    longest = max(prompt_tokens)
    phases = []
    if echo:
        need = longest * shape.token_bytes + shape.scores(1, longest, longest) + 2 * longest * shape.vocab * FLOAT
        phases.append((need, f"echo of {longest} prompt tokens: their forward pass, attention scores and "
                             f"log-probabilities over {shape.vocab} tokens = {need} bytes"))
    if max_tokens > 0:
        positions, how = cache_estimate(prompt_tokens, n, max_tokens, sampled, fast, batch_size)
        cache = positions * position_bytes
        rows = n if sampled else min(len(prompt_tokens), batch_size)
        if fast:
            prefill, what = longest * shape.token_bytes, f"the prefill of {longest} prompt tokens"
            reads = longest + max_tokens + 1
        else:
            filled = 1 if sampled else rows  # sampled rows share one prefill of the prompt
            prefill = filled * longest * shape.token_bytes + shape.scores(filled, longest, longest)
            what = f"the prefill of {filled} x {longest} prompt tokens with their attention scores"
            reads = longest + max_tokens
        step = rows * shape.token_bytes + shape.scores(rows, 1, reads) + shape.logits(rows)
        # Summed, not the larger of the two: what the prefill frees stays with the allocator (measured).
        phases.append((cache + prefill + step, f"a KV cache of {how} = {positions} positions x {position_bytes} "
                                               f"bytes = {cache} bytes, plus {what} = {prefill} bytes, plus a "
                                               f"decoding step of {rows} rows reading {reads} positions = {step} bytes"))
    if not phases:
        return 0, "nothing to run"
    return max(phases)


# Tensors at least this large are given back to the system when freed (glibc's M_MMAP_THRESHOLD, fixed).
RETURNED_BLOCK = 4 * 2**20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def return_freed_tensors() -> str:
    """Fix glibc's mmap threshold at RETURNED_BLOCK, so that a freed tensor of that size or more goes back to
    the system at once; what this did, for a log line.

    By default glibc moves the threshold up to the largest block freed so far (up to 32 MiB): after a long
    prompt's pass its tensors come from the heap, where freed blocks stay and holes between live ones add
    to the peak. The request estimates bound the tensors alive at once, not that slack: a 4,000-token
    prefill on the 16-head test model (185 MiB of live tensors, estimated 278 MiB) raised a fresh
    process's peak resident memory by 346 MiB in one run of three (`tests/test_memory.py`'s measurement,
    Intel Xeon, AVX-512, 2 cores). With the threshold fixed at 4 MiB it rose by 185 MiB in each of six runs, and
    SmolLM2's prefill and decoding ran at the same speed (docs/engine.md has the measurement); at glibc's
    initial 128 KiB the page faults of each pass's fresh blocks slowed the prefill by 40 %. A threshold
    set through MALLOC_MMAP_THRESHOLD_ is the user's and is kept; on a C library other than glibc nothing
    changes."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        chosen = os.environ["MALLOC_MMAP_THRESHOLD_"]
        return f"the allocator's mmap threshold as MALLOC_MMAP_THRESHOLD_ sets it ({chosen})"
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        gnu = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return "freed tensors stay with the C library's allocator (not glibc: its threshold is not set)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, RETURNED_BLOCK) != 1:
        return "freed tensors stay with glibc's allocator (mallopt refused the threshold)"
    gnu.restype = ctypes.c_char_p
    return f"freed tensors of {format_size(RETURNED_BLOCK)} or more go back to the system (glibc {gnu().decode()})"


def headroom(device: str = "cpu") -> tuple[int, str] | None:
    """(bytes, which limit) this process may still allocate on `device` before the tightest limit ends it;
    None when no limit can be read."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free, f"the free memory of {device}"
    rooms = [room for room in (_available(), _cgroup_room(), _address_space_room()) if room is not None]
    return min(rooms) if rooms else None


def _available() -> tuple[int, str] | None:
    """The machine's available memory (MemAvailable: free plus what the kernel can reclaim)."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        meminfo = ""
    found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)
    if found:
        return int(found.group(1)) * 1024, "the machine's available memory"
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "the machine's free memory"
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> tuple[int, str] | None:
    """What the process's memory cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes`) has left."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            root, files = Path("/sys/fs/cgroup"), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            root, files = Path("/sys/fs/cgroup/memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        # Inside a cgroup namespace (most containers) the process's own cgroup is mounted as the root.
        for directory in (root / path.lstrip("/"), root):
            try:
                limit, used = ((directory / name).read_text().strip() for name in files)
            except OSError:
                continue
            if limit.isdigit() and used.isdigit() and int(limit) < UNLIMITED:
                return max(int(limit) - int(used), 0), "the room left under this process's cgroup memory limit"
            break
    return None


def _address_space_room() -> tuple[int, str] | None:
    """What RLIMIT_AS (`ulimit -v`) leaves of this process's address space (VmSize)."""
    try:
        import resource

        limit, _ = resource.getrlimit(resource.RLIMIT_AS)
        if limit == resource.RLIM_INFINITY:
            return None
        status = Path("/proc/self/status").read_text()
    except (ImportError, OSError):
        return None
    found = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    if not found:
        return None
    return max(limit - int(found.group(1)) * 1024, 0), "the room left under this process's RLIMIT_AS (ulimit -v)"
