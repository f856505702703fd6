"""Adaptive-RAG's query-complexity classifier: trained on the labels `labels` makes, saved as one
safetensors file with its held-out metrics beside it, loaded by the `adaptive-rag` method.

Two kinds (`complexity_classifier.classifier`):

- `t5`, the paper's: a T5 (`t5-large` by hub id) fine-tuned to write the label, as the reference trains
  it (classifier/run_classifier.py with classifier/run/run_large_train_xl.sh: the stripped question in,
  the letter out; AdamW at lr 3e-5, a linear schedule without warm-up, batch 32, inputs cut at 384
  tokens) and reads it (run_classifier.py, `main`'s evaluation loop: the softmax of the first decoding
  step's scores of the tokens of "A", "B" and "C", `tokenizer('A').input_ids[0]`, the argmax wins).
  The reference selects among 15-35 epochs; 25 is the run its postprocess script names
  (classifier/postprocess/predict_complexity_on_classification_results.py).
- `minilm-logistic`, a local alternative that runs offline: multinomial logistic regression
  (scikit-learn, L2, `regularization` = its C) on the normalised all-MiniLM-L6-v2 sentence embeddings of
  the questions. It is not the paper's classifier; it is what can be trained on a machine that cannot
  download a T5.

The held-out split is stratified by label and seeded: round(test_fraction x n) questions of each label
with at least two (at least one, never all); a label with one question trains only. The metrics file
holds the held-out accuracy, per-label counts, the confusion matrix (rows: the true label, columns: the
predicted one) and the label distribution of all, training and held-out questions. The header keeps
every labelled question's id: the method refuses to answer any of them.

Training is seeded: lbfgs fits the regression deterministically; the T5 fine-tuning (which starts from
the pretrained weights, so nothing is initialised at random) draws its batch order and dropout from the
seed. T5 trains on a GPU when one is visible, where float sums may differ from run to run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ...errors import InputError
from ...io import atomic_write, write_json
from .labels import LABELS, read_labels

if TYPE_CHECKING:
    from ...config import ComplexityClassifierConfig

FORMAT = "adaptive-rag-complexity-classifier-v1"
KINDS = ("minilm-logistic", "t5")
LABELS_FILE = "data/complexity/labels.jsonl"  # `complexity-labels` (workflow/rules/complexity.smk)
CLASSIFIER = "data/complexity/classifier.safetensors"  # `train-complexity-classifier`
MAX_INPUT_TOKENS = 384  # run_large_train_xl.sh: --max_seq_length 384
ENCODE_BATCH = 64


def metrics_path(weights: str | Path) -> Path:
    """`<stem>.metrics.json` beside the weights (as DioR's detectors keep theirs)."""
    weights = Path(weights)
    return weights.with_name(f"{weights.stem}.metrics.json")


# ---- the split and the metrics ----------------------------------------------------------------


def split(labels: Sequence[str], test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held out): per label with at least two questions, round(test_fraction x n) of them
    held out, at least one and never all, drawn by a generator seeded with `seed`."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    held = np.zeros(len(y), dtype=bool)
    for label in LABELS:
        members = np.flatnonzero(y == label)
        if members.size >= 2:
            take = min(members.size - 1, max(1, round(test_fraction * members.size)))
            held[rng.permutation(members)[:take]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def distribution(labels: Sequence[str]) -> dict[str, int]:
    return {label: int(sum(1 for y in labels if y == label)) for label in LABELS}


def scores(truth: Sequence[str], predicted: Sequence[str]) -> dict:
    """Accuracy, per-label counts and the confusion matrix (rows: true label, columns: predicted)."""
    confusion = [[sum(1 for t, p in zip(truth, predicted) if t == row and p == column) for column in LABELS]
                 for row in LABELS]
    per_label = {label: {"n": sum(confusion[i]), "correct": confusion[i][i],
                         "predicted": sum(confusion[k][i] for k in range(len(LABELS)))}
                 for i, label in enumerate(LABELS)}
    n = len(truth)
    return {"n": n, "accuracy": sum(t == p for t, p in zip(truth, predicted)) / n if n else None,
            "per_label": per_label, "confusion": {"labels": list(LABELS), "matrix": confusion}}


# ---- the two kinds --------------------------------------------------------------------------------


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class MiniLMLogistic:
    """Logistic regression on normalised sentence embeddings; `probabilities` over LABELS."""

    def __init__(self, encoder: str, coef: np.ndarray, intercept: np.ndarray, classes: Sequence[str]):
        self.encoder_spec, self.coef, self.intercept, self.classes = encoder, coef, intercept, list(classes)
        self._encoder = None

    def embed(self, questions: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            from ...retrieval.dense import load_encoder

            self._encoder = load_encoder(self.encoder_spec)
        return np.asarray(self._encoder.encode([q.strip() for q in questions], batch_size=ENCODE_BATCH,
                                               show_progress_bar=False, convert_to_numpy=True,
                                               normalize_embeddings=True), dtype=np.float64)

    @classmethod
    def fit(cls, encoder: str, questions: Sequence[str], labels: Sequence[str], regularization: float):
        from sklearn.linear_model import LogisticRegression

        model = cls(encoder, np.zeros(0), np.zeros(0), [])
        regression = LogisticRegression(C=regularization, max_iter=5000)
        regression.fit(model.embed(questions), list(labels))
        model.coef, model.intercept = regression.coef_.astype(np.float64), regression.intercept_.astype(np.float64)
        model.classes = [str(c) for c in regression.classes_]
        return model

    def probabilities(self, questions: Sequence[str]) -> np.ndarray:
        z = self.embed(questions) @ self.coef.T + self.intercept
        if len(self.classes) == 2:  # scikit-learn's binary form: one row of weights for the second class
            z = np.concatenate([np.zeros_like(z), z], axis=1)
        known = _softmax(z)
        out = np.zeros((len(questions), len(LABELS)))
        for k, label in enumerate(self.classes):
            out[:, LABELS.index(label)] = known[:, k]
        return out

    def tensors(self) -> dict:
        # C order: scikit-learn's coef_ is Fortran-ordered, and safetensors writes the buffer as it lies
        return {"coef": np.ascontiguousarray(self.coef), "intercept": np.ascontiguousarray(self.intercept)}

    def header(self) -> dict:
        return {"encoder": self.encoder_spec, "classes": self.classes}

    @classmethod
    def restore(cls, header: dict, tensors: dict):
        return cls(header["encoder"], tensors["coef"], tensors["intercept"], header["classes"])


class T5Classifier:
    """A T5 that writes the label; `probabilities` is the softmax over the three label tokens' first
    decoding-step scores (run_classifier.py), in LABELS order."""

    def __init__(self, model, tokenizer, base: str):
        self.model, self.tokenizer, self.base = model.eval(), tokenizer, base
        self.label_ids = label_token_ids(tokenizer, base)

    @classmethod
    def fit(cls, base: str, questions: Sequence[str], labels: Sequence[str], epochs: int, lr: float,
            batch_size: int, seed: int):
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, get_linear_schedule_with_warmup

        try:
            tokenizer = AutoTokenizer.from_pretrained(base)
            model = AutoModelForSeq2SeqLM.from_pretrained(base)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"complexity_classifier.model {base!r} could not be loaded (not a local T5 "
                             f"directory, and the Hugging Face hub may be unreachable): {first}") from None
        label_token_ids(tokenizer, base)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device).train()
        steps = -(-len(questions) // batch_size) * epochs
        optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
        schedule = get_linear_schedule_with_warmup(optimiser, num_warmup_steps=0, num_training_steps=steps)
        order = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # dropout
            for _ in range(epochs):
                for batch in torch.randperm(len(questions), generator=order).split(batch_size):
                    inputs = tokenizer([questions[i].strip() for i in batch], return_tensors="pt", padding=True,
                                       truncation=True, max_length=MAX_INPUT_TOKENS).to(device)
                    target = tokenizer(text_target=[labels[i] for i in batch], return_tensors="pt",
                                       padding=True)["input_ids"].to(device)
                    target[target == tokenizer.pad_token_id] = -100
                    loss = model(**inputs, labels=target).loss
                    loss.backward()
                    optimiser.step()
                    schedule.step()
                    optimiser.zero_grad()
        return cls(model.to("cpu"), tokenizer, base)

    def probabilities(self, questions: Sequence[str]) -> np.ndarray:
        import torch

        inputs = self.tokenizer([q.strip() for q in questions], return_tensors="pt", padding=True, truncation=True,
                                max_length=MAX_INPUT_TOKENS).to(self.model.device)
        start = torch.full((len(questions), 1), self.model.config.decoder_start_token_id, dtype=torch.long,
                           device=self.model.device)
        with torch.no_grad():
            logits = self.model(**inputs, decoder_input_ids=start).logits[:, 0, :]
        return torch.softmax(logits[:, self.label_ids].double(), dim=-1).cpu().numpy()

    def tensors(self) -> dict:
        # clones: T5 ties its embeddings, and safetensors stores no two names for one memory
        return {k: v.detach().cpu().clone().contiguous().numpy() for k, v in self.model.state_dict().items()}

    def header(self) -> dict:
        """The model's configuration and the tokenizer's files (base64: a SentencePiece model is binary),
        so the one weights file is the whole classifier."""
        import base64
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            self.tokenizer.save_pretrained(tmp)
            files = {path.name: base64.b64encode(path.read_bytes()).decode("ascii")
                     for path in sorted(Path(tmp).iterdir()) if path.is_file()}
        return {"base": self.base, "config": self.model.config.to_dict(), "tokenizer_files": files}

    @classmethod
    def restore(cls, header: dict, tensors: dict):
        import base64
        import tempfile

        import torch
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

        config = type(AutoConfig.for_model(header["config"]["model_type"])).from_dict(header["config"])
        model = AutoModelForSeq2SeqLM.from_config(config)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in header["tokenizer_files"].items():
                (Path(tmp) / name).write_bytes(base64.b64decode(data))
            tokenizer = AutoTokenizer.from_pretrained(tmp)
        return cls(model, tokenizer, header["base"])


def label_token_ids(tokenizer, base: str) -> list[int]:
    """The first token of each label's text (run_classifier.py: `tokenizer('A').input_ids[0]`); three
    distinct ids, or the tokenizer cannot tell the labels apart at the first step."""
    ids = [tokenizer(label)["input_ids"][0] for label in LABELS]
    if len(set(ids)) != len(ids):
        raise InputError(f"complexity_classifier.model {base!r}: its tokenizer starts the labels "
                         f"{', '.join(LABELS)} with the tokens {ids}, not three distinct ones; use a T5 whose "
                         f"vocabulary has them")
    return ids


KIND_CLASSES = {"minilm-logistic": MiniLMLogistic, "t5": T5Classifier}


# ---- the saved classifier -----------------------------------------------------------------------------


@dataclass
class ComplexityClassifier:
    kind: str
    model: MiniLMLogistic | T5Classifier
    question_ids: frozenset  # every labelled question (trained on or held out): never answered by a run
    metrics: dict | None = None

    def probabilities(self, questions: Sequence[str]) -> np.ndarray:
        return self.model.probabilities(questions) if questions else np.zeros((0, len(LABELS)))

    def predict(self, questions: Sequence[str]) -> list[str]:
        """The most probable label per question (ties to the cheaper label, as argmax takes the first)."""
        return [LABELS[int(k)] for k in np.argmax(self.probabilities(questions), axis=1)]

    def save(self, path: str | Path, settings: dict) -> Path:
        from safetensors.numpy import save

        header = {"format": FORMAT, "kind": self.kind, "labels": list(LABELS), "settings": settings,
                  "question_ids": sorted(self.question_ids), **self.model.header()}
        path = Path(path)
        with atomic_write(path, "wb") as handle:
            handle.write(save(self.model.tensors(), metadata={"header": json.dumps(header, sort_keys=True)}))
        if self.metrics is not None:
            write_json(metrics_path(path), {"kind": self.kind, "settings": settings, "metrics": self.metrics})
        return path


def load(path: str | Path) -> ComplexityClassifier:
    """A saved classifier; a missing or foreign file fails naming it and the target that makes it."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    make = f"snakemake --cores all {CLASSIFIER}" if str(path) == CLASSIFIER else "train it first"
    if not path.is_file():
        raise InputError(f"{path}: missing; the query-complexity classifier is trained by the workflow ({make})")
    try:
        with safe_open(str(path), framework="numpy") as handle:
            header = json.loads((handle.metadata() or {})["header"])
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    except (SafetensorError, KeyError, json.JSONDecodeError, OSError) as exc:
        raise InputError(f"{path}: not a complexity classifier file ({type(exc).__name__}: {exc}); {make}") from None
    if header.get("format") != FORMAT or header.get("kind") not in KINDS:
        raise InputError(f"{path}: format {header.get('format')!r} of kind {header.get('kind')!r}, expected "
                         f"{FORMAT!r} of {', '.join(KINDS)}; {make}")
    model = KIND_CLASSES[header["kind"]].restore(header, tensors)
    return ComplexityClassifier(header["kind"], model, frozenset(header["question_ids"]))


def train(cfg: "ComplexityClassifierConfig", labels_path: Path, out: Path) -> ComplexityClassifier:
    """Train the configured kind on the labels' training part, score it on the held-out part, save both."""
    rows = read_labels(Path(labels_path))
    questions, labels = [r["question"] for r in rows], [r["label"] for r in rows]
    train_idx, test_idx = split(labels, cfg.test_fraction, cfg.seed)
    trained = sorted({labels[i] for i in train_idx})
    if len(trained) < 2:
        raise InputError(f"{labels_path}: the labels are {distribution(labels)}: training needs questions of at "
                         f"least two labels. Label more questions (complexity_classifier.datasets)")
    fit_q, fit_y = [questions[i] for i in train_idx], [labels[i] for i in train_idx]
    if cfg.classifier == "t5":
        model = T5Classifier.fit(cfg.model, fit_q, fit_y, cfg.epochs, cfg.lr, cfg.batch_size, cfg.seed)
    else:
        model = MiniLMLogistic.fit(cfg.model, fit_q, fit_y, cfg.regularization)
    classifier = ComplexityClassifier(cfg.classifier, model, frozenset(r["id"] for r in rows))
    held_q, held_y = [questions[i] for i in test_idx], [labels[i] for i in test_idx]
    metrics = {"test": scores(held_y, classifier.predict(held_q)),
               "train": scores(fit_y, classifier.predict(fit_q)),
               "distribution": {"all": distribution(labels), "train": distribution(fit_y),
                                "test": distribution(held_y)},
               "held_out_ids": [rows[i]["id"] for i in test_idx],
               "majority_baseline": _majority(fit_y, held_y),
               "data": {"file": str(labels_path), "questions": len(rows)}}
    classifier.metrics = metrics
    classifier.save(out, settings=_settings(cfg))
    return classifier


def _majority(train_labels: Sequence[str], test_labels: Sequence[str]) -> dict:
    """The held-out accuracy of always answering the training set's most frequent label (ties to the
    cheaper one): what a classifier must beat to have learned anything from the questions."""
    counts = distribution(train_labels)
    label = max(LABELS, key=lambda k: (counts[k], -LABELS.index(k)))
    n = len(test_labels)
    return {"label": label, "accuracy": sum(y == label for y in test_labels) / n if n else None}


def _settings(cfg: "ComplexityClassifierConfig") -> dict:
    return {"datasets": dict(cfg.datasets), "strategies": dict(cfg.strategies), **cfg.training_settings()}
