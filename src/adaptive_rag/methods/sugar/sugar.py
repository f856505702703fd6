"""SUGAR (semantic-uncertainty-guided adaptive retrieval): a router that decides, per question, whether to
answer from the model's own knowledge, retrieve once, or retrieve before every step, by how much the
meanings of the model's sampled answers disagree.

Per batch:
1. every question's no-retrieval prompt (`prompt_style: qa-oneshot`, the paper's one `Q: ... A: ...`
   demonstration; or `cot`, the project's chain of thought, clustering the extracted answer phrases)
   is sampled `samples` times in ONE seeded `sample_batch` call;
2. each question's answers are clustered by bidirectional entailment (`judge`, by default the NLI
   model Kuhn et al. use, each answer after its question) and the semantic entropy SE (`estimator`)
   and the predictive entropy PE of the same samples are computed; an empty answer (nothing left after
   SQuAD normalisation, "The" included) is an answer of its own, as in Farquhar et al.'s code
   (`empty_samples: answer`; `infinite` gives such a question SE = PE = infinity instead);
3. the `signal` (SE, or PE for Table III's ablation) routes it: value <= t1 -> `none` (the greedy
   answer of the same prompt), t1 < value <= t2 -> `single` (retrieve once with the question),
   value > t2 -> `multi` (IRCoT: `fs-rag` with accumulated passages and the CoT prompt). A value on a
   threshold goes to the cheaper branch;
4. each branch answers only its questions, in one batched call (IRCoT: one per step), and the answers
   are merged back in question order, charged with the sampling and judging they cost.

Where the paper is silent (the spec's §1.4): the no-retrieval answer is the greedy one; the sampling
call counts in Gc and its tokens in Tc, as SE is what makes SUGAR slow.

Thresholds: the paper prints none for its main tables ("cross-validation"), so by default they are
read off a calibration split (`thresholds: calibrated`, on `calibration_dataset`, by default
`{dataset}-calib`); `mean` is its Table III rule (t1 the average, t2 the average plus one standard
deviation), `mean-single` the same without multi-step, numbers `[t1, t2]` are taken as given. The
calibrate step samples every calibration question once, exactly as a run samples it, and answers it
with all three branches, so any (t1, t2) can be scored without running again (`sugar/routing.py`).

`route: none | single | multi` answers every question by one branch, without sampling: SUGAR's own
single-step branch (`route: single`) is what its Time column is relative to.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...errors import ConfigError, InputError
from ...evaluation.answer import predicted
from ...evaluation.metrics import normalize_answer
from ...lm.base import NO_EXTRAS, SAMPLING, SCORING, Extras, SampleSet, SamplingParams
from ...prompts.fewshot import PROMPT_STYLES, QA_ONESHOT, QA_STOP_STRINGS, STOP_STRINGS, build_prompt, build_qa_prompt
from ...settings import Section, show
from ..base import Answer, Method
from ..fs_rag import FixedSentenceRetrieval
from ..sr_rag import SingleRoundRetrieval
from ..wo_rag import WithoutRetrieval
from ..parts.calibrated import load_calibration, refuse_calibration_questions, refuse_other_settings, score_answers
from .entailment import load_judge, parse_judge
from .routing import BRANCHES, best, mean_rule, mean_single_rule, quantiles, route, search
from .semantic_entropy import ESTIMATORS, cluster, predictive_entropy, semantic_entropy, sequence_loglik
from ..registry import register

SIGNALS = ("se", "pe")
EMPTY_SAMPLES = ("answer", "infinite")
# threshold rules read off a calibration file, and how each is computed from a signal's values there
RULES = {"calibrated": None, "mean": mean_rule, "mean-single": mean_single_rule}
# What the rules compute, as a calibration file records it: a file written by another definition of them
# (before `mean-single` existed, or when `mean` took t2 from the spread) is refused, not read as these.
RULES_VERSION = 3
CALIBRATED = tuple(RULES)
DEFAULT_CALIBRATION = "{dataset}-calib"
# the NLI model of Kuhn et al.'s code (code/get_semantic_similarities.py:42); offline runs name another judge
DEFAULT_JUDGE = "nli:microsoft/deberta-large-mnli"
ROUTES = ("entropy", *BRANCHES)  # entropy: the method; a branch: every question by that branch, no sampling
# Settings a calibration file does not depend on: it records both signals and both threshold rules.
NOT_CALIBRATED = frozenset({"signal", "thresholds", "calibration_dataset", "threshold_signal"})


@dataclass
class Assessment:
    """One question's sampled answers and what SUGAR measured on them."""

    samples: list[str]  # the sampled completions as generated
    answers: list[str]  # what was clustered (the completion, or the CoT's answer phrase)
    loglik: list[float]  # length-normalised log-likelihood of each sample
    clusters: list[int]
    se: float
    pe: float
    judge_calls: int
    seconds: float  # clustering and both entropies
    empty: int  # samples with no answer (nothing left after SQuAD normalisation)


