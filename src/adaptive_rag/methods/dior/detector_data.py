"""The training data of DioR's two detectors (`adaptive-rag detector-data`; paper §3.1, Alg. 1-2, App. A;
spec §3 item 3), and the Figures 4-9 statistics that come from the same pass.

Early detection (Alg. 1), per training question:
- the prompt is `bare_question(question, prompt_format)`, the one the `dior` method attributes at run
  time (`raw`, the reference's plain text, or `chat`: the question alone in the chat template, for
  instruct models that answer plain text with an end of turn; the detector's header records which);
- the model's greedy answer to that prompt, `max_new_tokens` long without stop strings; the answer is
  its first non-empty line (a bare question is often continued with a line break first, which a
  "stop at a newline" rule would turn into an empty answer);
- label 1 (hallucination) unless a gold answer or alias is contained in the answer, as whole words
  after SQuAD normalisation (`evaluation.metrics.contains_gold`; Snyder et al. check aliases too);
- `lm.attribution(prompt, IGSettings())` at its defaults (the call cache keeps it). Its target is the
  greedy next token, i.e. the answer's first token, so label and attribution describe one generation;
  each record says whether the three first tokens (IG target, generation, `first_token` argmax)
  agree, and the meta file counts any that do not;
- from `lm.first_token(prompt, activation_layer)` (one uncached forward): the first token's softmax
  probability, the output entropy of that distribution (Fig. 5, 8), and the decoder layer's MLP
  up-projection (`mlp.up_proj` in Llama layouts) at the prompt's last position, i.e. in the pass that
  generates the first token (Fig. 6). Snyder et al. hook the same module; their code reads it (and the
  logits) one position later, at the first generated token, and plots layer L-2 (`activation_layer:
  -2`, our default) where DioR's caption says "first layer".
- Fig. 6's activation entropy is Snyder's recipe over the whole set: each question's activation vector
  minus the per-feature minimum over all questions, normalised to a distribution, its entropy, then
  min-max scaled over the questions to [0, 1]. It is relative to the set it was built with.
- Fig. 9: a 2-D PCA of the first-token softmax vectors (randomised SVD, seed 0), fitted here so that
  no vocabulary-wide vector is stored; only the coordinates are.

Training questions must be unseen by every evaluation: the config refuses a training dataset that a
run is scored or calibrated on, and `check_disjoint` refuses a training question whose normalised
text is in the sample of any other dataset of `datasets:` (stricter than "the datasets a `dior` run
uses": any dataset the profile defines, read from its file and sampled as its split is).

Real-time detection (Alg. 2): a seeded sample of `max_passages` passages of a DPR TSV; in each, one
seeded cut before a named entity that does not start a sentence (`realtime_labels.truncations`); the
model continues the paper's prompt with the cut text as the start of its answer (chat: the assistant
turn begins with it; raw: the prompt ends with it), with `Extras(hidden_layer=-1)`; the continuation is
labelled by `label_continuation` with the bundled MiniLM cosine at `entity_threshold`. The last-layer
hidden state of every labelled token is kept, with its label and its continuation's index (the unit
the held-out split keeps whole).

Reruns are cheap with the call cache (`generation.cache`): greedy generations (with their hidden
states) and attributions are served from it; only `first_token` (one forward per question), NER and
the encoder run again. Without a cache everything is recomputed.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict
from pathlib import Path
from typing import Callable, TYPE_CHECKING

import numpy as np

from ...data.datasets import Example, load_dataset
from ...data.sampling import sample
from ...errors import InputError
from ...evaluation.metrics import contains_gold, normalize_answer
from ...io import atomic_write, read_jsonl, sha256_file, write_json, write_jsonl
from ...lm.base import GRADIENTS, HIDDEN_STATES, LOGITS, Extras, IGSettings, Prompt, require
from .attribution import attribution_entropy, bare_question, token_scores
from .detectors import REALTIME_HIDDEN_LAYER as HIDDEN_LAYER, data_sidecars

if TYPE_CHECKING:  # the steps take the workflow's params; the method layer never imports config
    from ...config import Params

log = logging.getLogger("adaptive_rag.detectors")

PCA_SEED = 0  # Fig. 9's randomised SVD: fixed, so that no training setting changes the data


# ---- disjointness ------------------------------------------------------------------------------------

def dataset_sample(params: Params, name: str) -> list[Example]:
    """A dataset's questions as its split step samples them (`cmd_split`), from its file."""
    ds = params.dataset(name)
    cfg = ds.sample
    return sample(load_dataset(ds.format, ds.path), cfg.size, cfg.seed, cfg.mode, cfg.skip)


