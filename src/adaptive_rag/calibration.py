"""SeaKR's threshold delta, calibrated on data, and its hyper-parameter sweep (the paper's Figure 3).

Why calibrate: the published delta = -6 is on Llama-2-7B's FFN-output scale (U's floor is ln alpha =
-6.91, and where the samples' states spread depends on the model's norms), so it means nothing for
another model or estimator. The paper searched delta on held-out data (3,000 NQ-train questions);
`calibrate` does the same on a split that shares no question with the evaluation: for each question,
the first pseudo-step's U exactly as the method computes it, and whether the model's plain
chain-of-thought answer (no retrieval) is right. A question whose own answer is wrong should retrieve,
so delta is read two ways: the grid value whose "U > delta" best predicts a wrong answer (F1 of that
prediction; ties to the larger delta, which retrieves less), and the value giving a target retrieval
rate. `delta: calibrated` picks one (`calibration_rule`).

The sweep reads the same first pseudo-steps once at k_max samples with the final state of every
layer: the stored Grams give U for every k <= k_max (prefixes) and every layer, which is panels (b)
k and (c) layer of Figure 3 (AUROC of U for a wrong answer: the paper's axes are not in our copy),
and (d) the share of right answers per U bin. Panel (a), recall size N against F1, needs full runs
and is the `seakr-recall` ablation.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from .config import Params
from .data.datasets import Example
from .errors import InputError
from .evaluation.answer import extract_answer
from .evaluation.metrics import score_answer
from .io import atomic_write, read_jsonl, write_json
from .lm.base import Extras, SamplingParams
from .methods.base import Context
from .methods.registry import method_class
from .prompts.fewshot import load_exemplars

RATES = (0.25, 0.5, 0.75)


def _seakr(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None):
    """The method as configured (its threshold set aside: it is what is being calibrated), its questions
    and its model."""
    from .lm.factory import build_model
    from .methods.seakr import SeaKR

    mcfg = params.method(method)
    cls = method_class(mcfg.type)
    if not issubclass(cls, SeaKR):
        raise InputError(f"methods.{method}: type {mcfg.type!r} has no self-aware uncertainty to calibrate "
                         f"(use a seakr configuration)")
    ds = params.dataset(dataset)
    settings = {**mcfg.settings_for(dataset), "delta": 0.0}
    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file (run the splits step first)")]
    lm = build_model(params, model_dir, 0)
    context = Context(lm=lm, exemplars=load_exemplars(ds.exemplars, ds.num_exemplars),
                      prompt_format=params.model.prompt_format,
                      max_new_tokens=ds.max_new_tokens or params.generation.max_new_tokens,
                      answer_fallback_tokens=params.generation.answer_fallback_tokens)
    return SeaKR(settings, context), examples, params.generation.batch_size


def _batches(examples: list, size: int):
    for start in range(0, len(examples), size):
        yield examples[start:start + size]


def _correct(method, batch: list[Example]) -> list[tuple[float, float]]:
    """(EM, F1) of the model's own chain-of-thought answer, without retrieval (the wo-RAG prompt)."""
    answers = method.generate_answers([e.question for e in batch], [()] * len(batch))
    out = []
    for example, answer in zip(batch, answers):
        scores = score_answer(extract_answer(answer.output)[0], example.answers, example.answer_type)
        out.append((scores["em"], scores["f1"]))
    return out


def calibrate(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None, out: Path) -> dict:
    from tqdm import tqdm

    from .methods.seakr import QuestionState, threshold_for_rate

    seakr, examples, size = _seakr(params, dataset, method, split, model_dir)
    if not examples:
        raise InputError(f"{split}: no questions to calibrate on")
    u, em, f1 = [], [], []
    with tqdm(total=len(examples), desc=f"calibrate {dataset}/{method}", unit=" q") as bar:
        for batch in _batches(examples, size):
            states = [QuestionState(e, None) for e in batch]
            u.extend(a.u for a in seakr.first_step(states))
            for e_, f_ in _correct(seakr, batch):
                em.append(e_)
                f1.append(f_)
            bar.update(len(batch))
    wrong = [score == 0.0 for score in em]
    grid = threshold_grid(u, wrong)
    best = max(grid, key=lambda row: (row["f1"], row["delta"]))
    record = {
        "dataset": dataset, "method": method, "estimator": seakr.settings["estimator"],
        "settings": {k: v for k, v in seakr.settings.items() if k != "delta"},
        "model": seakr.ctx.lm.identity(), "questions": len(examples), "ids": [e.id for e in examples],
        "u": u, "em": em, "f1": f1, "grid": grid,
        "thresholds": {"best-f1": best["delta"],
                       **{f"rate-{rate}": threshold_for_rate(u, rate) for rate in RATES}},
        "note": "delta: U > delta retrieves. best-f1: F1 of 'U > delta' predicting a wrong (EM 0) "
                "no-retrieval answer; rate-r: a fraction r of these questions would retrieve at the first step",
    }
    write_json(out, record)
    return record


