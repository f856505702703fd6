"""Which kernel runs the fast path's linear layers on this CPU: timed at load, remembered per machine.

Three paths compute a linear layer on the CPU: oneDNN's inner product on a weight packed once for it
(`packed`); MKL's GEMM on a weight packed once for the batch's row count (`mkl`: `cblas_sgemm_compute`
through `torch.ops.mkl._mkl_linear`, which runs MKL's ordinary GEMM on the module's weight at any other
row count: one row, a prompt's prefill, a call's last rows); and `torch.nn.functional.linear`, MKL's GEMM
on the module's own weight (`modules`). Which is fastest depends on the machine and the row count: on
the AVX-512 Xeon the demo is timed on, at 8 rows packed and mkl stream the weights 1.2 and 1.4 times as
fast as modules, and at one row modules and mkl (the same GEMM there) take 70-90 % of packed's time;
with AVX2 only, packed loses more at 8 rows (docs/performance.md has the table). MKL's and oneDNN's code paths differ by vendor and ISA (an
AMD EPYC, an AVX2-only laptop), so a choice made on one CPU is a guess on another. `model.cpu_kernels:
auto` (the default) times them over the model's own linear layers, in the order a step reads them, at
the run's row counts (1 and the batch size: the tail of a call and its full steps), and keeps the
fastest by the sum; packed keeps a near tie (within `MARGIN`), so a choice does not flip between runs on
timing noise. The choice is remembered in a small file per machine (`choices_path()`), keyed by what
decides it (CPU, ISA in use and forced-ISA settings, torch, MKL and oneDNN builds, threads, dtype, rows,
the layers' shapes, the candidate kernels), so each machine measures once. Timings taken while other work holds the cores say
little (two processes of two threads on two cores can slow a pass 50-fold), so the timing runs twice,
the choice is the fastest by each kernel's best passes of both rounds, and it is remembered only when
the machine's load average was under its core count (otherwise the next load measures again). Rounds
that disagree mean kernels within noise of each other: the choice over both is remembered all the same,
so a machine where two kernels tie does not pay the timing (4.5 s for SmolLM2 on the Xeon, AVX-512)
at every load. A remembered choice can be measured again by deleting the file, or
skipped by setting `model.cpu_kernels` outright. The timing packs every candidate's weights at once, so
it reads the layers in reading order up to `TIMED_BYTES` of weights (all of a small model's; the first
layers of a 7B one): enough to leave every cache, without a large model's weights held four times.

The paths add the same products in different orders, so their results can differ in the last bits
(float32) and a greedy token can in principle flip: `mkl` and `modules` are part of the model's
identity (the call cache keys on them), packed is not (it was the only CPU path before the choice
existed). Every run's provenance records the choice, how it was made and the timings.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

KERNELS = ("packed", "mkl", "modules")
SETTINGS = ("auto", *KERNELS)
MARGIN = 0.9  # another kernel is chosen over packed only when it takes under 90 % of packed's time
REPEATS = 3  # timed passes per candidate and row count (after one untimed pass); the fastest counts
TIMED_BYTES = 1.5e9  # the weights a timing reads (in reading order): every layer of a model up to this
# A pass streaming the weights slower than this means other work holds the cores: the timing stops there
# (beside another two-thread job a pass was measured 50 times slower, so finishing it could take a minute).
SLOWEST_BYTES_PER_S = 1e9


class Busy(Exception):
    """A timing pass ran slower than SLOWEST_BYTES_PER_S: what it would say is the other work's."""


@dataclass
class KernelChoice:
    """What runs the linear layers, and why."""

    kernel: str  # packed | mkl | modules
    # setting (model.cpu_kernels named it) | measured | measured (the two rounds disagreed ...) | measured,
    # not remembered (busy machine) | remembered | unavailable (no packed kernel in this torch build, or not
    # the named one)
    how: str
    seconds: dict = field(default_factory=dict)  # kernel -> {rows: seconds of one pass over the timed layers}
    machine: str = ""

    def record(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in ({}, "")}