def check_disjoint(training: dict[str, tuple[str, list[Example]]],
                   others: dict[str, tuple[str, list[Example]]]) -> None:
    """No training question (normalised text) is a question of another dataset's sample, and none is
    asked twice across the training sets (a repeat would sit on both sides of the held-out split).
    Both maps: dataset -> (its file, its questions)."""
    seen: dict[str, tuple[str, str, Example]] = {}
    for name, (path, examples) in training.items():
        for example in examples:
            key = normalize_answer(example.question)
            if key in seen:
                other, other_path, first = seen[key]
                raise InputError(f"{path}: training question {example.id!r} ({example.question!r}) of dataset "
                                 f"{name} repeats {first.id!r} of training dataset {other} ({other_path})")
            seen[key] = (name, path, example)
    for name, (path, examples) in others.items():
        for example in examples:
            hit = seen.get(normalize_answer(example.question))
            if hit is not None:
                train_name, train_path, train = hit
                raise InputError(
                    f"{train_path}: training question {train.id!r} ({train.question!r}) of detectors.early dataset "
                    f"{train_name} is also question {example.id!r} of dataset {name} ({path}); the early "
                    f"detector must not train on a question that is evaluated: sample the training set "
                    f"disjointly (e.g. the same file with `sample.skip`) or drop {name} from datasets:")


# ---- early detection ---------------------------------------------------------------------------------

