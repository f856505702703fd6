"""Adaptive Retrieval (Mallen et al., ACL 2023, "When Not to Trust Language Models", Section 6.1):
retrieve only for questions whose subject entity is less popular than a threshold.

Popularity is the subject entity's monthly Wikipedia page views (PopQA's `s_pop`). A question below
the threshold is answered as SR-RAG answers it (the question retrieves `top_k` passages once, before
generating); every other question as wo-RAG answers it (no retrieval). `top_k` defaults to 1: the
reference answers with the first retrieved passage alone (run_model.py: `retrieval_dict[query]["ctxs"][0]`
before `Q: {question} A:`). Its prompt is the reference's style when `prompt_style: qa-oneshot` (a
`Q: ... A:` demonstration, the passage above the question, the first line of the completion as the
answer), as SUGAR's tables run it; `cot` (the default) is the dataset's chain of thought. The reference notebook
(AlexTMallen/adaptive-retrieval, adaptive-retrieval.ipynb) compares log(s_pop) with the cut, which
orders questions exactly as the page views do, so the rule here compares the page views themselves.

No dataset the project loads carries page views, and neither the reference code nor the code of the
papers that report this baseline on NQ, HotpotQA, 2Wiki or SQuAD (starsuzi/Adaptive-RAG, whose table
SUGAR's Table I repeats) contains a substitute signal. The popularity is therefore a file the user
provides (`popularity`, default `data/popularity/<dataset>.json`): one JSON object mapping each
question id to its subject entity's monthly page views. The file is an input of the run, so a changed
file reruns it. `popularity_proxy: corpus-frequency` reads instead a file the workflow computes
(`data/popularity/corpus-frequency/<dataset>.json`, rule `popularity`): how many passages of the run's
corpus mention the question's entity (`corpus_frequency`), a corpus count, not page views; its
runs' table rows say so.

The threshold is a number, or `calibrated`: read off a calibration split the evaluation does not use
(`calibration_dataset`, by default `<dataset>-calib`), where every question is answered both ways and
the cut of highest mean Acc is kept (the reference's "brute force search over possible thresholds" on
held-out questions). `calibration_cuts` names where the cut may sit: `histogram`, the reference
notebook's ten equal-width bins of log popularity, or `values`, every observed popularity.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

from ...errors import InputError
from ..base import Answer, Method
from ..parts.calibrated import load_calibration, refuse_calibration_questions, refuse_other_settings, score_answers
from ..parts.rules import read_answer_style, read_generation_rules
from ..parts.setup import Own, basic_setup
from ..registry import register

DEFAULT_POPULARITY = "data/popularity/{dataset}.json"
# The popularity the workflow computes (rule `popularity`, `adaptive-rag popularity`) instead of page views.
CORPUS_FREQUENCY = "corpus-frequency"
PROXIES = ("none", CORPUS_FREQUENCY)
PROXY_POPULARITY = "data/popularity/corpus-frequency/{dataset}.json"
DEFAULT_CALIBRATION = "{dataset}-calib"
CUTS = ("histogram", "values")
HISTOGRAM_BINS = 10  # numpy.histogram's default, which the reference notebook uses
# Settings a calibration file does not depend on: it records the answers, not the cut rule or the file names.
NOT_CALIBRATED = frozenset({"threshold", "calibration_dataset", "calibration_cuts", "popularity"})
POPULARITY_FILE = "a JSON object mapping each question id to its entity's monthly Wikipedia page views"


@register("adaptive-retrieval")
class AdaptiveRetrieval(Method):
    when = "once, before generating, when the question's entity popularity is below `threshold`"
    what = "the question"
    needs_retriever = True
    reads_answer_style = True
    calibration_retrieves = True
    uncalibrated = "threshold (a number of monthly page views)"
    provided_inputs = {"popularity": POPULARITY_FILE}
    derived_inputs = frozenset({"corpus_frequency"})  # the `popularity` rule makes it from the split and corpus
    per_question_inputs = frozenset({"popularity", "corpus_frequency"})  # keyed by a split's question ids
    later_settings = {**Method.later_settings, "popularity_proxy": "none"}  # runs built before it keep their key

    @classmethod
    def read_settings(cls, section) -> dict[str, Any]:
        proxy = section.str("popularity_proxy", "none", PROXIES)
        if proxy != "none" and "popularity" in section.data:
            raise section.fail("popularity", f"a page-view file and popularity_proxy: {proxy} exclude each "
                                             f"other; remove one of the two")
        settings = {"threshold": _read_threshold(section), "popularity_proxy": proxy,
                    "popularity": PROXY_POPULARITY if proxy != "none" else section.str("popularity", DEFAULT_POPULARITY),
                    # the reference's ctxs[0]: one passage
                    "top_k": section.int("top_k", 1, minimum=1), "retriever": cls.read_retriever(section),
                    **read_generation_rules(section), **read_answer_style(section)}
        if settings["threshold"] == "calibrated":
            settings["calibration_dataset"] = section.str("calibration_dataset", DEFAULT_CALIBRATION)
            settings["calibration_cuts"] = section.str("calibration_cuts", "histogram", CUTS)
        return settings

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """Answers without retrieval or after one search; the top passage alone is the reference's."""
        setup = {**basic_setup(cls, settings, "none"), **basic_setup(cls, settings, "single")}
        if settings["top_k"] == 1:
            setup["single"]["top_k"] = Own(1, "the reference answers with ctxs[0] (run_model.py)")
        return setup

    @classmethod
    def inputs(cls, settings, dataset, method) -> dict[str, str]:
        name = "corpus_frequency" if proxy_of(settings) else "popularity"
        return {**super().inputs(settings, dataset, method), name: settings["popularity"].replace("{dataset}", dataset)}

    @classmethod
    def typed_question(cls, settings, question, params, method) -> dict[str, Any]:
        """A typed question's popularity, where it can be had as a run would have it: the corpus-frequency
        proxy depends on the question and the corpus alone, so it is counted here exactly as the
        `popularity` step counts a split's question. Page views cannot: the file maps a split's question ids
        to them, a typed question is in no split, and they cannot be looked up offline."""
        if not proxy_of(settings):
            raise InputError(f"methods.{method} reads each question's popularity (its entity's page views) by the "
                             f"question's id from {settings['popularity']}, which a typed question has no entry "
                             f"in and whose page views cannot be looked up offline: ask a method with "
                             f"popularity_proxy: {CORPUS_FREQUENCY} (counted in the corpus for the typed question), "
                             f"or run the question in a split")
        from .corpus_frequency import corpus_frequency

        [record], _ = corpus_frequency([("typed", question)], Path(params.corpus_dir), params.retrieval.threads)
        return {"popularity": float(record["popularity"]), "entity": record["entity"]}

    @classmethod
    def row_note(cls, settings) -> str | None:
        proxy = proxy_of(settings)
        return f"popularity: {proxy}, not page views" if proxy else None

    def __init__(self, settings, context):
        super().__init__(settings, context)
        typed = context.typed.get("popularity")
        self.popularity = {} if typed is not None else load_popularity(Path(self.popularity_path))
        self.threshold, self.calibration_ids = self._threshold()

    def _threshold(self) -> tuple[float, frozenset]:
        threshold = self.settings["threshold"]
        if threshold != "calibrated":
            return float(threshold), frozenset()
        path = Path(self.ctx.inputs.get("calibration", ""))

        def read(data: dict) -> tuple[float, frozenset]:
            refuse_other_settings(path, data["settings"], calibrated_settings(self.settings))
            return float(data["thresholds"][self.settings["calibration_cuts"]]), frozenset(data["ids"])

        return load_calibration(path, "Adaptive Retrieval", read)

    @property
    def popularity_path(self) -> str:
        return str(self.ctx.inputs.get("corpus_frequency") or self.ctx.inputs.get("popularity", ""))

    def popularity_of(self, examples) -> list[float]:
        if self.ctx.typed:  # a question typed to `ask`: its popularity counted for it (`typed_question`)
            return [self.ctx.typed["popularity"]] * len(examples)
        path = self.popularity_path
        missing = [e.id for e in examples if e.id not in self.popularity]
        if missing:
            fix = (f"it was computed for other questions: delete it and rerun `snakemake --cores all {path}`"
                   if proxy_of(self.settings) else "add each question id with its entity's monthly Wikipedia page views")
            raise InputError(f"{path}: no popularity for question {missing[0]!r}"
                             f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; {fix}")
        return [self.popularity[e.id] for e in examples]

    def answer_batch(self, examples) -> list[Answer]:
        if self.calibration_ids:
            refuse_calibration_questions(examples, self.calibration_ids, self.settings["calibration_dataset"])
        popularity = self.popularity_of(examples)
        retrieve = [retrieves(p, self.threshold) for p in popularity]
        answers = self.answer_both_ways(examples, retrieve)
        entity = {"entity": self.ctx.typed["entity"]} if self.ctx.typed else {}  # a typed question's: shown
        for answer, p, r in zip(answers, popularity, retrieve):
            answer.steps[0].update(popularity=p, threshold=self.threshold, retrieve=r, **entity)
        return answers

    def answer_both_ways(self, examples, retrieve: Sequence[bool]) -> list[Answer]:
        """SR-RAG's answer where `retrieve` says so, wo-RAG's elsewhere: one generate call per group."""
        out: list[Answer | None] = [None] * len(examples)
        for flag in (True, False):
            rows = [i for i, r in enumerate(retrieve) if r == flag]
            if rows:
                for i, answer in zip(rows, self.answer_group([examples[i] for i in rows], flag)):
                    out[i] = answer
        return out

    def answer_group(self, examples, retrieve: bool) -> list[Answer]:
        questions = [e.question for e in examples]
        if not retrieve:
            return self.generate_answers(questions, [()] * len(examples))
        start = time.perf_counter()
        hits = [self.search(q, self.settings["top_k"]) for q in questions]
        share = (time.perf_counter() - start) / len(examples)
        answers = self.generate_answers(questions, hits, retrievals=1)
        for answer in answers:
            answer.wall_time_s += share
        return answers

    # ---- calibration (`adaptive-rag calibrate`) -----------------------------------------------
    # Each calibration question is answered both ways, as a run would answer it; the cut is the one
    # whose routing (retrieve below it) has the highest mean Acc, ties to fewer retrievals.

    @classmethod
    def calibration_settings(cls, settings) -> dict[str, Any]:
        return {**settings, "threshold": 0.0}

    def calibrate_batch(self, examples) -> list[dict]:
        popularity = self.popularity_of(examples)
        plain = score_answers(examples, self.answer_group(examples, False))
        retrieved = score_answers(examples, self.answer_group(examples, True))
        return [{"id": e.id, "popularity": p, "none": n["acc"], "single": s["acc"]}
                for e, p, n, s in zip(examples, popularity, plain, retrieved)]

    def calibration_record(self, rows: list[dict]) -> dict:
        popularity = [row["popularity"] for row in rows]
        acc = [(row["none"], row["single"]) for row in rows]
        grid = {rule: search(popularity, acc, cut_places(popularity, rule)) for rule in CUTS}
        return {"settings": calibrated_settings(self.settings), "per_question": rows, "grid": grid,
                "thresholds": {rule: best(rows_) for rule, rows_ in grid.items()},
                "note": "popularity < threshold retrieves. none/single: Acc of the question's answer without "
                        "and with retrieval. thresholds: the cut of highest mean Acc, ties to fewer retrievals; "
                        "histogram: cuts at the edges of 10 equal-width bins of log popularity (the reference "
                        "notebook's); values: a cut at every observed popularity and one above them all"}


# ---- pieces with no state (tested on their own) -------------------------------------------------


def retrieves(popularity: float, threshold: float) -> bool:
    """Mallen et al. Section 6.1: retrieve for questions whose popularity is below the threshold; a
    question at the threshold answers from the model's own memory (the notebook's upper bins)."""
    return popularity < threshold


def load_popularity(path: Path) -> dict[str, float]:
    """Question id -> monthly page views (a non-negative number); an absent or malformed file fails
    naming it and saying what it must hold."""
    what = POPULARITY_FILE
    if not path.is_file():
        raise InputError(f"{path}: missing; methods of type adaptive-retrieval read the question popularity "
                         f"from it: provide {what} (or set the method's `popularity`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc}); provide {what}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected {what}, got {type(data).__name__}")
    for qid, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise InputError(f"{path}: question {qid!r}: expected a number of page views >= 0, got {value!r}")
    return {qid: float(value) for qid, value in data.items()}


def cut_places(popularity: Sequence[float], rule: str) -> list[float]:
    """Where the threshold may sit. `histogram`: the left edges of the reference notebook's ten
    equal-width bins of log popularity (as page views; a value of 0 counts as 1 view there, the log
    being undefined; the first edge is the smallest value itself, which exp(log(x)) may miss by a
    rounding) and one above every value; `values`: every observed value and one above them all.
    The first place retrieves for no question, the last for all."""
    values = sorted(set(popularity))
    above = math.nextafter(values[-1], math.inf)
    if rule == "values":
        return [*values, above]
    import numpy as np

    logs = np.log(np.maximum(np.asarray(popularity, dtype=float), 1.0))
    edges = np.histogram(logs, bins=HISTOGRAM_BINS)[1]
    return sorted({values[0], *(float(np.exp(e)) for e in edges[1:-1]), above})


def search(popularity: Sequence[float], acc: Sequence[tuple[float, float]], places: Sequence[float]) -> list[dict]:
    """One row per cut: the mean Acc of answering question i with retrieval when its popularity is below
    the cut (acc[i][1]) and without otherwise (acc[i][0]), and the share of questions that retrieve."""
    n = len(popularity)
    if n == 0:
        raise ValueError("no calibration questions to search a threshold on")
    rows = []
    for cut in places:
        chosen = [retrieves(p, cut) for p in popularity]
        rows.append({"threshold": cut, "acc": sum(a[c] for a, c in zip(acc, chosen)) / n,
                     "retrieved": sum(chosen) / n})
    return rows


def best(rows: list[dict]) -> float:
    """The cut of the highest mean Acc; ties to fewer retrievals (the smaller cut)."""
    return max(rows, key=lambda row: (round(row["acc"], 12), -round(row["retrieved"], 12), -row["threshold"]))[
        "threshold"]


def proxy_of(settings: dict) -> str | None:
    """The popularity proxy a configuration reads (`popularity_proxy`), None for the user's page views."""
    proxy = settings.get("popularity_proxy", "none")
    return None if proxy == "none" else proxy


def calibrated_settings(settings: dict) -> dict:
    """The settings a calibration file's answers and cuts depend on (a run refuses a file made with
    others). The popularity proxy is one: a cut in passages is no cut in page views. At its default it is
    left out, so a calibration made before the setting existed still serves."""
    return {k: v for k, v in settings.items()
            if k not in NOT_CALIBRATED and not (k == "popularity_proxy" and not proxy_of(settings))}


def _read_threshold(section) -> float | str:
    value = section.raw("threshold", "calibrated")
    if value == "calibrated":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise section.fail("threshold", f"expected a number of monthly page views (of passages with popularity_"
                                        f"proxy: corpus-frequency) >= 0 or calibrated (from `calibration_dataset`); "
                                        f"got {value!r}")
    return float(value)