def choices_path() -> Path:
    """The per-machine file of remembered choices: $ADAPTIVE_RAG_KERNEL_CHOICES, else
    $XDG_CACHE_HOME/adaptive-rag/cpu-kernels.json (~/.cache when unset)."""
    if os.environ.get("ADAPTIVE_RAG_KERNEL_CHOICES"):
        return Path(os.environ["ADAPTIVE_RAG_KERNEL_CHOICES"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "adaptive-rag" / "cpu-kernels.json"


def choice_key(modules, rows: list[int], kernels: list[str]) -> tuple[str, dict]:
    """(digest, what it digests): everything a timing depends on, and the candidates it chose among (a
    choice remembered before a kernel became a candidate is measured again)."""
    import torch

    from ..hardware import cpu, library_versions

    weight = modules[0].weight
    shapes = sorted({tuple(m.weight.shape) for m in modules})
    facts = {"cpu": cpu(), "libraries": library_versions(), "threads": torch.get_num_threads(),
             "dtype": str(weight.dtype), "rows": rows, "shapes": [list(s) for s in shapes], "layers": len(modules),
             "kernels": kernels}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16], facts


def _probe(kernel: str, dtype, rows_hint: int) -> bool:
    """Whether `kernel`'s operators exist in this torch build and give `torch.nn.functional.linear`'s
    results (within rounding) on a small layer at the packed row count, one row fewer (mkl: padded) and
    two more (mkl: the plain GEMM)."""
    import torch

    probe = torch.nn.Linear(64, 48, dtype=dtype)
    try:
        with torch.inference_mode():
            weight = _pack_one(kernel, probe.weight, rows_hint)
            run = runner(kernel, rows_hint)
            for rows in {rows_hint, max(1, rows_hint - 1), rows_hint + 2}:
                x = torch.randn(rows, 1, 64, dtype=dtype)
                got, expected = run(probe, weight, x), torch.nn.functional.linear(x, probe.weight, probe.bias)
                tolerance = 1e-4 if dtype == torch.float32 else 5e-2
                if got.shape != expected.shape or not torch.allclose(got.float(), expected.float(), atol=tolerance,
                                                                     rtol=tolerance):
                    return False
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


def available(dtype, rows_hint: int) -> list[str]:
    """The kernels this torch build can run for a model of `dtype` (packed: float32 and bfloat16 with
    oneDNN; mkl: float32 with MKL), modules always."""
    import torch

    found = []
    if dtype in (torch.float32, torch.bfloat16) and torch.backends.mkldnn.is_available() \
            and _probe("packed", dtype, rows_hint):
        found.append("packed")
    if dtype == torch.float32 and torch.backends.mkl.is_available() and _probe("mkl", dtype, rows_hint):
        found.append("mkl")
    return [*found, "modules"]


def _pack_one(kernel: str, weight, rows_hint: int):
    import torch

    if kernel == "packed":
        return torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
    return torch.ops.mkl._mkl_reorder_linear_weight(weight, rows_hint)


def pack(kernel: str, modules, rows_hint: int, done: dict | None = None) -> dict:
    """{module: its weight packed for `kernel`} ({} for modules, which reads the module's own weight);
    `done` holds weights already packed (the timing's), reused."""
    import torch

    if kernel == "modules":
        return {}
    done = done or {}
    with torch.inference_mode():
        return {m: done[m] if m in done else _pack_one(kernel, m.weight, rows_hint) for m in modules}


def runner(kernel: str, rows_hint: int):
    """run(module, packed weight, x) -> module(x) through `kernel`."""
    import torch
    import torch.nn.functional as F

    if kernel == "packed":
        return lambda m, w, x: torch.ops.mkldnn._linear_pointwise(x, w, m.bias, "none", [], "")
    if kernel == "mkl":
        return partial(_mkl, rows_hint)
    return lambda m, w, x: F.linear(x, m.weight, m.bias)


def _mkl(rows_hint: int, m, w, x):
    """MKL's packed GEMM runs exactly `rows_hint` rows (`_mkl_linear` runs MKL's plain GEMM on m.weight at
    any other count). A step with fewer rows (a call's last steps, a short prompt) is padded with zero
    rows to `rows_hint` where it has at least a quarter of them: over SmolLM2's layers the packed product
    of 8 rows took 0.7-0.85 of the plain GEMM's time at 2 to 7 rows (the Xeon, forced AVX2), and each
    row's result does not depend on the others'. One row keeps the plain GEMM (a matrix-vector product,
    faster than either)."""
    import torch

    rows = x.numel() // x.shape[-1]
    if 1 < rows < rows_hint and 4 * rows >= rows_hint:
        padded = x.new_zeros(rows_hint, x.shape[-1])
        padded[:rows] = x.reshape(rows, -1)
        out = torch.ops.mkl._mkl_linear(padded, w, m.weight, m.bias, rows_hint)
        return out[:rows].view(*x.shape[:-1], out.shape[-1])
    return torch.ops.mkl._mkl_linear(x, w, m.weight, m.bias, rows_hint)


def _pass_seconds(run, modules, packed: dict, inputs) -> float:
    start = time.perf_counter()
    for module in modules:
        run(module, packed.get(module), inputs[module.weight.shape[1]])
    return time.perf_counter() - start


def time_kernels(modules, packs: dict, rows: list[int], rows_hint: int) -> dict:
    """kernel -> {rows: seconds of one pass over `modules`} (inputs of `rows` random rows) for each kernel
    in `packs` ({kernel: {module: packed weight}}): the fastest of REPEATS passes after an untimed one,
    the kernels' passes interleaved so that all see the same machine (other work on shared cores slows
    whichever runs during it)."""
    import torch

    weight = modules[0].weight
    # the slowest believable pass: the weights at SLOWEST_BYTES_PER_S (a quarter second at least: a small
    # model's pass is mostly call overhead), more for more rows (their arithmetic)
    limit = max(0.25, sum(m.weight.numel() * m.weight.element_size() for m in modules) / SLOWEST_BYTES_PER_S)
    runs = {kernel: runner(kernel, rows_hint) for kernel in packs}
    seconds: dict = {kernel: {} for kernel in packs}
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in rows:
            inputs = {d: torch.randn(n, d, generator=generator).to(weight.dtype) for d in {m.weight.shape[1] for m in modules}}
            best = {kernel: float("inf") for kernel in packs}
            for repeat in range(REPEATS + 1):
                for kernel, packed in packs.items():
                    elapsed = _pass_seconds(runs[kernel], modules, packed, inputs)
                    if elapsed > limit * max(1.0, n / 8):
                        raise Busy(f"a pass of {kernel} at {n} rows took {elapsed:.2f} s")
                    best[kernel] = min(best[kernel], elapsed) if repeat else best[kernel]
            for kernel in packs:
                seconds[kernel][str(n)] = round(best[kernel], 6)
    return seconds


def faster(seconds: dict) -> str:
    """The kernel with the least time summed over the row counts; packed keeps a near tie (MARGIN)."""
    total = {kernel: sum(by_rows.values()) for kernel, by_rows in seconds.items()}
    best = min(total, key=total.get)
    if best != "packed" and "packed" in total and total[best] >= MARGIN * total["packed"]:
        return "packed"
    return best


def timed_layers(modules) -> list:
    """The first layers in reading order holding up to TIMED_BYTES of weights (at least one)."""
    chosen, held = [], 0
    for module in modules:
        held += module.weight.numel() * module.weight.element_size()
        if chosen and held > TIMED_BYTES:
            break
        chosen.append(module)
    return chosen


def _remembered(path: Path, key: str) -> dict | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) and entry.get("kernel") in KERNELS else None


