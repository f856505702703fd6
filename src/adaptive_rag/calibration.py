"""Thresholds read off a calibration split, for every method type that has one (SeaKR's delta,
SUGAR's t1 and t2), and SeaKR's hyper-parameter sweep (the paper's Figure 3).

Why calibrate: published thresholds are on their authors' model's scale (SeaKR's delta = -6 is
Llama-2-7B's FFN-output scale), or not published at all (SUGAR's "cross-validated" t1, t2), so they
mean nothing for another model or estimator. `calibrate` runs the method as configured, its threshold
set aside, over a split that shares no question with the evaluation, and writes what the method's
type asks for (`Method.calibrate_batch` per batch, `Method.calibration_record` at the end) to
`data/calibration/<calibration dataset>/<method>.json`; a run with a calibrated threshold reads it.
The step knows no type: a type opts in with `Method.calibration_settings`.

The sweep reads SeaKR's first pseudo-steps once at k_max samples with the final state of every
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
from .io import atomic_write, read_jsonl, write_json
from .lm.base import Extras, SamplingParams
from .methods.base import Method
from .methods.parts.calibrated import score_answers
from .methods.registry import method_class, method_types
from .runner import method_context


def calibrating_types() -> list[str]:
    """The types that opted in (override `calibration_settings`), for the error that refuses the others."""
    own = Method.calibration_settings.__func__
    return [t for t in method_types() if method_class(t).calibration_settings.__func__ is not own]


def calibration_inputs(params: Params, dataset: str, method: str) -> dict[str, str]:
    """The files a configuration declares (`Method.inputs`) that its calibration on `dataset` reads too
    (Adaptive Retrieval's popularity), all but the calibration file it is making."""
    mcfg = params.method(method)
    cls = method_class(mcfg.type)
    settings = cls.calibration_settings(mcfg.settings_for(dataset))
    if settings is None:
        return {}
    own = {k: v for k, v in settings.items() if k != "calibration_dataset"}
    return cls.inputs(own, dataset, method)


def build(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None,
          index_dir: Path | None = None):
    """The method as configured, its threshold set aside (it is what is being calibrated), its
    questions, and how many of them it advances together (`generation.chunk_size`)."""
    from .lm.factory import build_model

    mcfg = params.method(method)
    cls = method_class(mcfg.type)
    settings = cls.calibration_settings(mcfg.settings_for(dataset))
    if settings is None:
        raise InputError(f"methods.{method}: type {mcfg.type!r} has no threshold to calibrate (types that "
                         f"have one: {', '.join(calibrating_types())})")
    retriever = None
    if cls.calibration_retrieves:  # the index the method's runs search (`retriever:` or retrieval.type)
        from .retrieval.factory import open_retriever

        kind = params.retriever_kind(dataset, method)
        retriever = open_retriever(kind, index_dir or Path(params.index_dir(kind)), params.retrieval.k1,
                                   params.retrieval.b)
    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file (run the splits step first)")]
    lm = build_model(params, model_dir, 0)
    inputs = {name: Path(path) for name, path in calibration_inputs(params, dataset, method).items()}
    return (cls(settings, method_context(params, dataset, lm, retriever, inputs)), examples,
            params.generation.chunk_size)


def _batches(examples: list, size: int):
    for start in range(0, len(examples), size):
        yield examples[start:start + size]


def calibrate(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None, out: Path,
              index_dir: Path | None = None) -> dict:
    from tqdm import tqdm

    runner, examples, size = build(params, dataset, method, split, model_dir, index_dir)
    if not examples:
        raise InputError(f"{split}: no questions to calibrate on")
    rows = []
    with tqdm(total=len(examples), desc=f"calibrate {dataset}/{method}", unit=" q") as bar:
        for batch in _batches(examples, size):
            rows.extend(runner.calibrate_batch(batch))
            bar.update(len(batch))
    record = {"dataset": dataset, "method": method, "model": runner.ctx.lm.identity(), "questions": len(examples),
              "ids": [e.id for e in examples], **runner.calibration_record(rows)}
    write_json(out, record)
    return record


def _seakr(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None):
    from .methods.seakr.seakr import SeaKR

    if not issubclass(method_class(params.method(method).type), SeaKR):
        raise InputError(f"methods.{method}: type {params.method(method).type!r} has no self-aware uncertainty "
                         f"to sweep (use a seakr configuration)")
    return build(params, dataset, method, split, model_dir)


def sweep(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None, k_max: int,
          csv_path: Path, figure: Path) -> list[dict]:
    """U at every k <= k_max and every layer for each question's first pseudo-step, with its correctness."""
    from tqdm import tqdm

    from .methods.parts.uncertainty import eigenscore
    from .methods.seakr.seakr import QuestionState

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
            plain = seakr.generate_answers([e.question for e in batch], [()] * len(batch))
            for example, sample_set, scores in zip(batch, sets, score_answers(batch, plain)):
                em, f1 = scores["em"], scores["f1"]
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