def answer_line(text: str) -> str:
    """The first non-empty line of a continuation, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def output_entropy(probabilities: np.ndarray) -> float:
    """-sum p ln p of a next-token distribution, in float64 (0 ln 0 := 0)."""
    p = np.asarray(probabilities, dtype=np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def activation_entropies(activations: np.ndarray) -> np.ndarray:
    """Snyder et al.'s activation entropy (their Fig. 6 code), over a set of questions [n, features]:
    shift each feature by its minimum over the set, normalise each row to sum 1, take its entropy,
    min-max scale the entropies to [0, 1] over the set (all 0 when they are equal)."""
    a = np.asarray(activations, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"activations must be a non-empty [questions, features] matrix; got shape {a.shape}")
    shifted = a - a.min(axis=0, keepdims=True)
    totals = shifted.sum(axis=1, keepdims=True)
    p = np.divide(shifted, totals, out=np.zeros_like(shifted), where=totals > 0)
    logs = np.log(p, out=np.zeros_like(p), where=p > 0)
    h = -(p * logs).sum(axis=1)
    span = h.max() - h.min()
    return (h - h.min()) / span if span > 0 else np.zeros_like(h)


def softmax_pca(vectors: np.ndarray, seed: int) -> tuple[np.ndarray, list[float]]:
    """2-D PCA coordinates of the first-token softmax vectors [n, vocab], and the explained variance
    ratios. Randomised SVD (seeded) keeps it fast at vocabulary width."""
    from sklearn.decomposition import PCA

    if vectors.shape[0] < 3:
        raise InputError(f"a 2-D PCA needs at least 3 questions; got {vectors.shape[0]}")
    pca = PCA(n_components=2, svd_solver="randomized", random_state=seed)
    coords = pca.fit_transform(vectors)
    return coords, [float(v) for v in pca.explained_variance_ratio_]


def _training_sets(params: Params, splits: dict[str, Path]) -> dict[str, tuple[str, list[Example]]]:
    wanted = params.detectors.early.datasets
    if list(splits) != list(wanted):
        raise InputError(f"detector-data --kind early: got splits for {', '.join(splits) or 'no dataset'}; "
                         f"detectors.early.datasets is {', '.join(wanted)} (one split each, in that order)")
    return {name: (str(path), [Example.from_dict(r) for r in read_jsonl(path, "split file (run the splits step "
                                                                             "first)")])
            for name, path in splits.items()}


def build_early(params: Params, lm, splits: dict[str, Path], out: Path) -> dict:
    """The early detector's data (see the module docstring): `out` (JSONL, one record per question) and
    its meta file beside it. Returns the meta record."""
    from tqdm import tqdm

    cfg = params.detectors.early
    training = _training_sets(params, splits)
    others = {name: (ds.path, dataset_sample(params, name)) for name, ds in params.datasets.items()
              if name not in training}
    check_disjoint(training, others)  # before any model work
    require(lm.capabilities, {GRADIENTS, LOGITS, HIDDEN_STATES}, "detector-data --kind early", params.model.backend)
    questions = [(name, e) for name, (_, examples) in training.items() for e in examples]
    if len(questions) < 3:
        raise InputError(f"{', '.join(str(p) for p in splits.values())}: {len(questions)} training questions; the "
                         f"early detector's data needs at least 3 (and both labels)")
    settings = IGSettings()
    records, probabilities, activations = [], None, []
    layer = None
    for index, (name, example) in enumerate(tqdm(questions, desc="early-detection data", unit=" q")):
        prompt = bare_question(example.question, cfg.prompt_format)
        [generation] = lm.generate([prompt], cfg.max_new_tokens)
        attribution = lm.attribution(prompt, settings)
        first = lm.first_token(prompt, cfg.activation_layer)
        if probabilities is None:
            probabilities = np.empty((len(questions), first.probabilities.size), dtype=np.float32)
        probabilities[index] = first.probabilities
        activations.append(first.activations)
        layer = first.layer
        answer = answer_line(generation.text)
        correct = any(contains_gold(answer, gold) for gold in example.answers)
        generated = generation.token_ids[0] if generation.token_ids else None
        scores = token_scores(attribution)
        records.append({
            "id": example.id, "dataset": name, "question": example.question, "answers": example.answers,
            "output": generation.text, "answer": answer, "label": 0 if correct else 1,
            "tokens": attribution.tokens, "scores": [float(v) for v in scores], "target": attribution.target,
            # completeness: sum of IG minus F(x) - F(0), the quadrature error (docs/attribution.md)
            "ig_error": float(attribution.dot.sum() - (attribution.value - attribution.baseline_value)),
            "ig_value": float(attribution.value),
            "first_token": generation.tokens[0] if generation.tokens else "",
            "agrees": attribution.target_id == first.token_id and generated in (first.token_id, None),
            "probability": float(first.probabilities[first.token_id]),
            "entropies": {"output": output_entropy(first.probabilities),
                          "attribution": attribution_entropy(attribution.l2)},
        })
    for record, value in zip(records, activation_entropies(np.stack(activations))):
        record["entropies"]["activation"] = float(value)
    coords, explained = softmax_pca(probabilities, PCA_SEED)
    for record, (x, y) in zip(records, coords):
        record["pca"] = [float(x), float(y)]
    write_jsonl(out, records)
    hallucinated = sum(r["label"] for r in records)
    disagreements = sum(not r["agrees"] for r in records)
    if disagreements:
        log.warning("%d of %d questions: the IG target, the generated first token and the first-token argmax "
                    "are not all the same token (near-ties); their records say `agrees: false`",
                    disagreements, len(records))
    identity = lm.identity()
    meta = {
        "kind": "early", "model": identity["model"], "identity": identity,
        "source": {"prompt": "bare_question", "prompt_format": cfg.prompt_format, "attribution": asdict(settings)},
        "datasets": {name: {"split": path, "questions": len(examples)} for name, (path, examples) in training.items()},
        "checked_against": {name: {"file": path, "questions": len(examples)} for name, (path, examples) in
                            others.items()},
        "questions": len(records), "hallucinated": hallucinated, "correct": len(records) - hallucinated,
        "disagreements": disagreements, "max_new_tokens": cfg.max_new_tokens, "activation_layer": layer,
        "activation_entropy": "Snyder et al.: per-feature min over the set subtracted, row entropy, min-max scaled",
        "pca": {"explained_variance_ratio": explained, "seed": PCA_SEED},
    }
    write_json(data_sidecars(out)[0], meta)
    return meta


# ---- real-time detection -----------------------------------------------------------------------------

def continuation_prompt(truncation, prompt_format: str) -> Prompt:
    """The paper's prompt for one cut, continued from the cut: chat puts the instruction in the user turn
    and starts the assistant turn with the text before the cut; raw text already ends with it."""
    if prompt_format == "chat":
        return Prompt.chat([{"role": "user", "content": truncation.prompt}], prefix=truncation.prefix)
    return Prompt(text=truncation.prompt)


def sampled_passages(path, size: int | None, seed: int) -> list:
    """The passages `sample(list(iter_passages(path)), size, seed)` gives, in its order, holding only the
    sampled ones in memory: the DPR dump has 21M passages (tens of GB as Python objects), so one pass
    counts them and a second keeps the chosen indices."""
    from ...data.corpus import iter_passages

    count = sum(1 for _ in iter_passages(path))
    rank_of = {index: rank for rank, index in enumerate(sample(range(count), size, seed))}
    picked = [None] * len(rank_of)
    for index, passage in enumerate(iter_passages(path)):
        rank = rank_of.get(index)
        if rank is not None:
            picked[rank] = passage
    return picked


def choose_cuts(passages, seed: int, extract) -> tuple[list, int]:
    """One cut per passage (`realtime_labels.truncations`), chosen by a generator seeded with the seed and
    the passage id, so adding passages never moves another passage's cut. Also: how many had no cut."""
    from .realtime_labels import truncations

    cuts, without = [], 0
    for passage in passages:
        options = truncations(passage.title, passage.text, extract)
        if not options:
            without += 1
            continue
        cuts.append((passage, random.Random(f"{seed}:{passage.id}").choice(options)))
    return cuts, without