@register("sugar")
class Sugar(Method):
    when = ("the `signal` of `samples` sampled no-retrieval answers (se: entropy over meaning classes by "
            "`judge`; pe: over strings): <= t1 never, <= t2 once, above t2 before every sentence (IRCoT)")
    what = "the question (once); IRCoT: the question, then each new sentence, passages accumulated"
    needs_retriever = True
    calibration_retrieves = True
    uncalibrated = "thresholds: [t1, t2] (numbers)"
    later_settings = {**Method.later_settings, "route": "entropy", "empty_samples": "infinite"}

    @classmethod
    def read_settings(cls, section: Section) -> dict[str, Any]:
        fixed = section.str("route", "entropy", ROUTES)
        style = section.str("prompt_style", "qa-oneshot", PROMPT_STYLES)
        # the samples' budget, and the direct answers' (a chain of thought needs the run's whole budget to
        # reach its answer phrase)
        tokens = section.int("max_sample_tokens", 32 if style == "qa-oneshot" else None, minimum=1,
                             allow_none=True)
        branches = {"prompt_style": style,
                    "single": _read_branch(section, "single", {"top_k": 3}),
                    "multi": _read_branch(section, "multi", {"top_k": 3, "max_steps": 8, "max_passages": 15}),
                    "retriever": cls.read_retriever(section)}
        if fixed != "entropy":  # one branch for every question: only the branches' settings count
            return {"route": fixed, "max_sample_tokens": tokens, **branches}
        signal = section.str("signal", "se", SIGNALS)
        judge = _read_judge(section)
        settings = {
            "route": fixed,
            "signal": signal,
            "estimator": section.str("estimator", "rao", ESTIMATORS),
            "thresholds": _read_thresholds(section),
            "samples": section.int("samples", 10, minimum=2),
            "temperature": _read_temperature(section),
            "top_k": section.int("top_k", None, minimum=1, allow_none=True),
            "top_p": _read_top_p(section),
            "max_sample_tokens": tokens,
            "seed": section.seed("seed", 42),
            "judge": judge,
            "strict": _read_strict(section, judge),
            "empty_samples": section.str("empty_samples", EMPTY_SAMPLES[0], EMPTY_SAMPLES),
        }
        if parse_judge(judge)[0] == "nli":
            # both reference codes give the NLI model each answer after its question
            settings["condition_on_question"] = section.bool("condition_on_question", True)
        settings.update(branches)
        if settings["thresholds"] in CALIBRATED:
            settings["calibration_dataset"] = section.str("calibration_dataset", DEFAULT_CALIBRATION)
            # Table III's "PE with SE's thresholds": route on one signal at the other's thresholds
            settings["threshold_signal"] = section.str("threshold_signal", signal, SIGNALS)
        return settings

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """Its branches answer as wo-rag, sr-rag and IRCoT configured as `branch_settings` and
        `ircot_settings` say: a table's rows of those types set up the same way compare with it."""
        plain, single = branch_settings(settings)
        setups = {"none": WithoutRetrieval.setups(plain)["none"], "single": SingleRoundRetrieval.setups(single)["single"],
                  "multi": FixedSentenceRetrieval.setups(ircot_settings(settings))["multi"]}
        return setups if settings["route"] == "entropy" else {settings["route"]: setups[settings["route"]]}

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        """Samples and their log-probabilities only (an API gives both); the `lm` judge also scores; a
        fixed route samples nothing."""
        if settings["route"] != "entropy":
            return set()
        return {SAMPLING, SCORING} if parse_judge(settings["judge"])[0] == "lm" else {SAMPLING}

    @classmethod
    def row_note(cls, settings) -> str | None:
        """What a table row must say of this run: the judge, unless it is the method's own NLI model (a
        fixed route judges nothing)."""
        if settings["route"] != "entropy" or settings["judge"] == DEFAULT_JUDGE:
            return None
        return f"judge: {settings['judge']}"

    def __init__(self, settings, context):
        super().__init__(settings, context)
        plain, single = branch_settings(settings)
        self.plain = WithoutRetrieval(plain, context)
        self.single = SingleRoundRetrieval(single, context)
        self.ircot = FixedSentenceRetrieval(ircot_settings(settings), context)
        self._judge = None
        if settings["route"] != "entropy":
            return
        self.sampling = SamplingParams(n=settings["samples"], seed=settings["seed"],
                                       temperature=settings["temperature"], top_k=settings["top_k"],
                                       top_p=settings["top_p"])
        self.t1, self.t2, self.calibration_ids = self._thresholds()

    def _thresholds(self) -> tuple[float, float, frozenset]:
        """(t1, t2, the calibration questions): given in params, or the calibration file's."""
        rule = self.settings["thresholds"]
        if rule not in CALIBRATED:
            t1, t2 = rule
            return t1, math.inf if t2 is None else t2, frozenset()
        path = Path(self.ctx.inputs.get("calibration", ""))

        def read(data: dict) -> tuple[float, float, frozenset]:
            refuse_other_settings(path, data["settings"], calibrated_settings(self.settings))
            rules = data["thresholds"][self.settings["threshold_signal"]]
            if set(rules) != set(RULES) or data.get("rules_version") != RULES_VERSION:
                raise InputError(f"{path}: its threshold rules are not this version's ({sorted(rules)}, version "
                                 f"{data.get('rules_version')}; `mean` now takes t2 from the calibration's best Acc); "
                                 "calibrate again")
            t1, t2 = rules[rule]
            return float(t1), math.inf if t2 is None else float(t2), frozenset(data["ids"])

        return load_calibration(path, "SUGAR", read)

    # ---- the prompt style ---------------------------------------------------------------------

    @property
    def direct(self) -> bool:
        return self.settings["prompt_style"] == "qa-oneshot"

    def prompt(self, question: str, passages: Sequence = ()):
        build = build_qa_prompt if self.direct else build_prompt
        return build(self.ctx.prompt_format, self.ctx.exemplars, question, passages, template=self.ctx.template)

    @property
    def stop(self) -> tuple[str, ...]:
        return QA_STOP_STRINGS if self.direct else STOP_STRINGS

    @property
    def sample_tokens(self) -> int:
        return self.settings["max_sample_tokens"] or self.ctx.max_new_tokens

    def answer_phrase(self, text: str) -> str:
        """What a sample says, as the runner would score it: the completion, or the CoT's answer phrase."""
        return predicted(text, self.direct)[0]

    # ---- uncertainty ----------------------------------------------------------------------------

    @property
    def judge(self):
        """Loaded on first use: a resumed run with nothing left builds the method without a model."""
        if self._judge is None:
            self._judge = load_judge(self.settings["judge"], lm=self.ctx.lm, chat=self.ctx.prompt_format == "chat",
                                     device=str(getattr(self.ctx.lm, "device", "cpu")),
                                     cache=getattr(self.ctx.lm, "cache", None))
        return self._judge

    def implication(self, question: str):
        """The judge as `cluster` asks it. An NLI judge sees each answer after its question
        (`condition_on_question`, default true: Kuhn et al.'s code/get_semantic_similarities.py:93-94 and
        Farquhar et al.'s compute_uncertainty_measures.py:229-230), so a bare "1990" is judged as an answer
        to this question; the `lm` judge's prompt states the question already, and `match` and `cosine`
        compare the answers themselves."""
        judge = self.judge
        if self.settings.get("condition_on_question"):
            return lambda a, b: judge.implication(question, f"{question} {a}", f"{question} {b}")
        return lambda a, b: judge.implication(question, a, b)

    def sample(self, questions: Sequence[str]) -> tuple[list[SampleSet], float]:
        """Every question's samples in one batched call; each question's share of its time."""
        start = time.perf_counter()
        # `empty_samples: answer` reads an empty answer's likelihood off the token that ended it
        extras = Extras(end_logprob=True) if self.settings["empty_samples"] == "answer" else NO_EXTRAS
        sets = self.ctx.lm.sample_batch([self.prompt(q) for q in questions], self.sampling, self.sample_tokens,
                                        self.stop, extras)
        if len(sets) != len(questions):
            raise RuntimeError(f"sample_batch answered {len(sets)} of {len(questions)} prompts")
        return sets, (time.perf_counter() - start) / max(1, len(questions))

    def assess(self, question: str, sample_set: SampleSet) -> Assessment:
        """Clusters, SE and PE of one question's samples.

        An empty answer (nothing left after SQuAD normalisation) is, with `empty_samples: answer`, an
        answer like any other, as in Farquhar et al.'s code: `generate_answers.py` keeps it, the judge
        clusters it (an empty string after the question), and its log-likelihood counts in SE and PE
        (`huggingface_models.py` `predict`: when only stop words were generated it takes the stop
        word's log-likelihood, `n_generated = 1`; the `assert i` of compute_uncertainty_measures.py
        checks that each sample's list of log-likelihoods is non-empty, which that rule guarantees).
        Here an answer that kept tokens ("The") has their mean log-probability, one that kept none the
        log-probability of the token that ended it (`sample_loglik`). `empty_samples: infinite` is this
        project's earlier rule: any empty answer makes SE = PE = infinity (the most retrieving branch),
        and no judge is asked."""
        start = time.perf_counter()
        samples = sample_set.samples
        answers = [self.answer_phrase(c.text) for c in samples]
        empty = sum(not normalize_answer(a) for a in answers)
        if empty and self.settings["empty_samples"] == "infinite":
            loglik = [sequence_loglik(c.logprobs) for c in samples]
            return Assessment([c.text for c in samples], answers, loglik, [], math.inf, math.inf, 0,
                              time.perf_counter() - start, empty)
        loglik = [sample_loglik(c) for c in samples]
        ids, calls = cluster(answers, self.implication(question), self.settings["strict"])
        se = semantic_entropy(ids, loglik, self.settings["estimator"])
        # PE = -(1/M) sum_i l_i over the same length-normalised log-likelihoods (Farquhar's `predictive_entropy`);
        # `ln_entropy` skips a sample with no token, so with an empty answer the mean is taken here, its l counted
        pe = -float(sum(loglik)) / len(loglik) if empty else predictive_entropy([c.logprobs for c in samples])
        return Assessment([c.text for c in samples], answers, loglik, ids, se, pe, calls,
                          time.perf_counter() - start, empty)

    # ---- the branches -------------------------------------------------------------------------

    def answer_bare(self, examples) -> list[Answer]:
        """`none`: the greedy answer of the prompt the samples came from (wo-rag in SUGAR's prompt style)."""
        return self.plain.answer_batch(examples)

    def answer_once(self, examples) -> list[Answer]:
        """`single`: retrieve once with the question, answer once in the same prompt style (sr-rag so)."""
        return self.single.answer_batch(examples)

    def answer_ircot(self, examples) -> list[Answer]:
        """`multi`: IRCoT, i.e. `fs-rag` with `accumulate: true` (its CoT prompt and answer fallback)."""
        return self.ircot.answer_batch(examples)

    # ---- the method ---------------------------------------------------------------------------

    @property
    def branches(self):
        """Each branch's batched answering, in BRANCHES order."""
        return self.answer_bare, self.answer_once, self.answer_ircot

    def answer_batch(self, examples) -> list[Answer]:
        if self.settings["route"] != "entropy":
            return self.branches[BRANCHES.index(self.settings["route"])](examples)
        if self.calibration_ids:
            refuse_calibration_questions(examples, self.calibration_ids, self.settings["calibration_dataset"])
        questions = [e.question for e in examples]
        self.judge  # noqa: B018  (loaded before any timing starts: Time measures the method, not the load)
        sets, share = self.sample(questions)
        assessed = [self.assess(q, s) for q, s in zip(questions, sets)]
        values = [a.se if self.settings["signal"] == "se" else a.pe for a in assessed]
        branches = [route(v, self.t1, self.t2) for v in values]
        answers: list[Answer | None] = [None] * len(examples)
        for branch, run in zip(BRANCHES, self.branches):
            rows = [i for i, b in enumerate(branches) if b == branch]
            if rows:
                for i, answer in zip(rows, run([examples[i] for i in rows])):
                    answers[i] = answer
        for answer, sample_set, a, value, branch in zip(answers, sets, assessed, values, branches):
            self.charge(answer, sample_set, share + a.seconds, self.record(a, value, branch))
        return answers

    def charge(self, answer: Answer, sample_set: SampleSet, seconds: float, record: dict) -> None:
        """The uncertainty estimate's cost on top of the branch's: one call (Gc), its M samples and their
        tokens (Tc), the sampling share and the judging time; its record leads the trace."""
        samples = sample_set.samples
        answer.llm_calls += 1
        answer.sampled_sequences += len(samples)
        answer.generated_tokens += sum(len(c.tokens) for c in samples)
        answer.prompt_tokens = max([answer.prompt_tokens, *(c.prompt_tokens or 0 for c in samples)])
        answer.wall_time_s += seconds
        answer.steps.insert(0, record)

    def record(self, a: Assessment, value: float, branch: str) -> dict:
        record = {"phase": "sugar", "prompt_style": self.settings["prompt_style"], "samples": a.samples}
        if not self.direct:
            record["answers"] = a.answers
        return {**record, "loglik": [_rounded(x) for x in a.loglik], "clusters": a.clusters,
                "empty_samples": a.empty,
                "estimator": self.settings["estimator"], "se": _rounded(a.se), "pe": _rounded(a.pe),
                "judge": self.judge.name, "judge_calls": a.judge_calls, "signal": self.settings["signal"],
                "value": _rounded(value), "thresholds": [self.t1, _finite(self.t2)], **self.threshold_rule,
                "branch": branch}

    @property
    def threshold_rule(self) -> dict:
        """How the thresholds were found, when not given as numbers: the trace says which file rule it was."""
        rule = self.settings["thresholds"]
        if rule not in CALIBRATED:
            return {}
        return {"threshold_rule": rule, "threshold_signal": self.settings["threshold_signal"]}

    # ---- calibration (`adaptive-rag calibrate`) -----------------------------------------------

    @classmethod
    def calibration_settings(cls, settings) -> dict[str, Any] | None:
        if settings["route"] != "entropy":
            return None  # a fixed route has no thresholds
        return {**settings, "thresholds": [0.0, None]}

    def calibrate_batch(self, examples) -> list[dict]:
        """Each question sampled once as a run samples it, then answered by all three branches (each
        branch one batched call for the whole batch, IRCoT one per step), every answer scored."""
        questions = [e.question for e in examples]
        self.judge  # noqa: B018  (loaded before sampling, as a run loads it)
        sets, _ = self.sample(questions)
        assessed = [self.assess(q, s) for q, s in zip(questions, sets)]
        answers = [run(examples) for run in self.branches]
        scores = [score_answers(examples, branch) for branch in answers]
        return [{"id": e.id, "se": _finite(a.se), "pe": _finite(a.pe),
                 **{name: {"em": scores[b][i]["em"], "f1": scores[b][i]["f1"], "acc": scores[b][i]["acc"],
                           "retrievals": answers[b][i].retrievals} for b, name in enumerate(BRANCHES)}}
                for i, (e, a) in enumerate(zip(examples, assessed))]

    def calibration_record(self, rows: list[dict]) -> dict:
        """Both signals' grids and both rules' thresholds, so one file serves SE and PE configurations."""
        acc = [[row[name]["acc"] for name in BRANCHES] for row in rows]
        steps = [[row[name]["retrievals"] for name in BRANCHES] for row in rows]
        record = {"settings": calibrated_settings(self.settings), "rules_version": RULES_VERSION,
                  "per_question": rows, "grid": {},
                  "thresholds": {}, "quantiles": {},
                  "branches": {name: {metric: sum(row[name][metric] for row in rows) / len(rows)
                                      for metric in ("em", "f1", "acc", "retrievals")} for name in BRANCHES}}
        for signal in SIGNALS:
            values = [math.inf if row[signal] is None else row[signal] for row in rows]
            record["grid"][signal] = search(values, acc, steps)
            record["thresholds"][signal] = {rule: best(record["grid"][signal]) if rule_of is None
                                            else rule_of(values, acc, steps) for rule, rule_of in RULES.items()}
            record["quantiles"][signal] = quantiles(values)
            record[f"mean_{signal}"] = record["thresholds"][signal]["mean"][0]
        record["note"] = ("value <= t1: no retrieval; <= t2: single-step; above: IRCoT (t2 null: never); a null value "
                          "(an empty sample) is above every threshold. calibrated: the (t1, t2) of highest mean Acc "
                          "of the routed answers, ties to fewer retrievals; mean: t1 = the mean of the signal (the "
                          "paper's Table III), t2 the best Acc with t1 there; mean-single: t1 = the mean, "
                          "no multi-step. branches: each branch's scores had every question gone there")
        return record


