"""The per-unit cost table: what one unit of each kind of work costs on a named device.

`benchmarks/unit_costs.py --write NAME` measures the units of one model on one device and stores them
under `devices: NAME` in `unit_costs.yaml` beside this module, with the hardware, date, commit and
command; an entry for a GPU is added the same way on that GPU. `models:` gives the parameter count of
every model a profile names: a profile whose model no entry measured gets the entry's per-token costs
scaled by the ratio of parameter counts (a decode step streams every weight once and a prefill token
multiplies by every weight once, on any device), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

TABLE = Path(__file__).with_name("unit_costs.yaml")
HEADER = """\
# Per-unit costs `adaptive-rag plan` multiplies a profile's work by (docs/performance.md#planning-a-profile).
# devices.<name>: measured by `benchmarks/unit_costs.py --write <name>` (its command, hardware, commit and date
# are in the entry); add a device by running that command on it. Seconds: process_start_s (Python, torch,
# transformers and the package imported), light_job_s (a job that loads no model), model_load_s,
# call_s (per prompt of a model call), prefill_token_s (per question-specific prompt token), decode_step_s
# (per decode step, by rows), decode_extras_ratio (a step with DRAGIN's entropies and attention rows, over
# a plain one, at 8 rows), sample_step_s (per step of k sampled rows of one prompt, by k), ig_point_s (one
# Integrated-Gradients point of a bare question of ig_question_tokens tokens), retriever_open_s and
# search_s (BM25, by the index's passages), index_build (corpus conversion and BM25 indexing, by passages).
# load_average: the machine's 1-minute load average at the start and the end of the measurement.
# models.<name>: parameters, for scaling a model no entry measured (the measured model's, and the profiles'
# 7B models counted from their shapes: benchmarks/unit_costs.py's PAPER_MODELS).
"""
PER_TOKEN = ("model_load_s", "prefill_token_s", "ig_point_s")  # scale with the model's parameters
# What an entry says about its measurement (the plan prints it) besides its units.
ENTRY_KEYS = ("device", "hardware", "model", "dtype", "parameters", "date", "commit", "torch", "command",
              "load_average", "units")


def round_units(value: Any) -> Any:
    """Four significant digits, recursively: the table records measurements, not float noise."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: round_units(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [round_units(v) for v in value]
    return value


def load_table(path: Path = TABLE) -> dict:
    from ..io import read_yaml

    data = read_yaml(path, "unit-cost table", InputError)
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict) or not data["devices"]:
        raise InputError(f"{path}: no `devices:` entries; `python benchmarks/unit_costs.py --write NAME` adds one")
    return data


def write_entry(name: str, entry: dict, models: dict | None = None, path: Path = TABLE) -> Path:
    """Store a device's entry as devices.NAME, with its model's parameters (and `models`') under models:."""
    data = load_table(path) if path.is_file() else {"devices": {}, "models": {}}
    data["devices"][name] = entry
    return write_models({entry["model"]: entry["parameters"], **(models or {})}, path, data)


def write_models(models: dict, path: Path = TABLE, data: dict | None = None) -> Path:
    import yaml

    from ..io import atomic_write

    data = data or load_table(path)
    data.setdefault("models", {}).update(models)
    with atomic_write(path) as handle:
        handle.write(HEADER + yaml.safe_dump(data, sort_keys=False, width=110))
    return path


def interpolate(points: dict, x: float) -> float:
    """Piecewise-linear through the measured (x, seconds) points; beyond them, the nearest segment's line."""
    xs = sorted(float(k) for k in points)
    ys = {float(k): float(v) for k, v in points.items()}
    if len(xs) == 1:
        return ys[xs[0]] * x / xs[0]
    i = next((j for j in range(1, len(xs)) if x <= xs[j]), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    return max(0.0, ys[x0] + (ys[x1] - ys[x0]) * (x - x0) / (x1 - x0))


@dataclass(frozen=True)
class Units:
    """One device entry's units, scaled to a model of `parameters` parameters."""

    name: str
    entry: dict
    parameters: int
    model: str
    path: Path = TABLE  # the table it was read from (errors name it)

    @property
    def scale(self) -> float:
        return self.parameters / self.entry["parameters"]

    @property
    def scaled(self) -> bool:
        return self.model != self.entry["model"]

    def get(self, key: str) -> Any:
        units = self.entry["units"]
        if key not in units:
            raise InputError(f"{self.path}: devices.{self.name}.units has no {key}; rerun "
                             f"benchmarks/unit_costs.py --write {self.name} with the options that measure it")
        return units[key] * self.scale if key in PER_TOKEN else units[key]

    def decode_step(self, rows: float, extras: bool = False) -> float:
        step = interpolate(self.get("decode_step_s"), rows) * self.scale
        # a ratio under 1 is timing noise (the reads only add work): such a step costs a plain one
        return step * (max(1.0, self.get("decode_extras_ratio")) if extras else 1.0)

    def sample_step(self, rows: float) -> float:
        return interpolate(self.get("sample_step_s"), rows) * self.scale

    def search(self, passages: int) -> float:
        """Seconds per BM25 search, at the measured index nearest in size (BM25's cost grows with the
        postings it reads, which this does not scale)."""
        measured = self.get("search_s")
        nearest = min(measured, key=lambda n: abs(float(n) - passages))
        return float(measured[nearest])

    def index_build(self, passages: int) -> float:
        """Corpus conversion and BM25 indexing of `passages` passages: linear in the passages through the
        measured builds."""
        builds = self.get("index_build")
        return sum(interpolate({b["passages"]: b[key] for b in builds}, passages) for key in ("corpus_s", "index_s"))


def units_for(table: dict, device: str | None, model: str, model_device: str, path: Path = TABLE) -> Units:
    """The entry named `device` (default: the first measured on the profile's kind of device, else the
    first) of the table read from `path`, scaled to `model`."""
    devices = table["devices"]
    if device is None:
        kind = model_device.split(":")[0]
        device = next((n for n, e in devices.items() if e.get("device") == kind), next(iter(devices)))
    if device not in devices:
        raise InputError(f"--device {device!r}: {path} measures {', '.join(devices)}")
    entry = devices[device]
    missing = [key for key in ENTRY_KEYS if key not in (entry or {})]
    if missing:
        raise InputError(f"{path}: devices.{device} has no {', '.join(missing)}; "
                         f"`python benchmarks/unit_costs.py --write {device}` writes a whole entry")
    parameters = (table.get("models") or {}).get(model)
    if parameters is None:
        raise InputError(f"model.name {model!r}: its parameter count is not under models: of {path}; add it there")
    return Units(device, entry, int(parameters), model, path)
