"""Training, evaluating, saving and loading DioR's two detectors (paper §3.1, App. A; spec §1.1-1.2,
§3 item 4).

- Early detection (ED): before generating, from the normalised Integrated-Gradients attribution of
  the question's tokens, p(hallucination); retrieve up front when it is > 0.5 (the spec's reading of
  the paper's C(Q), see spec §1.1). `features: attribution-sequence` is the reference's GRU over the
  sequence (default), `attribution-entropy` the paper's scalar entropy H(Q) in a logistic regression.
- Real-time detection (RD): per generated token, from the generating model's hidden state,
  p(non-hallucination) (the paper's H = 1); a token is flagged when it is < 0.5. Trained on token
  labels from `realtime_labels` (entity tokens only).

Training is seeded and deterministic: the same data, settings and seed give byte-equal weights on
the same torch build, because initialisation, dropout and the epoch order draw from the seed alone
(`torch.random.fork_rng`, so a caller's RNG is left as it was) and training runs on the CPU in one
thread (the models are small; more threads would tie the float sums to the machine's core count,
and under Snakemake's parallel jobs they oversubscribe the cores: on the project's busy 2-core
machine a toy run took 5x longer with 2 threads than with 1).

A held-out split (stratified by label, seeded) gives AUC, accuracy and ECE, saved beside the weights
(`metrics_path`). RD examples are grouped into units (one continuation each, from the data builder)
and split by unit, so tokens of one continuation never sit on both sides; its metrics also hold the
unit-level AUC, a unit scored by its least faithful token and labelled 0 if any of its tokens is:
that is Alg. 2's label H_i, and the paper's sentence-level AUC (App. C.6: 0.7913) is of that kind.

The weights file is safetensors with a JSON header (kind, input width, architecture, training
settings, the model and features it was trained for); `load` refuses a file trained for another
kind, model, width or feature source, naming the file and both values.

Defaults and where they come from:
- ED: GRU hidden 128, 4 layers, dropout 0.25 (DioR's class, spec §1.1); AdamW, weight decay 0.01,
  batch 512 (Snyder's notebook); 80/20 split (paper App. A.3.1).
- RD: d → 256 → 128 → 64 → 1, dropout 0.5 (Snyder's feed-forward classifier, spec §1.2); AdamW,
  weight decay 0.01, batch 512 (Snyder); a 20 % held-out split is ours (the paper's is
  6,000/1,000/1,304 with a validation set it never says it uses).
- Ours: the learning rates and epoch counts (`EARLY_TRAINING`, `REALTIME_TRAINING`) and input
  standardisation (`detector_nets.Standardise`, also of the GRU's input). Snyder's lr 1e-5 trains
  neither detector far in a demo-scale number of steps: on the synthetic sets of
  `benchmarks/detector_training.py` (3,000 questions, 5,000 tokens; 30 epochs) it left ED at
  held-out AUC 0.70 and RD at 0.53, where 1e-3 reached 1.00 and 0.77 (docs/dior.md). Pass
  `Training(lr=1e-5, ...)` for Snyder's rate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import InputError
from ...io import atomic_write, write_json
from ..parts.uncertainty import auroc

FORMAT = "adaptive-rag-detector-v1"
KINDS = ("early", "realtime")
EARLY_FEATURES = ("attribution-sequence", "attribution-entropy")
POSITIVE = {"early": "hallucination", "realtime": "non-hallucination"}
THRESHOLD = 0.5  # paper §3.2: C(Q) and P_t both against 0.5
BINS = 10  # ECE bins (equal width)
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Training:
    epochs: int
    lr: float
    weight_decay: float = 0.01  # Snyder
    batch_size: int = 512  # Snyder
    test_fraction: float = 0.2  # paper App. A.3.1 (ED); ours for RD
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.epochs, int) and self.epochs >= 1):
            raise ValueError(f"epochs must be an integer >= 1; got {self.epochs!r}")
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1; got {self.batch_size!r}")
        if not self.lr > 0 or not self.weight_decay >= 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0; got {self.lr!r}, {self.weight_decay!r}")
        if not 0 < self.test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1); got {self.test_fraction!r}")


@dataclass(frozen=True)
class EarlyArchitecture:
    features: str = "attribution-sequence"
    hidden: int = 128
    layers: int = 4
    dropout: float = 0.25

    def __post_init__(self):
        if self.features not in EARLY_FEATURES:
            raise ValueError(f"early features must be one of {', '.join(EARLY_FEATURES)}; got {self.features!r}")


@dataclass(frozen=True)
class RealtimeArchitecture:
    sizes: tuple[int, ...] = (256, 128, 64)
    dropout: float = 0.5


EARLY_TRAINING = Training(epochs=30, lr=1e-3)  # ours (see the module docstring)
REALTIME_TRAINING = Training(epochs=30, lr=1e-3)  # ours


# The workflow's files (workflow/rules/detectors.smk builds them; docs/dior.md#detectors-as-workflow-targets). A trained detector's
# header records `model` = the LM's identity name, `lm.identity()["model"]`: for the hf backend the model
# directory's name, i.e. params' `model.name` for the workflow's data/models/<model.name>; `load(..., model=)`
# with the same string refuses a detector trained on another model.
EARLY_DETECTOR = "data/detectors/early.safetensors"
REALTIME_DETECTOR = "data/detectors/realtime.safetensors"
EARLY_DATA = "data/detectors/early-data.jsonl"  # `adaptive-rag detector-data --kind early`
# The layer whose hidden states the real-time detector reads: the data builder records it (`source.hidden_layer`)
# and the `dior` method applies the detector there, refusing a file that records another.
REALTIME_HIDDEN_LAYER = -1
REALTIME_DATA = "data/detectors/realtime-data.jsonl"  # `--kind realtime`


def data_sidecars(data: str | Path) -> tuple[Path, Path]:
    """(meta JSON, arrays) beside a detector data JSONL: what it was built from and with, and the real-time
    data's per-token hidden states, labels and units (safetensors: byte-equal when rebuilt, unlike .npz)."""
    data = Path(data)
    return data.with_suffix(".meta.json"), data.with_suffix(".safetensors")