# ---- pieces with no state (tested on their own) -------------------------------------------------


def sample_loglik(c) -> float:
    """A sample's length-normalised log-likelihood: the mean of its kept tokens' log-probabilities, or,
    for a sample that kept no token, the log-probability of the token that ended it (Farquhar et al.'s
    `n_generated = 1` for a generation of stop words only); -inf where the backend cannot tell (an API
    that reports no log-probability for a stop sequence): that answer's class then weighs nothing in SE
    and PE is infinite."""
    if len(c.logprobs):
        return sequence_loglik(c.logprobs)
    return -math.inf if c.end_logprob is None else float(c.end_logprob)


def calibrated_settings(settings: dict) -> dict:
    """The settings a calibration file's numbers depend on (a run refuses a file made with others)."""
    return {k: v for k, v in settings.items() if k not in NOT_CALIBRATED}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def branch_settings(settings: dict) -> tuple[dict, dict]:
    """The `none` and `single` branches as wo-rag and sr-rag configurations, read by those types: SUGAR's
    prompt style, in the one-shot style its answer budget (`max_sample_tokens`), and the single step's
    `top_k`. A table's no-retrieval and single-step rows configured the same way (`prompt_style:
    qa-oneshot`) answer exactly as these branches do: the same code, prompt and budget."""
    style = {"prompt_style": settings["prompt_style"]}
    if settings["prompt_style"] == QA_ONESHOT:
        style["max_new_tokens"] = settings["max_sample_tokens"]
    single = {**style, "top_k": settings["single"]["top_k"], "retriever": settings["retriever"]}
    out = []
    for cls, data, key in ((WithoutRetrieval, style, "none"), (SingleRoundRetrieval, single, "single")):
        section = Section(data, f"methods.<sugar>.{key}", "sugar")
        out.append(cls.read_settings(section))
        section.done()
    return out[0], out[1]


