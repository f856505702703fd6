"""`adaptive-rag train-detector`: a detector trained from the data `detector_data` built, saved as
safetensors with its held-out metrics beside it (`detectors.metrics_path`).

The header's `model` is the data's: the LM identity name the data builder recorded
(`lm.identity()["model"]`, the model directory's name, params' `model.name` in the workflow), which
the `dior` method passes to `detectors.load(..., model=)`. Its `source` records how the inputs were
made (the bare-question prompt and the IG settings; the hidden layer and prompt format).

A data set with one class only cannot train a classifier (and the held-out split needs two units of
each class): that is refused before any training, naming the file and the counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ConfigError, InputError
from ...io import read_jsonl
from . import detectors
from .detector_data import read_meta
from .detectors import data_sidecars

if TYPE_CHECKING:  # the steps take the workflow's params; the method layer never imports config
    from ...config import DetectorTraining, Params


def training_settings(cfg: DetectorTraining, default: detectors.Training) -> detectors.Training:
    """params' training keys over the module's defaults (`epochs`/`lr` null: the default)."""
    return detectors.Training(epochs=cfg.epochs or default.epochs, lr=cfg.lr or default.lr,
                              weight_decay=default.weight_decay, batch_size=default.batch_size,
                              test_fraction=cfg.test_fraction, seed=cfg.seed)


def check_classes(data: Path, labels, units, what: str, negative: str, positive: str, hint: str) -> None:
    """Both labels occur in at least two units each (the held-out split takes whole units, stratified)."""
    y = np.asarray(labels, dtype=np.int64)
    unit_label: dict = {}
    for unit, label in zip(units, y):
        unit_label[unit] = min(unit_label.get(unit, 1), int(label))
    counts = [sum(1 for v in unit_label.values() if v == c) for c in (0, 1)]
    if min(counts) < 2:
        raise InputError(f"{data}: the {what} hold {counts[0]} {negative} and {counts[1]} {positive}; training "
                         f"needs both, at least 2 of each to hold one out. {hint}")


def train_early_from(params: Params, data: Path):
    cfg = params.detectors.early if params.detectors else None
    if cfg is None:
        raise ConfigError(f"{params.source}: detectors.early: not configured")
    meta = read_meta(data, "early")
    records = read_jsonl(data, "early detector data")
    labels = [r["label"] for r in records]
    check_classes(data, labels, range(len(labels)), "questions", "answered correctly (label 0)",
                  "hallucinated (label 1)",
                  "Add questions the model gets right (easier, better-known facts) or more questions "
                  "(detectors.early.datasets).")
    detector = detectors.train_early([r["scores"] for r in records], labels, model=meta["model"],
                                     source=meta["source"],
                                     architecture=detectors.EarlyArchitecture(features=cfg.features),
                                     training=training_settings(cfg.training, detectors.EARLY_TRAINING))
    detector.metrics["data"] = {"file": str(data), "questions": len(labels), "hallucinated": int(sum(labels))}
    return detector


def train_realtime_from(params: Params, data: Path):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    cfg = params.detectors.realtime if params.detectors else None
    if cfg is None:
        raise ConfigError(f"{params.source}: detectors.realtime: not configured")
    meta = read_meta(data, "realtime")
    arrays_path = data_sidecars(data)[1]
    if not arrays_path.is_file():
        raise InputError(f"real-time detector data's arrays not found: {arrays_path} (built with {data})")
    try:
        arrays = load_file(str(arrays_path))
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{arrays_path}: not a readable safetensors file ({exc})") from None
    labels, units = arrays["labels"].astype(np.int64), arrays["units"].tolist()
    check_classes(arrays_path, labels, units, "continuations with labelled tokens", "with a hallucinated entity",
                  "with matched entities only",
                  "Use more passages (detectors.realtime.max_passages) or a longer continuation "
                  "(max_new_tokens).")
    detector = detectors.train_realtime(arrays["features"], labels, units, model=meta["model"],
                                        source=meta["source"],
                                        training=training_settings(cfg.training, detectors.REALTIME_TRAINING))
    detector.metrics["data"] = {"file": str(data), "continuations": meta["continuations"],
                                "units": len(set(units)), "tokens": int(labels.size),
                                "faithful_tokens": int(labels.sum())}
    return detector


def train_detector(params: Params, kind: str, data: Path, out: Path):
    """Train the `kind` detector from `data` and save it to `out` (metrics beside it)."""
    if kind not in detectors.KINDS:
        raise InputError(f"detector kind must be one of {', '.join(detectors.KINDS)}; got {kind!r}")
    detector = (train_early_from if kind == "early" else train_realtime_from)(params, Path(data))
    detector.save(out)
    return detector
