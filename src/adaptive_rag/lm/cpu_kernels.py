"""Which kernel runs the fast path's linear layers on this CPU: timed at load, remembered per machine.

Two paths compute a linear layer on the CPU: oneDNN's inner product on a weight packed once for it
(`packed`), and `torch.nn.functional.linear`, MKL's GEMM on the module's own weight (`modules`). Which is
faster depends on the machine: on the AVX-512 Xeon the demo was timed on, packed runs a decode step's
products about twice as fast at 8 rows; MKL's and oneDNN's code paths differ by vendor and ISA (an AMD
EPYC, an AVX2-only laptop), so a choice made on one CPU is a guess on another. `model.cpu_kernels: auto`
(the default) times both over the model's own linear layers, in the order a step reads them, at the run's
row counts (1 and the batch size: the tail of a call and its full steps), and keeps the faster; packed
keeps the tie (within `MARGIN`), so a choice does not flip between runs on timing noise. The choice is
remembered in a small file per machine (`choices_path()`), keyed by what decides it (CPU, ISA in use and
forced-ISA settings, torch and oneDNN builds, threads, dtype, rows, the layers' shapes), so each machine
measures once. Timings taken while other work holds the cores say little (two processes of two
threads on two cores can slow a pass 50-fold), so the timing runs twice and a choice is remembered only
when both rounds agree and the machine's load average was under its core count; otherwise this run
keeps the packed kernel (if the rounds disagree) or its measured choice, and the next load measures again.
A remembered choice can be measured again by deleting the file, or skipped by setting
`model.cpu_kernels` outright.

The two paths add the same products in different orders, so their results can differ in the last bits
(float32) and a greedy token can in principle flip: `modules` is part of the model's identity (the
call cache keys on it), packed is not (it was the only CPU path before the choice existed). Every run's
provenance records the choice, how it was made and the timings.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KERNELS = ("packed", "modules")
SETTINGS = ("auto", *KERNELS)
MARGIN = 0.9  # `modules` is chosen only when it takes under 90 % of packed's time
REPEATS = 3  # timed passes per candidate and row count (after one untimed pass); the fastest counts
# A pass streaming the weights slower than this means other work holds the cores: the timing stops there
# (beside another two-thread job a pass was measured 50 times slower, so finishing it could take a minute).
SLOWEST_BYTES_PER_S = 1e9


class Busy(Exception):
    """A timing pass ran slower than SLOWEST_BYTES_PER_S: what it would say is the other work's."""


@dataclass
class KernelChoice:
    """What runs the linear layers, and why."""

    kernel: str  # packed | modules
    # setting (model.cpu_kernels named it) | measured | measured, not remembered (busy machine or rounds that
    # disagreed) | remembered | unavailable (no packed kernel)
    how: str
    seconds: dict = field(default_factory=dict)  # kernel -> {rows: seconds of one pass over every linear layer}
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


def choice_key(modules, rows: list[int]) -> tuple[str, dict]:
    """(digest, what it digests): everything a timing depends on."""
    import torch

    from ..hardware import cpu, library_versions

    weight = modules[0].weight
    shapes = sorted({tuple(m.weight.shape) for m in modules})
    facts = {"cpu": cpu(), "libraries": library_versions(), "threads": torch.get_num_threads(),
             "dtype": str(weight.dtype), "rows": rows, "shapes": [list(s) for s in shapes], "layers": len(modules)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16], facts


def _pass_seconds(run, modules, inputs) -> float:
    start = time.perf_counter()
    for module in modules:
        run(module, inputs[module.weight.shape[1]])
    return time.perf_counter() - start


def time_kernels(modules, packed: dict, rows: list[int]) -> dict:
    """kernel -> {rows: seconds of one pass over every linear layer} (inputs of `rows` random rows): the
    fastest of REPEATS passes after an untimed one, the kernels' passes interleaved so that both see the
    same machine (other work on shared cores slows whichever runs during it)."""
    import torch
    import torch.nn.functional as F

    weight = modules[0].weight
    # the slowest believable pass: the weights at SLOWEST_BYTES_PER_S (a quarter second at least: a small
    # model's pass is mostly call overhead), more for more rows (their arithmetic)
    limit = max(0.25, sum(m.weight.numel() * m.weight.element_size() for m in modules) / SLOWEST_BYTES_PER_S)
    paths = {"packed": lambda m, x: torch.ops.mkldnn._linear_pointwise(x, packed[m][0], packed[m][1], "none", [], ""),
             "modules": lambda m, x: F.linear(x, m.weight, m.bias)}
    seconds: dict = {kernel: {} for kernel in KERNELS}
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in rows:
            inputs = {d: torch.randn(n, d, generator=generator).to(weight.dtype) for d in {m.weight.shape[1] for m in modules}}
            best = {kernel: float("inf") for kernel in KERNELS}
            for repeat in range(REPEATS + 1):
                for kernel in KERNELS:
                    elapsed = _pass_seconds(paths[kernel], modules, inputs)
                    if elapsed > limit * max(1.0, n / 8):
                        raise Busy(f"a pass of {kernel} at {n} rows took {elapsed:.2f} s")
                    best[kernel] = min(best[kernel], elapsed) if repeat else best[kernel]
            for kernel in KERNELS:
                seconds[kernel][str(n)] = round(best[kernel], 6)
    return seconds


def faster(seconds: dict) -> str:
    total = {kernel: sum(by_rows.values()) for kernel, by_rows in seconds.items()}
    return "modules" if total["modules"] < MARGIN * total["packed"] else "packed"


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


def choose(modules, packed: dict, setting: str, rows_hint: int) -> KernelChoice:
    """The kernel for `modules` (the model's linear layers, in reading order) given `packed` (their
    packed weights; {} where oneDNN's kernel is unavailable) and `model.cpu_kernels`."""
    from ..hardware import cpu_model

    if setting not in SETTINGS:
        raise ValueError(f"model.cpu_kernels must be one of {', '.join(SETTINGS)}; got {setting!r}")
    if not packed:
        return KernelChoice("modules", "unavailable" if setting != "modules" else "setting", machine=cpu_model())
    if setting != "auto":
        return KernelChoice(setting, "setting", machine=cpu_model())
    rows = sorted({1, max(1, rows_hint)})
    key, _ = choice_key(modules, rows)
    path = choices_path()
    entry = _remembered(path, key)
    if entry is not None:
        return KernelChoice(entry["kernel"], "remembered", entry.get("seconds", {}), cpu_model())
    try:
        rounds = [time_kernels(modules, packed, rows) for _ in range(2)]
    except Busy as busy:
        return KernelChoice("packed", f"not measured, the machine is busy ({busy})", machine=cpu_model())
    winners = {faster(seconds) for seconds in rounds}
    seconds = {k: {n: min(r[k][n] for r in rounds) for n in rounds[0][k]} for k in KERNELS}
    load = os.getloadavg()[0]
    if len(winners) > 1:
        return KernelChoice("packed", "measured, not remembered (the two rounds disagreed)", seconds, cpu_model())
    kernel = winners.pop()
    if load >= (os.cpu_count() or 1):
        return KernelChoice(kernel, f"measured, not remembered (load average {load:.1f})", seconds, cpu_model())
    _remember(path, key, {"kernel": kernel, "seconds": seconds, "machine": cpu_model(),
                          "measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average": round(load, 2)})
    return KernelChoice(kernel, "measured", seconds, cpu_model())