def ircot_settings(settings: dict) -> dict:
    """The `multi` branch as an `fs-rag` configuration, read by fs-rag itself so its defaults hold."""
    multi = settings["multi"]
    data = {"top_k": multi["top_k"], "max_retrievals": multi["max_steps"], "accumulate": True,
            "max_passages": multi["max_passages"], "retriever": settings["retriever"]}
    section = Section(data, "methods.<sugar>.multi", "sugar")
    out = FixedSentenceRetrieval.read_settings(section)
    section.done()
    return out


def _rounded(x: float) -> float | None:
    """A number as the trace stores it: null when infinite or undefined, so the trace stays JSON."""
    return round(float(x), 6) + 0.0 if x is not None and math.isfinite(x) else None  # + 0.0: no "-0.0"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _read_thresholds(section: Section) -> list | str:
    """A rule (`calibrated`, the default: the paper cross-validated its thresholds and printed none;
    `mean`, `mean-single`) read off the calibration file; or [t1, t2] with t1 <= t2, one number t being
    [t, inf] (no multi-step). An infinite t2 is stored as null, so settings and traces stay plain JSON."""
    value = section.raw("thresholds", "calibrated")
    if isinstance(value, str) and value in CALIBRATED:
        return value  # read off the calibration split (`calibration_dataset`) when the method is built
    pair = [value, None] if _number(value) else value
    if (not isinstance(pair, list) or len(pair) != 2 or not _number(pair[0])
            or not (pair[1] is None or _number(pair[1]))):
        raise section.fail("thresholds", f"expected [t1, t2] (numbers; t2 may be .inf or null for no multi-step), "
                                         f"one number t for [t, .inf], or {' or '.join(CALIBRATED)} (from "
                                         f"`calibration_dataset`); got {show(value)}")
    t1 = float(pair[0])
    t2 = None if pair[1] is None or pair[1] == math.inf else float(pair[1])
    if not math.isfinite(t1) or (t2 is not None and not math.isfinite(t2)):
        raise section.fail("thresholds", f"t1 must be finite and t2 finite or .inf; got {pair}")
    if t2 is not None and t1 > t2:
        raise section.fail("thresholds", f"expected t1 <= t2 (t1 ends no retrieval, t2 single-step); got {pair}")
    return [t1, t2]