def metrics_path(weights: str | Path) -> Path:
    """Where the held-out metrics of a weights file are written: `<stem>.metrics.json` beside it."""
    weights = Path(weights)
    return weights.with_name(f"{weights.stem}.metrics.json")


# ---- data checks and the split ----------------------------------------------------------------

def _labels(labels: Sequence[int], n: int, what: str) -> np.ndarray:
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"{what}: {n} examples but {y.size} labels")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{what}: labels must be 0 or 1; got {sorted(set(y.tolist()) - {0, 1})[:5]}")
    return y.astype(np.int64)


def check_attributions(sequences: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Each a question's normalised attribution a_j = ‖IG_j‖ / Σ_k ‖IG_k‖: non-empty, finite,
    non-negative, summing to 1 (the spec's `aggregate: l2`; signed values cannot form the entropy)."""
    out = []
    for i, seq in enumerate(sequences):
        a = np.asarray(seq, dtype=np.float64)
        if a.ndim != 1 or a.size == 0:
            raise ValueError(f"attribution sequence {i}: expected a non-empty list of numbers, got shape {a.shape}")
        if not np.isfinite(a).all() or (a < 0).any() or abs(a.sum() - 1.0) > SUM_TOLERANCE:
            raise ValueError(f"attribution sequence {i}: values must be finite, >= 0 and sum to 1 (the "
                             f"normalised L2 attribution); they sum to {a.sum():.6g}, min {a.min():.6g}")
        out.append(a.astype(np.float32))
    return out


def split(units: Sequence[Any], labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Example indices (train, test): whole units held out, stratified by the unit's label (its
    minimum: a unit with any 0 is a 0), round(test_fraction · n) units of each class, seeded."""
    keys = list(dict.fromkeys(units))
    position = {u: k for k, u in enumerate(keys)}
    unit_of = np.fromiter((position[u] for u in units), dtype=np.int64, count=len(units))
    unit_label = np.ones(len(keys), dtype=np.int64)
    np.minimum.at(unit_label, unit_of, labels)
    rng = np.random.default_rng(seed)
    held = np.zeros(len(keys), dtype=bool)
    for cls in (0, 1):
        members = np.flatnonzero(unit_label == cls)
        if members.size < 2:
            raise ValueError(f"need at least 2 units of label {cls} to hold some out; got {members.size} "
                             f"(of {len(keys)} units)")
        take = min(members.size - 1, max(1, round(test_fraction * members.size)))
        held[rng.permutation(members)[:take]] = True
    test = held[unit_of]
    return np.flatnonzero(~test), np.flatnonzero(test)


# ---- metrics --------------------------------------------------------------------------------------

def calibration_error(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error of p(positive): Σ_b |b|/n · |mean label - mean p| over equal-width bins."""
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.mean() * abs(y[inside].mean() - p[inside].mean())
    return float(total)


def _scores(p: np.ndarray, y: np.ndarray, predicted: np.ndarray) -> dict:
    return {"n": int(y.size), "positives": int(y.sum()), "auc": auroc(p, y.astype(bool)),
            "accuracy": float((predicted == y).mean()), "ece": calibration_error(p, y)}


def _unit_scores(p: np.ndarray, y: np.ndarray, units: Sequence[Any]) -> dict:
    """Per unit: its least faithful token's p and the minimum label (Alg. 2's H_i)."""
    keys = list(dict.fromkeys(units))
    position = {u: k for k, u in enumerate(keys)}
    unit_of = np.fromiter((position[u] for u in units), dtype=np.int64, count=len(units))
    up, uy = np.ones(len(keys)), np.ones(len(keys), dtype=np.int64)
    np.minimum.at(up, unit_of, p)
    np.minimum.at(uy, unit_of, y)
    return _scores(up, uy, (up >= THRESHOLD).astype(np.int64))


# ---- the trained detector -------------------------------------------------------------------------

def _padded(sequences: Sequence[np.ndarray]):
    import torch
    from torch.nn.utils.rnn import pad_sequence

    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
    return pad_sequence([torch.from_numpy(s) for s in sequences], batch_first=True).unsqueeze(-1), lengths


def _build(header: dict):
    from . import detector_nets as nets

    arch = header["architecture"]
    if header["kind"] == "early":
        if arch["features"] == "attribution-entropy":
            return nets.EntropyLogistic()
        return nets.EarlyRNN(arch["hidden"], arch["layers"], arch["dropout"])
    return nets.RealtimeMLP(header["width"], tuple(arch["sizes"]), arch["dropout"])


class Detector:
    """A trained detector: `predict` gives p(positive class) per input, `flags` the paper's decision
    (early: retrieve up front; realtime: the token is a hallucination)."""

    def __init__(self, module, header: dict, metrics: dict | None = None):
        self.module = module.eval()
        self.header = header
        self.metrics = metrics
        self.kind = header["kind"]

    def _inputs(self, inputs):
        import torch

        if self.kind == "early":
            return _padded(check_attributions(inputs))
        x = np.asarray(inputs, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.header["width"]:
            raise ValueError(f"realtime detector: expected features of shape [tokens, {self.header['width']}], "
                             f"got {x.shape}")
        return (torch.from_numpy(np.ascontiguousarray(x)),)

    def logits(self, inputs) -> np.ndarray:
        import torch

        if len(inputs) == 0:
            return np.zeros(0)
        args = self._inputs(inputs)
        with torch.no_grad():
            return self.module(*args).double().numpy()

    def predict(self, inputs) -> np.ndarray:
        """p(`POSITIVE[kind]`) per input: early, per attribution sequence; realtime, per feature row."""
        z = self.logits(inputs)
        return 1.0 / (1.0 + np.exp(-z))

    def flags(self, inputs) -> np.ndarray:
        p = self.predict(inputs)
        return p > THRESHOLD if self.kind == "early" else p < THRESHOLD

    def save(self, path: str | Path) -> Path:
        """The weights with their header (safetensors), and the metrics beside them (`metrics_path`)."""
        return write_weights(path, self.module, self.header, self.metrics)


def write_weights(path: str | Path, module, header: dict, metrics: dict | None) -> Path:
    """A torch module's state as safetensors with `header` (JSON) in its metadata, and `metrics` with the
    header beside it (`metrics_path`) when given; RaDIO's detector is saved the same way."""
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        handle.write(save(tensors, metadata={"header": json.dumps(header, sort_keys=True)}))
    if metrics is not None:
        write_json(metrics_path(path), {"header": header, "metrics": metrics})
    return path


def read_weights(path: str | Path, what: str, missing: str, fmt: str = FORMAT) -> tuple[dict, dict]:
    """(header, tensors) of a file `write_weights` wrote in format `fmt`; a missing file (`what` not
    found, `missing` says how to make it), another file or another format is an InputError naming it."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} not found: {path} ({missing})")
    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        header = json.loads(meta["header"])
    except (SafetensorError, KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a detector weights file ({type(exc).__name__}: {exc})") from None
    if header.get("format") != fmt:
        raise InputError(f"{path}: format {header.get('format')!r}, expected {fmt!r}")
    return header, tensors


def load(path: str | Path, kind: str, model: str | None = None, width: int | None = None,
         source: dict | None = None) -> Detector:
    """A saved detector, refused (InputError naming the file) if it was trained for another kind, LM
    (`model`), input width or feature source: each key of `source` (e.g. `hidden_layer`, `attribution`,
    the IG settings) must equal what the file's header records from its data's meta file, a key it does
    not record included."""
    if kind not in KINDS:
        raise ValueError(f"detector kind must be one of {', '.join(KINDS)}; got {kind!r}")
    header, tensors = read_weights(path, f"{kind} detector", "train it first")
    wanted = {"kind": kind, "model": model, "width": width}
    for key, value in wanted.items():
        if value is not None and header.get(key) != value:
            raise InputError(f"{path}: this {header.get('kind')} detector was trained for {key} "
                             f"{header.get(key)!r}, not {value!r}; retrain it for {value!r}")
    recorded = header.get("source") or {}
    for key, value in (source or {}).items():
        if recorded.get(key) != value:
            raise InputError(f"{path}: this {kind} detector's features come from {key} {recorded.get(key)!r}, "
                             f"but this run computes them with {key} {value!r}; rebuild its data and retrain it "
                             f"(snakemake --cores all detectors)")
    module = _build(header)
    module.load_state_dict(tensors, strict=True)
    metrics_file = metrics_path(path)
    metrics = json.loads(metrics_file.read_text(encoding="utf-8"))["metrics"] if metrics_file.is_file() else None
    return Detector(module, header, metrics)


# ---- training -------------------------------------------------------------------------------------

def _fit(module, inputs, y, train: np.ndarray, training: Training) -> float:
    """Mini-batch AdamW on BCE (paper Eq. 5); the last epoch's mean loss."""
    import torch

    labels = torch.from_numpy(y.astype(np.float32))
    order_rng = torch.Generator().manual_seed(training.seed)
    optimiser = torch.optim.AdamW(module.parameters(), lr=training.lr, weight_decay=training.weight_decay)
    loss_sum = 0.0
    for _ in range(training.epochs):
        module.train()
        order = train[torch.randperm(train.size, generator=order_rng).numpy()]
        loss_sum = 0.0
        for start in range(0, order.size, training.batch_size):
            batch = order[start:start + training.batch_size]
            optimiser.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(module(*inputs(batch)), labels[batch])
            loss.backward()
            optimiser.step()
            loss_sum += float(loss.detach()) * batch.size
    module.eval()
    return loss_sum / train.size


def _train(kind: str, make_module, tensors: tuple, y: np.ndarray, units: Sequence[Any], training: Training,
           header: dict) -> Detector:
    import torch

    train, test = split(units, y, training.test_fraction, training.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(training.seed)
            module = make_module()
            index = torch.from_numpy(train)
            module.fit_inputs(*(t[index] for t in tensors))
            loss = _fit(module, lambda batch: tuple(t[torch.from_numpy(batch)] for t in tensors), y, train, training)
        with torch.no_grad():
            p = torch.sigmoid(module(*tensors).double()).numpy()
    finally:
        torch.set_num_threads(threads)
    detector = Detector(module, {**header, "kind": kind, "format": FORMAT, "positive": POSITIVE[kind],
                                 "threshold": THRESHOLD, "training": asdict(training)})
    metrics = {"train": _scores(p[train], y[train], detector_predictions(kind, p[train])),
               "test": _scores(p[test], y[test], detector_predictions(kind, p[test])),
               "final_train_loss": loss}
    if kind == "realtime":
        metrics["test_units"] = _unit_scores(p[test], y[test], [units[i] for i in test])
    detector.metrics = metrics
    return detector


def detector_predictions(kind: str, p: np.ndarray) -> np.ndarray:
    """The predicted label (1 = the positive class) under the paper's 0.5 decision of each kind."""
    return (p > THRESHOLD if kind == "early" else p >= THRESHOLD).astype(np.int64)


def train_early(sequences: Sequence[Sequence[float]], labels: Sequence[int], model: str,
                source: dict | None = None, architecture: EarlyArchitecture = EarlyArchitecture(),
                training: Training = EARLY_TRAINING) -> Detector:
    """The early detector from each question's normalised attribution sequence and its label
    (1 = the model's answer was a hallucination, i.e. did not contain the gold answer; Alg. 1).
    `model` names the LM the attributions come from; `source` records how they were computed."""
    seqs = check_attributions(sequences)
    y = _labels(labels, len(seqs), "early detector")
    padded, lengths = _padded(seqs)
    header = {"model": model, "width": 1, "source": dict(source or {}), "architecture": asdict(architecture)}
    return _train("early", lambda: _build({"kind": "early", **header}), (padded, lengths), y,
                  list(range(len(seqs))), training, header)


def train_realtime(features, labels: Sequence[int], units: Sequence[Any], model: str,
                   source: dict | None = None, architecture: RealtimeArchitecture = RealtimeArchitecture(),
                   training: Training = REALTIME_TRAINING) -> Detector:
    """The real-time detector from per-token hidden states [tokens, d] and token labels (1 = the
    token belongs to a generated entity that matches an original one, 0 = a hallucinated entity;
    unlabelled tokens are left out by the caller). `units` groups tokens (one continuation each)
    for the split and the unit-level metrics."""
    import torch

    x = np.asarray(features, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"realtime detector: features must be a non-empty [tokens, width] matrix; got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("realtime detector: features hold NaN or infinite values")
    y = _labels(labels, x.shape[0], "realtime detector")
    if len(units) != x.shape[0]:
        raise ValueError(f"realtime detector: {x.shape[0]} tokens but {len(units)} unit ids")
    header = {"model": model, "width": int(x.shape[1]), "source": dict(source or {}),
              "architecture": {**asdict(architecture), "sizes": list(architecture.sizes)}}
    return _train("realtime", lambda: _build({"kind": "realtime", **header}), (torch.from_numpy(np.ascontiguousarray(x)),),
                  y, list(units), training, header)

