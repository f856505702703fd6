"""Training the RaDIO detector (`adaptive-rag train-detector --kind radio`) as src/MLP_train/MLP.py of
the reference code (github ghh1125/RaDIO) trains it, on the data `detector_data` made.

Features (`extract_features`): TF-IDF vectors (at most 1000 terms, English stop words left out) of a
passage's first text, its original text and its title, side by side (3 x 1000), reduced to two
dimensions by a PCA fitted on the training passages. Model: `detector.build_net()`, MLP(2, 64, 1) with
a sigmoid. Training: binary cross-entropy, Adam at lr 0.001, batches of 32 in a shuffled order, 10
epochs; after each epoch the validation accuracy (score > 0.5) is measured and the weights of the
best epoch so far (strictly better) are kept. The held-out test passages give the accuracy and the AUC
written beside the weights.

Where this differs, named: the reference fits the TF-IDF vocabulary on each split's own texts
(`extract_features` is called per split), so a test column is another word than the same training
column, and a split with fewer than 1000 distinct terms gives a narrower matrix that the PCA refuses;
here the vocabulary is the training split's, used for all three. The reference keeps no weights when
no epoch beats a validation accuracy of 0; here the first epoch then counts as the best.
Training is seeded (initialisation and batch order) and runs in one CPU thread, as DioR's detectors do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import InputError
from ...io import read_jsonl
from ..parts.uncertainty import auroc
from .detector import FORMAT, RadioDetector, build_net

MAX_FEATURES = 1000  # MLP.py: TfidfVectorizer(max_features=1000, stop_words='english')
EPOCHS, LR, BATCH = 10, 1e-3, 32  # MLP.py: train_model(num_epochs=10), Adam(lr=0.001), DataLoader(batch_size=32)


def features(records: dict[str, list[dict]], seed: int) -> dict[str, np.ndarray]:
    """[passages, 2] per split: the three TF-IDF blocks, PCA-reduced (both fitted on `train`)."""
    from sklearn.decomposition import PCA
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(max_features=MAX_FEATURES, stop_words="english")
    vectorizer.fit([r["texts"][0] for r in records["train"]])

    def blocks(rows):
        return np.concatenate([vectorizer.transform([r[key][0] if key == "texts" else r[key] for r in rows]).toarray()
                               for key in ("texts", "original_text", "title")], axis=1)

    pca = PCA(n_components=2, random_state=seed).fit(blocks(records["train"]))
    return {split: pca.transform(blocks(rows)).astype(np.float32) if rows else np.zeros((0, 2), np.float32)
            for split, rows in records.items()}


def _accuracy(scores: np.ndarray, labels: np.ndarray) -> float | None:
    return float(((scores > 0.5) == (labels == 1)).mean()) if labels.size else None


def train_radio(records: list[dict], model: str, source: dict, seed: int, epochs: int = EPOCHS, lr: float = LR,
                batch_size: int = BATCH, data: str = "radio detector data") -> RadioDetector:
    """The trained detector with its validation curve and held-out metrics."""
    import torch

    by_split = {s: [r for r in records if r["split"] == s] for s in ("train", "valid", "test")}
    train_labels = [r["label"] for r in by_split["train"]]
    if len(set(train_labels)) < 2:
        raise InputError(f"{data}: the training passages hold {train_labels.count(0)} labelled 0 and "
                         f"{train_labels.count(1)} labelled 1; training needs both. Use more passages "
                         f"(detectors.radio.max_passages) or a larger top_k or window")
    x = features(by_split, seed)
    y = {s: np.asarray([r["label"] for r in rows], dtype=np.float32) for s, rows in by_split.items()}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = build_net()
            optimiser = torch.optim.Adam(net.parameters(), lr=lr)
            order_rng = torch.Generator().manual_seed(seed)
            inputs, labels = torch.from_numpy(x["train"]), torch.from_numpy(y["train"]).unsqueeze(1)
            best, best_state, best_epoch, curve = -1.0, None, 0, []
            for epoch in range(epochs):
                net.train()
                order = torch.randperm(len(inputs), generator=order_rng)
                for start in range(0, len(order), batch_size):
                    batch = order[start:start + batch_size]
                    optimiser.zero_grad()
                    loss = torch.nn.functional.binary_cross_entropy(net(inputs[batch]), labels[batch])
                    loss.backward()
                    optimiser.step()
                detector = RadioDetector(net, {})
                accuracy = _accuracy(np.asarray(detector.scores(x["valid"])), y["valid"])
                curve.append(accuracy)
                if (accuracy if accuracy is not None else 0.0) > best:
                    best = accuracy if accuracy is not None else 0.0
                    best_state = {k: v.clone() for k, v in net.state_dict().items()}
                    best_epoch = epoch + 1
            net.load_state_dict(best_state)
    finally:
        torch.set_num_threads(threads)
    header = {"format": FORMAT, "kind": "radio", "model": model, "source": dict(source),
              "features": {"train": "tfidf-pca2", "run": "token-ids"},
              "training": {"epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed}}
    detector = RadioDetector(net, header)
    scores = np.asarray(detector.scores(x["test"]))
    area = auroc(scores, y["test"] == 1) if y["test"].size else float("nan")
    detector.metrics = {
        "valid": {"accuracy_per_epoch": curve, "best_epoch": best_epoch, "n": int(y["valid"].size)},
        "test": {"accuracy": _accuracy(scores, y["test"]), "auc": None if area != area else float(area),
                 "n": int(y["test"].size), "labelled_1": int(y["test"].sum())},
        "train": {"n": int(y["train"].size), "labelled_1": int(y["train"].sum())},
    }
    return detector


def train_radio_from(params, data: Path) -> RadioDetector:
    """`train-detector --kind radio`: the data's records and meta, the settings of `detectors.radio`."""
    from ..dior.detector_data import read_meta

    cfg = params.detectors.radio
    meta = read_meta(data, "radio")
    detector = train_radio(read_jsonl(data, "RaDIO detector data"), meta["model"], meta["source"], cfg.seed,
                           cfg.epochs, cfg.lr, cfg.batch_size, str(data))
    detector.metrics["data"] = {"file": str(data), "records": meta["records"], "labelled_1": meta["labelled_1"]}
    return detector