def _read_temperature(section: Section) -> float:
    value = section.float("temperature", 1.0)
    if value <= 0:
        raise section.fail("temperature", f"must be > 0 (the samples are drawn; the answer is greedy anyway); "
                                          f"got {value}")
    return value


def _read_top_p(section: Section) -> float | None:
    value = section.raw("top_p", None)
    if value is None:
        return None
    if not _number(value) or not 0 < value <= 1:
        raise section.fail("top_p", f"expected a number in (0, 1] or null (no nucleus filter); got {show(value)}")
    return float(value)


def _read_judge(section: Section) -> str:
    spec = section.str("judge", DEFAULT_JUDGE)
    try:
        parse_judge(spec)
    except ConfigError as exc:
        raise section.fail("judge", str(exc)) from None
    return spec


def _read_strict(section: Section, judge: str) -> bool:
    """`strict` needs entailment both ways. `match:contain` lets the longer answer entail the shorter
    one only, so under `strict: true` it clusters exactly as `match`: refused there, not run as
    something it is not."""
    strict = section.bool("strict", True)
    if strict and judge == "match:contain":
        raise section.fail("judge", "match:contain clusters exactly as match under strict: true (containment "
                                    "holds one way, strict needs both); set strict: false to merge an answer "
                                    "with one it contains, or judge: match")
    return strict


def _read_branch(section: Section, name: str, defaults: dict[str, int]) -> dict[str, int]:
    branch = section.section(name, {})
    out = {key: branch.int(key, default, minimum=1) for key, default in defaults.items()}
    branch.done()
    return out