def _remember(path: Path, key: str, entry: dict) -> None:
    """Adds the entry to the file; a file that cannot be written is left as it is (the choice is then
    measured again next time, nothing else changes)."""
    from ..io import atomic_write

    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
    except Exception:  # noqa: BLE001 - a read-only home or a full disk must not stop a run
        pass


def choose(modules, setting: str, rows_hint: int) -> tuple[KernelChoice, dict]:
    """The kernel for `modules` (the model's linear layers or fused products, in reading order) under
    `model.cpu_kernels`, and {module: its packed weight} for it ({} for modules)."""
    from ..hardware import cpu_model

    if setting not in SETTINGS:
        raise ValueError(f"model.cpu_kernels must be one of {', '.join(SETTINGS)}; got {setting!r}")
    machine = cpu_model()
    weight = modules[0].weight
    kernels = available(weight.dtype, rows_hint) if setting != "modules" else ["modules"]
    if setting not in ("auto", "modules") and setting not in kernels:
        return KernelChoice("modules", f"unavailable ({setting} cannot run here)", machine=machine), {}
    if setting != "auto":
        return KernelChoice(setting, "setting", machine=machine), pack(setting, modules, rows_hint)
    if kernels == ["modules"]:
        return KernelChoice("modules", "unavailable", machine=machine), {}
    fallback = "packed" if "packed" in kernels else kernels[0]
    rows = sorted({1, max(1, rows_hint)})
    timed = timed_layers(modules)
    key, _ = choice_key(timed, rows, kernels)
    path = choices_path()
    entry = _remembered(path, key)
    if entry is not None and entry["kernel"] in kernels:
        return (KernelChoice(entry["kernel"], "remembered", entry.get("seconds", {}), machine),
                pack(entry["kernel"], modules, rows_hint))
    packs = {kernel: pack(kernel, timed, rows_hint) for kernel in kernels}
    try:
        rounds = [time_kernels(timed, packs, rows, rows_hint) for _ in range(2)]
    except Busy as busy:
        return (KernelChoice(fallback, f"not measured, the machine is busy ({busy})", machine=machine),
                pack(fallback, modules, rows_hint, packs.get(fallback)))
    winners = sorted({faster(seconds) for seconds in rounds})
    seconds = {k: {n: min(r[k][n] for r in rounds) for n in rounds[0][k]} for k in rounds[0]}
    kernel = faster(seconds)
    how = "measured" if len(winners) == 1 else \
        f"measured (the two rounds disagreed, {' and '.join(winners)}: a near tie; the faster of their best passes)"
    load = os.getloadavg()[0]
    packed = pack(kernel, modules, rows_hint, packs.get(kernel))
    del packs
    if load >= (os.cpu_count() or 1):
        return KernelChoice(kernel, f"measured, not remembered (load average {load:.1f})", seconds, machine), packed
    _remember(path, key, {"kernel": kernel, "seconds": seconds, "machine": machine,
                          "measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average": round(load, 2)})
    return KernelChoice(kernel, how, seconds, machine), packed