def threshold_grid(u: list[float], wrong: list[bool]) -> list[dict]:
    """Every distinct cut (each observed U, and one below all): retrieval rate and how well "U > delta"
    finds the questions the model answers wrongly on its own."""
    finite = sorted({v for v in u if math.isfinite(v)})
    cuts = ([finite[0] - 1.0] if finite else [0.0]) + finite
    rows = []
    for delta in cuts:
        predicted = [v > delta for v in u]
        tp = sum(p and w for p, w in zip(predicted, wrong))
        fp = sum(p and not w for p, w in zip(predicted, wrong))
        fn = sum(w and not p for p, w in zip(predicted, wrong))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append({"delta": delta, "retrieval_rate": sum(predicted) / len(u), "precision": precision,
                     "recall": recall, "f1": f1})
    return rows


def sweep(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None, k_max: int,
          csv_path: Path, figure: Path) -> list[dict]:
    """U at every k <= k_max and every layer for each question's first pseudo-step, with its correctness."""
    from tqdm import tqdm

    from .methods.parts.uncertainty import eigenscore
    from .methods.seakr import QuestionState

    seakr, examples, size = _seakr(params, dataset, method, split, model_dir)
    layers = tuple(range(1, seakr.ctx.lm.num_layers + 1))
    extras = Extras(final_layers=layers, final_source=seakr.settings["hidden_source"])
    sampling = SamplingParams(n=k_max, seed=seakr.settings["seed"])
    rows = []
    with tqdm(total=len(examples), desc=f"sweep {dataset}/{method}", unit=" q") as bar:
        for batch in _batches(examples, size):
            states = [QuestionState(e, None) for e in batch]
            prompts, stops = seakr.pseudo_prompts(states)
            by_stop: dict = {}
            for i, stop in enumerate(stops):
                by_stop.setdefault(stop, []).append(i)
            sets = [None] * len(batch)
            for stop, index in by_stop.items():
                for i, s in zip(index, seakr.ctx.lm.sample_batch([prompts[i] for i in index], sampling,
                                                                 seakr.ctx.max_new_tokens, stop, extras)):
                    sets[i] = s
            for example, sample_set, (em, f1) in zip(batch, sets, _correct(seakr, batch)):
                texts = [c.text for c in sample_set.samples]
                for k in range(2, k_max + 1):
                    kept = [j for j in range(k) if texts[j].strip()]
                    for layer in layers:
                        value = (eigenscore(sample_set.grams[str(layer)], seakr.settings["alpha"], kept)
                                 if kept else math.inf)
                        rows.append({"id": example.id, "k": k, "layer": layer, "u": value, "em": em, "f1": f1})
            bar.update(len(batch))
    with atomic_write(csv_path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "k", "layer", "u", "em", "f1"])
        writer.writeheader()
        writer.writerows(rows)
    plot_sweep(rows, seakr.settings["k"], seakr.layer, figure, method)
    return rows


def u_bins(u: list[float], right: list[bool], bins: int = 5) -> tuple[list[float], list[float], list[int], float]:
    """Quantile bins of U (each question in exactly one: [lo, hi), the last closed): centre, share of
    right answers and count per non-empty bin, and a bar width."""
    import numpy as np

    values = np.asarray(u, dtype=np.float64)
    edges = np.quantile(values, np.linspace(0, 1, min(bins, len(values)) + 1))
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    centres, shares, counts = [], [], []
    for b in range(len(edges) - 1):
        inside = [ok for ok, i in zip(right, index) if i == b]
        if inside:
            centres.append(float(edges[b] + edges[b + 1]) / 2)
            shares.append(sum(inside) / len(inside))
            counts.append(len(inside))
    return centres, shares, counts, float(edges[-1] - edges[0]) / (len(centres) + 1) * 0.8


def plot_sweep(rows: list[dict], k: int, layer: int, path: Path, method: str) -> None:
    """Figure 3 (b) AUROC vs k at the method's layer, (c) AUROC vs layer at its k, (d) right answers per U bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    from .methods.parts.uncertainty import auroc
    from .reports.figures import save

    def curve(key, fixed, value):
        points = sorted({r[key] for r in rows if r[fixed] == value})
        return points, [auroc([r["u"] for r in rows if r[key] == p and r[fixed] == value],
                              [r["em"] == 0.0 for r in rows if r[key] == p and r[fixed] == value]) for p in points]

    sns.set_theme(style="whitegrid")
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    ks, by_k = curve("k", "layer", layer)
    axes[0].plot(ks, by_k, marker="o")
    axes[0].set(xlabel="k (samples in the Gram)", ylabel="AUROC of U for a wrong answer",
                title=f"(b) k, at layer {layer}")
    ls, by_layer = curve("layer", "k", k)
    axes[1].plot(ls, by_layer, marker="o")
    axes[1].set(xlabel="layer (1-based)", title=f"(c) layer, at k = {k}")
    chosen = [r for r in rows if r["k"] == k and r["layer"] == layer and math.isfinite(r["u"])]
    if chosen:
        centres, shares, counts, width = u_bins([r["u"] for r in chosen], [r["em"] > 0 for r in chosen])
        axes[2].bar(centres, shares, width=width)
        for x, y, n in zip(centres, shares, counts):
            axes[2].annotate(f"n={n}", (x, y), ha="center", va="bottom", fontsize=8)
    axes[2].set(xlabel="U (first pseudo-step)", ylabel="answered right without retrieval (EM)",
                title=f"(d) U bins, k = {k}, layer {layer}", ylim=(0, 1))
    figure.suptitle(f"SeaKR Figure 3 (b)-(d), {method}: {len({r['id'] for r in rows})} questions")
    save(figure, path)

