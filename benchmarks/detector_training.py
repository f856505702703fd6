"""CPU cost and held-out AUC of training DioR's two detectors at demo scale, on synthetic data.

Not a test: it trains the default early detector (GRU over attribution sequences) and the default
real-time detector (MLP over hidden states) on seeded synthetic sets of the size the demo's detector
data will have, and prints the CPU seconds (training runs in one thread, so CPU time is what a job
costs, whatever else the machine is doing) and the held-out metrics. The synthetic signal is weak on
purpose: the question is whether the defaults learn in minutes, not how good a detector can be.

    python benchmarks/detector_training.py [--questions 3000] [--tokens 5000] [--width 576]
                                           [--epochs 30] [--lr 1e-3]

- Early: `--questions` attribution sequences of 8-30 tokens; a hallucinated question's attribution
  is drawn spread (Gamma shape 3), a correct one's concentrated (Gamma shape 0.3), then normalised.
- Real-time: `--tokens` labelled tokens in continuations of 5 tokens, one label per continuation;
  features are `--width` Gaussian dimensions (576: SmolLM2-135M's hidden size) with the label
  shifting 8 of them by 0.5.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from adaptive_rag.methods.dior import detectors  # noqa: E402


def early_data(n: int, rng) -> tuple[list, list]:
    seqs, labels = [], []
    for i in range(n):
        hallucinated = i % 2
        a = rng.gamma(3.0 if hallucinated else 0.3, size=int(rng.integers(8, 31))) + 1e-3
        seqs.append(a / a.sum())
        labels.append(hallucinated)
    return seqs, labels


def realtime_data(tokens: int, width: int, rng):
    units = tokens // 5
    labels = np.repeat(rng.integers(0, 2, units), 5)
    x = rng.standard_normal((labels.size, width)) + 0.5 * labels[:, None] * (np.arange(width) < 8)
    return x, labels, np.repeat(np.arange(units), 5)


def timed(train):
    start = time.process_time()
    detector = train()
    return detector, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--epochs", type=int, default=None, help="default: each detector's own")
    parser.add_argument("--lr", type=float, default=None, help="default: each detector's own (1e-3)")
    args = parser.parse_args()

    def settings(default: detectors.Training) -> detectors.Training:
        return detectors.Training(epochs=args.epochs or default.epochs, lr=args.lr or default.lr)

    rng = np.random.default_rng(0)
    seqs, labels = early_data(args.questions, rng)
    early, early_s = timed(lambda: detectors.train_early(seqs, labels, model="synthetic",
                                                         training=settings(detectors.EARLY_TRAINING)))
    x, y, units = realtime_data(args.tokens, args.width, rng)
    realtime, realtime_s = timed(lambda: detectors.train_realtime(x, y, units, model="synthetic",
                                                                  training=settings(detectors.REALTIME_TRAINING)))
    print(f"# detector training on {platform.processor() or platform.machine()}, one thread, CPU seconds")
    print("| detector | examples | epochs | lr | CPU s | test AUC | test accuracy | unit AUC |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for name, det, n, seconds in (("early (GRU)", early, args.questions, early_s),
                                  ("real-time (MLP)", realtime, args.tokens, realtime_s)):
        test, unit = det.metrics["test"], det.metrics.get("test_units", {}).get("auc")
        training = det.header["training"]
        print(f"| {name} | {n} | {training['epochs']} | {training['lr']:g} | {seconds:.1f} | {test['auc']:.3f} | "
              f"{test['accuracy']:.3f} | {'–' if unit is None else f'{unit:.3f}'} |")


if __name__ == "__main__":
    main()
