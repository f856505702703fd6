"""DioR's detectors (spec §5 acceptance test 7): trained on seeded synthetic data, a separable set
reaches AUC near 1 and a label-shuffled one stays near 0.5; training is byte-deterministic; a saved
detector reloads to the same predictions and refuses another model, width, kind or feature source.

The GRU tests use a smaller GRU than the default (same class, same code path) so they take seconds
on a busy 2-core machine; the default's shape is checked without training it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from adaptive_rag.errors import InputError  # noqa: E402
from adaptive_rag.methods.dior import detectors as d  # noqa: E402
from adaptive_rag.methods.dior.detector_nets import EarlyRNN, attribution_entropy  # noqa: E402

SMALL_GRU = d.EarlyArchitecture(hidden=16, layers=2)
GRU_TRAINING = d.Training(epochs=10, lr=1e-2, batch_size=32)
MLP_TRAINING = d.Training(epochs=20, lr=1e-3, batch_size=128)


def attributions(n: int, seed: int, shuffle: bool = False):
    """n sequences of 5-15 tokens: label 1 (hallucination) spread evenly, label 0 concentrated on
    one token (spec §5 test 7; the paper's A.1.1 story); `shuffle` permutes the labels."""
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for i in range(n):
        length, label = int(rng.integers(5, 16)), i % 2
        a = 1.0 + 0.2 * rng.random(length) if label else np.full(length, 0.02)
        if not label:
            a[rng.integers(length)] = 1.0
        seqs.append(a / a.sum())
        labels.append(label)
    return seqs, (rng.permutation(labels) if shuffle else np.array(labels))


def hidden_states(units: int, per_unit: int, width: int, seed: int, shift: float, shuffle: bool = False):
    """Token features of `units` continuations of `per_unit` labelled tokens each, one label per
    continuation: label 1 shifted by `shift` along 4 of `width` dimensions, plus noise."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(rng.integers(0, 2, units), per_unit)
    x = rng.standard_normal((labels.size, width)) + shift * labels[:, None] * (np.arange(width) < 4)
    x[:, 5] *= 100.0  # one dimension far larger than the rest, as in an LM's residual stream
    return x, (rng.permutation(labels) if shuffle else labels), np.repeat(np.arange(units), per_unit)


@pytest.fixture(scope="module")
def early():
    seqs, labels = attributions(200, seed=1)
    return d.train_early(seqs, labels, model="toy-lm", source={"target": "next-token-prob"},
                         architecture=SMALL_GRU, training=GRU_TRAINING)


@pytest.fixture(scope="module")
def realtime():
    x, y, units = hidden_states(300, 5, 16, seed=2, shift=3.0)
    return d.train_realtime(x, y, units, model="toy-lm", source={"layer": -1}, training=MLP_TRAINING)


def test_acceptance_7_early_gru_separates_concentrated_from_spread_attribution(early):
    test = early.metrics["test"]
    assert test["n"] == 40 and test["positives"] == 20  # 80/20, stratified
    assert test["auc"] > 0.95 and test["accuracy"] > 0.9
    seqs, labels = attributions(60, seed=7)  # fresh data
    p = early.predict(seqs)
    assert ((p > 0.5) == labels.astype(bool)).mean() > 0.9
    assert early.flags(seqs).tolist() == (p > 0.5).tolist()  # retrieve up front iff p(hallucination) > 0.5


def test_the_papers_scalar_entropy_switch_separates_it_too():
    seqs, labels = attributions(200, seed=1)
    detector = d.train_early(seqs, labels, model="toy-lm",
                             architecture=d.EarlyArchitecture(features="attribution-entropy"),
                             training=d.Training(epochs=30, lr=1e-2, batch_size=32))
    assert detector.metrics["test"]["auc"] > 0.95


def test_acceptance_7_realtime_mlp_on_separable_hidden_states(realtime):
    test = realtime.metrics["test"]
    assert test["auc"] > 0.95 and test["accuracy"] > 0.9
    units = realtime.metrics["test_units"]
    assert units["n"] == 60 and units["auc"] > 0.95  # Alg. 2's H_i per continuation
    x, y, _ = hidden_states(20, 5, 16, seed=8, shift=3.0)
    p = realtime.predict(x)
    assert ((p >= 0.5) == y.astype(bool)).mean() > 0.9
    assert realtime.flags(x).tolist() == (p < 0.5).tolist()  # flagged iff p(non-hallucination) < 0.5


def test_shuffled_labels_stay_near_chance():
    x, y, units = hidden_states(400, 5, 16, seed=3, shift=3.0, shuffle=True)
    mlp = d.train_realtime(x, y, units, model="toy-lm", training=MLP_TRAINING)
    assert abs(mlp.metrics["test"]["auc"] - 0.5) < 0.08  # 400 held-out tokens: standard error ~0.03
    seqs, labels = attributions(400, seed=4, shuffle=True)
    gru = d.train_early(seqs, labels, model="toy-lm", architecture=SMALL_GRU,
                        training=d.Training(epochs=5, lr=1e-2, batch_size=32))
    assert abs(gru.metrics["test"]["auc"] - 0.5) < 0.15  # 80 held-out questions: standard error ~0.065


def test_training_is_byte_deterministic_and_leaves_the_callers_rng_alone(tmp_path, early, realtime):
    seqs, labels = attributions(200, seed=1)
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    again = d.train_early(seqs, labels, model="toy-lm", source={"target": "next-token-prob"},
                          architecture=SMALL_GRU, training=GRU_TRAINING)
    assert torch.equal(torch.rand(3), before)  # the caller's generator was not advanced
    x, y, units = hidden_states(300, 5, 16, seed=2, shift=3.0)
    trained = {"early": early, "early-again": again, "realtime": realtime,
               "realtime-again": d.train_realtime(x, y, units, model="toy-lm", source={"layer": -1},
                                                  training=MLP_TRAINING),
               "realtime-seed-1": d.train_realtime(x, y, units, model="toy-lm", source={"layer": -1},
                                                   training=d.Training(epochs=20, lr=1e-3, batch_size=128, seed=1))}
    files = {name: detector.save(tmp_path / f"{name}.safetensors").read_bytes() for name, detector in trained.items()}
    assert files["early"] == files["early-again"] and files["realtime"] == files["realtime-again"]
    assert (tmp_path / "early.metrics.json").read_text() == (tmp_path / "early-again.metrics.json").read_text()
    assert files["realtime-seed-1"] != files["realtime"]


def test_saved_detectors_reload_to_the_same_predictions_with_their_metrics(tmp_path, early, realtime):
    seqs, _ = attributions(30, seed=9)
    x, _, _ = hidden_states(10, 3, 16, seed=9, shift=3.0)
    for detector, inputs, width in ((early, seqs, 1), (realtime, x, 16)):
        path = detector.save(tmp_path / f"{detector.kind}.safetensors")
        loaded = d.load(path, detector.kind, model="toy-lm", width=width)
        assert np.array_equal(loaded.predict(inputs), detector.predict(inputs))
        assert loaded.predict(inputs[:0]).shape == (0,)  # nothing to judge
        assert loaded.header == detector.header and loaded.header["positive"] == d.POSITIVE[detector.kind]
        saved = json.loads(d.metrics_path(path).read_text())
        assert saved["metrics"]["test"]["auc"] == detector.metrics["test"]["auc"] == loaded.metrics["test"]["auc"]
        assert saved["header"]["model"] == "toy-lm" and saved["header"]["training"]["seed"] == 0
    assert d.metrics_path(tmp_path / "early.safetensors").name == "early.metrics.json"


def test_load_refuses_another_model_width_kind_or_source(tmp_path, realtime):
    path = realtime.save(tmp_path / "rt.safetensors")
    with pytest.raises(InputError, match=r"rt.safetensors: .* trained for model 'toy-lm', not 'SmolLM2'"):
        d.load(path, "realtime", model="SmolLM2")
    with pytest.raises(InputError, match="trained for width 16, not 576"):
        d.load(path, "realtime", width=576)
    with pytest.raises(InputError, match="trained for kind 'realtime', not 'early'"):
        d.load(path, "early")
    with pytest.raises(InputError, match="features come from layer -1, but this run computes them with layer 12"):
        d.load(path, "realtime", source={"layer": 12})
    with pytest.raises(InputError, match="realtime detector not found: .*missing.safetensors"):
        d.load(tmp_path / "missing.safetensors", "realtime")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="junk.safetensors: not a detector weights file"):
        d.load(tmp_path / "junk.safetensors", "realtime")
    with pytest.raises(ValueError, match="kind must be one of early, realtime"):
        d.load(path, "late")
    with pytest.raises(ValueError, match=r"shape \[tokens, 16\]"):
        realtime.predict(np.zeros((2, 8)))


def test_bad_training_data_is_refused_naming_the_problem():
    seqs, labels = attributions(20, seed=5)
    with pytest.raises(ValueError, match="attribution sequence 3: .* sum to 0.5"):
        d.train_early(seqs[:3] + [seqs[3] / 2] + seqs[4:], labels, model="m")
    with pytest.raises(ValueError, match="attribution sequence 0: expected a non-empty"):
        d.train_early([[]], [0], model="m")
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        d.train_early(seqs, [2] * 20, model="m")
    with pytest.raises(ValueError, match="20 examples but 19 labels"):
        d.train_early(seqs, labels[:19], model="m")
    with pytest.raises(ValueError, match="need at least 2 units of label 1"):
        d.train_early(seqs, [0] * 19 + [1], model="m")
    with pytest.raises(ValueError, match="5 tokens but 4 unit ids"):
        d.train_realtime(np.zeros((5, 3)), [0, 1, 0, 1, 0], [0, 1, 2, 3], model="m")
    with pytest.raises(ValueError, match="NaN or infinite"):
        d.train_realtime(np.full((4, 3), np.nan), [0, 1, 0, 1], [0, 1, 2, 3], model="m")
    with pytest.raises(ValueError, match="early features must be one of"):
        d.EarlyArchitecture(features="entropy")
    with pytest.raises(ValueError, match="test_fraction"):
        d.Training(epochs=1, lr=1e-3, test_fraction=1.0)


def test_split_holds_out_whole_units_stratified_and_seeded():
    units = [u for u in range(50) for _ in range(3)]
    labels = np.array([1 if u < 30 else 0 for u in units])
    labels[3 * 10 + 1] = 0  # unit 10 holds one hallucinated token: the unit counts as label 0
    train, test = d.split(units, labels, 0.2, seed=0)
    held = {units[i] for i in test}
    assert held.isdisjoint(units[i] for i in train) and sorted(np.concatenate([train, test])) == list(range(150))
    assert len(held & set(range(30)) - {10}) == round(0.2 * 29) and len(held - set(range(30)) | held & {10}) == 4
    again = d.split(units, labels, 0.2, seed=0)
    assert np.array_equal(again[1], test) and not np.array_equal(d.split(units, labels, 0.2, seed=1)[1], test)


def test_calibration_error_by_hand():
    p, y = np.array([0.05, 0.15, 0.95, 0.95]), np.array([0, 0, 1, 0])
    # bins 0, 1 and 9: 1/4·0.05 + 1/4·0.15 + 2/4·|0.5 - 0.95|
    assert d.calibration_error(p, y) == pytest.approx(0.0125 + 0.0375 + 0.225)
    assert d.calibration_error(np.array([1.0, 0.0]), np.array([1, 0])) == 0.0  # p = 1 falls in the last bin


def test_attribution_entropy_by_hand():
    """Eq. 6 on the spec's numbers: a = [1/3, 0, 2/3] -> 0.636514; uniform over 5 -> ln 5; one-hot -> 0."""
    seqs = [np.array([1 / 3, 0, 2 / 3]), np.full(5, 0.2), np.array([0.0, 1.0, 0.0, 0.0])]
    padded, lengths = d._padded([s.astype(np.float32) for s in seqs])
    h = attribution_entropy(padded, lengths).double().numpy()
    assert h == pytest.approx([0.636514, math.log(5), 0.0], abs=1e-6)


def test_the_default_early_detector_is_the_reference_gru():
    net = d._build({"kind": "early", "architecture": asdict(d.EarlyArchitecture())})
    assert isinstance(net, EarlyRNN)
    gru = net.gru
    assert (gru.input_size, gru.hidden_size, gru.num_layers, gru.dropout, gru.bidirectional) == (1, 128, 4, 0.25, False)
    assert (net.linear.in_features, net.linear.out_features) == (128, 2)
    assert d.EarlyArchitecture() == d.EarlyArchitecture("attribution-sequence", 128, 4, 0.25)
    assert d.RealtimeArchitecture() == d.RealtimeArchitecture((256, 128, 64), 0.5)
    assert (d.EARLY_TRAINING.weight_decay, d.EARLY_TRAINING.batch_size, d.EARLY_TRAINING.test_fraction) == (0.01, 512, 0.2)
