"""Adaptive-RAG (Jeong et al., NAACL 2024): a classifier predicts each question's complexity, and the
question is answered by the strategy of its label:

- A: no retrieval (`wo-rag`'s chain of thought without passages),
- B: single-step retrieval (`sr-rag`: the question retrieves `top_k` passages once, before generating),
- C: multi-step retrieval (IRCoT: `fs-rag` with `accumulate: true`).

The classifier is the workflow's (`complexity_classifier:` in params.yaml, classifier.py): trained on
the labels that the same three strategies' runs give the classifier's own questions (labels.py). The
reference predicts the label as the argmax of the three label tokens' probabilities
(classifier/run_classifier.py, `np.argmax(probs, 0)`) and answers each question with the prediction of
that label's strategy (classifier/postprocess/predict_complexity_on_classification_results.py,
`save_prediction_with_classified_label`); here each branch is the existing method itself, so a routed
answer is exactly what that method would have written for the question.

The branches' settings are the strategies' (`none`, `single`, `multi`, each read by its method type;
check-params refuses a configuration whose branches differ from the strategies the labels came from).
The classifier file is an input of the run: a retrained classifier reruns it. A question the classifier
was trained or held out on is refused. The classifier's own time is added to each question's wall time
in equal shares; it is not an LLM call, so it adds to no counter. The trace's first step records the
label probabilities, the label and the route.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from ...errors import InputError
from ...settings import Section
from ..base import Answer, Method
from ..fs_rag import FixedSentenceRetrieval
from ..registry import register
from ..sr_rag import SingleRoundRetrieval
from ..wo_rag import WithoutRetrieval
from .classifier import CLASSIFIER, KINDS, load
from .labels import LABELS

ROUTES = {"A": "none", "B": "single", "C": "multi"}  # the label's branch (the settings key of its strategy)
BRANCH_TYPES = {"none": WithoutRetrieval, "single": SingleRoundRetrieval, "multi": FixedSentenceRetrieval}


@register("adaptive-rag")
class AdaptiveRAG(Method):
    when = ("by the query-complexity classifier's label: A never, B once before generating, C before every "
            "sentence (IRCoT)")
    what = "the question (once); IRCoT: the question, then each new sentence, passages accumulated"
    needs_retriever = True

    @classmethod
    def read_settings(cls, section: Section) -> dict[str, Any]:
        retriever = cls.read_retriever(section)
        return {"classifier": section.str("classifier", CLASSIFIER),
                "classifier_kind": section.str("classifier_kind", KINDS[1], KINDS),
                "retriever": retriever,
                **{branch: read_branch(section, branch, retriever) for branch in BRANCH_TYPES}}

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """Each label's strategy answers as that strategy's own row would."""
        return {role: BRANCH_TYPES[role].setups(settings[role])[role] for role in BRANCH_TYPES}

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        return set().union(*(BRANCH_TYPES[b].needs_for(settings[b]) for b in BRANCH_TYPES))

    trained_inputs = {"classifier": (CLASSIFIER, "complexity_classifier")}

    @classmethod
    def inputs(cls, settings, dataset, method) -> dict[str, str]:
        return {"classifier": settings["classifier"]}

    @classmethod
    def row_note(cls, settings) -> str | None:
        """A row of a run routed by another classifier than the paper's T5 says which one."""
        kind = settings["classifier_kind"]
        return None if kind == "t5" else f"classifier: {kind}"

    def __init__(self, settings, context):
        super().__init__(settings, context)
        path = Path(context.inputs.get("classifier") or settings["classifier"])
        self.classifier = load(path)
        if self.classifier.kind != settings["classifier_kind"]:
            raise InputError(f"{path}: a {self.classifier.kind} classifier, but this method's classifier_kind is "
                             f"{settings['classifier_kind']!r}; set classifier_kind: {self.classifier.kind} or "
                             f"retrain (complexity_classifier.classifier)")
        self.classifier_path = path
        self.branches = {b: BRANCH_TYPES[b](settings[b], context) for b in BRANCH_TYPES}

    def answer_batch(self, examples) -> list[Answer]:
        seen = [e.id for e in examples if e.id in self.classifier.question_ids]
        if seen:
            raise InputError(f"questions {', '.join(seen[:5])} are among the labelled questions of "
                             f"{self.classifier_path}: evaluate on questions the classifier was neither trained "
                             f"nor held out on (complexity_classifier.datasets, sample.skip)")
        start = time.perf_counter()
        probabilities = self.classifier.probabilities([e.question for e in examples])
        share = (time.perf_counter() - start) / max(1, len(examples))
        labels = [route(p) for p in probabilities]
        answers = answer_routed(examples, labels, self.branches)
        for answer, label, p in zip(answers, labels, probabilities):
            answer.wall_time_s += share
            answer.steps.insert(0, {"phase": "adaptive-rag", "classifier": self.classifier.kind,
                                    "probabilities": {k: round(float(v), 6) for k, v in zip(LABELS, p)},
                                    "label": label, "route": ROUTES[label]})
        return answers


# ---- pieces with no state (tested on their own) -------------------------------------------------


def route(probabilities: Sequence[float]) -> str:
    """The label of the highest probability (run_classifier.py: `np.argmax(probs, 0)` over A, B, C);
    a tie goes to the first, the cheaper strategy, as argmax's does."""
    best = max(range(len(LABELS)), key=lambda k: (probabilities[k], -k))
    return LABELS[best]


def answer_routed(examples: Sequence, labels: Sequence[str], branches: dict) -> list[Answer]:
    """Each label's questions answered together by its branch (one batched call per step), in input order."""
    out: list[Answer | None] = [None] * len(examples)
    for label in LABELS:
        rows = [i for i, y in enumerate(labels) if y == label]
        if rows:
            for i, answer in zip(rows, branches[ROUTES[label]].answer_batch([examples[i] for i in rows])):
                out[i] = answer
    return out


def read_branch(section: Section, branch: str, retriever: str | None) -> dict[str, Any]:
    """One branch's settings, read by its strategy's own type so its defaults hold: the method's
    `retriever` applies to both retrieving branches, and `multi` is IRCoT (accumulate: true) always."""
    data = section.raw(branch, {})
    sub = Section(data, section.key(branch), section.source)
    for key, why in (("retriever", "set `retriever` on the method itself"),
                     ("accumulate", "multi is IRCoT, which keeps every passage")):
        if key in sub.data:
            raise sub.fail(key, f"not a branch setting: {why}")
    if branch != "none":
        sub.data = {**sub.data, "retriever": retriever}
    if branch == "multi":
        sub.data = {**sub.data, "accumulate": True}
    settings = BRANCH_TYPES[branch].read_settings(sub)
    sub.done()
    return settings