def _entity(e) -> dict:
    return {"text": e.text, "label": e.label, "start": e.start, "end": e.end}


def build_realtime(params: Params, lm, out: Path, similarity=None, extract: Callable | None = None) -> dict:
    """The real-time detector's data (see the module docstring): `out` (JSONL, one record per
    continuation, for inspection), the labelled tokens' hidden states, labels and units beside it
    (safetensors), and the meta file. `similarity`/`extract` default to the configured encoder and
    spaCy NER (tests pass fakes)."""
    from safetensors.numpy import save
    from tqdm import tqdm

    from ..parts.contribution import load_similarity
    from .realtime_labels import label_continuation
    from ..parts.text import entities

    cfg = params.detectors.realtime
    require(lm.capabilities, {HIDDEN_STATES}, "detector-data --kind realtime", params.model.backend)
    extract = extract or entities
    similarity = similarity or load_similarity(cfg.encoder)
    passages = sampled_passages(cfg.passages, cfg.max_passages, cfg.training.seed)
    cuts, without = choose_cuts(tqdm(passages, desc="entities", unit=" passages"), cfg.training.seed, extract)
    if not cuts:
        raise InputError(f"{cfg.passages}: none of the {len(passages)} sampled passages has a named entity "
                         f"after its first word to cut at")
    extras = Extras(hidden_layer=HIDDEN_LAYER)
    records, features, labels, units = [], [], [], []
    width = 0
    size = params.generation.chunk_size
    with tqdm(total=len(cuts), desc="real-time-detection data", unit=" passages") as bar:
        for start in range(0, len(cuts), size):
            batch = cuts[start:start + size]
            prompts = [continuation_prompt(t, params.model.prompt_format) for _, t in batch]
            for (passage, cut), prompt, c in zip(batch, prompts, lm.generate(prompts, cfg.max_new_tokens,
                                                                             extras=extras)):
                result = label_continuation(cut, c.text, c.tokens, similarity, cfg.entity_threshold, cfg.reference,
                                            extract)
                unit, width = len(records), np.asarray(c.hidden).shape[1]
                kept = [i for i, label in enumerate(result.token_labels) if label is not None]
                if kept:
                    features.append(np.asarray(c.hidden, dtype=np.float32)[kept])
                    labels.extend(result.token_labels[i] for i in kept)
                    units.extend([unit] * len(kept))
                records.append({
                    "unit": unit, "id": passage.id, "title": passage.title, "cut": _entity(cut.entity),
                    "prompt": prompt.readable(), "continuation": c.text, "tokens": c.tokens,
                    "finish_reason": c.finish_reason, "token_labels": result.token_labels, "label": result.label,
                    "entities": [{**_entity(m.entity), "matched": m.matched, "reference": m.reference,
                                  "score": m.score} for m in result.matches],
                    "reference_entities": [_entity(e) for e in result.reference_entities],
                })
            bar.update(len(batch))
    arrays = {"features": np.concatenate(features) if features else np.zeros((0, width), dtype=np.float32),
              "labels": np.asarray(labels, dtype=np.int8), "units": np.asarray(units, dtype=np.int32)}
    write_jsonl(out, records)
    meta_path, arrays_path = data_sidecars(out)
    with atomic_write(arrays_path, "wb") as handle:
        handle.write(save(arrays, metadata={"kind": "realtime"}))
    identity = lm.identity()
    unit_labels = [r["label"] for r in records]
    meta = {
        "kind": "realtime", "model": identity["model"], "identity": identity,
        "source": {"hidden_layer": HIDDEN_LAYER, "prompt": "realtime_labels.PROMPT",
                   "prompt_format": params.model.prompt_format},
        "passages": {"file": cfg.passages, "sha256": sha256_file(cfg.passages), "sampled": len(passages),
                     "without_cut": without},
        "continuations": len(records), "with_entities": sum(label is not None for label in unit_labels),
        "hallucinated_continuations": unit_labels.count(0), "faithful_continuations": unit_labels.count(1),
        "tokens": len(labels), "faithful_tokens": int(sum(labels)), "width": int(arrays["features"].shape[1]),
        "max_new_tokens": cfg.max_new_tokens, "entity_threshold": cfg.entity_threshold, "reference": cfg.reference,
        "encoder": getattr(similarity, "name", cfg.encoder),
    }
    write_json(meta_path, meta)
    return meta


def read_meta(data: Path, kind: str) -> dict:
    """The meta record beside a detector data file, checked to be of `kind`."""
    from ...io import read_json

    meta = read_json(data_sidecars(data)[0], f"{kind} detector data's meta file (built with the data)")
    if meta.get("kind") != kind:
        raise InputError(f"{data_sidecars(data)[0]}: data of kind {meta.get('kind')!r}, not {kind!r}")
    return meta

