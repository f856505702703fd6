"""The jobs a profile's full suite makes: `snakemake --cores all all ablations` on a fresh checkout.

The plan prices jobs before anything is built, so it cannot ask Snakemake (a dry run needs the
profile installed as params.yaml and its input files present). It walks the same dependencies the
rules declare instead, from the parsed params: the default target (every experiment run, scored and
reported, and the trace explorer's page of each experiment dataset), every ablation's table or figure,
and what each of those reads (splits, the index a run searches, calibrations, DioR's and RaDIO's
detectors, Adaptive-RAG's classifier and the runs that label it, Adaptive Retrieval's popularity
files, downloads). `tests/test_plan.py` keeps the per-rule
counts equal to a Snakemake dry run's for every profile in params/, so a rule added to the workflow
without a line here fails there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..config import Params
from ..methods.registry import method_class
from ..retrieval import encoder_name
from ..settings import rule_name

# The two rules of each detector (workflow/rules/detectors.smk): its data, then its training.
DETECTOR_RULES = {"early": ("detector_data_early", "train_early_detector"),
                  "realtime": ("detector_data_realtime", "train_realtime_detector"),
                  "radio": ("detector_data_radio", "train_radio_detector")}


@dataclass(frozen=True, order=True)
class Job:
    """One Snakemake job: its rule and the wildcards that tell it apart (None where the rule has none)."""

    rule: str
    dataset: str | None = None
    method: str | None = None
    name: str | None = None  # an ablation, a downloads entry, a named encoder, a detector kind


class _Walk:
    def __init__(self, params: Params):
        self.p = params
        self.jobs: set[Job] = set()
        self.produced = self._downloaded_files()

    def add(self, job: Job) -> bool:
        """Record a job; False when it was already there (its inputs are then walked already)."""
        if job in self.jobs:
            return False
        self.jobs.add(job)
        return True

    # ---- files and the jobs that make them ------------------------------------------------------

    def _downloaded_files(self) -> dict[str, list[Job]]:
        made = {}
        for name, entry in self.p.downloads.items():
            fetch = Job(rule_name("download_", name))
            made[os.path.normpath(entry.path)] = [fetch]
            for path in entry.extracted_paths():
                made[os.path.normpath(path)] = [fetch, Job(rule_name("extract_", name))]
        return made

    def raw_file(self, path: str) -> None:
        for job in self.produced.get(os.path.normpath(path), []):
            self.add(job)

    def model(self) -> None:
        if self.p.model.backend == "hf":
            self.add(Job("model"))

    def split(self, dataset: str) -> None:
        if self.add(Job("split", dataset)):
            self.raw_file(self.p.dataset(dataset).path)

    def corpus(self) -> None:
        if self.add(Job("corpus")):
            self.raw_file(self.p.corpus.passages)

    def index(self, kind: str) -> None:
        """The job that builds the `kind` index (bm25 | dense | dense:<name>) and what it reads."""
        name = encoder_name(kind)
        job = Job("index") if kind == "bm25" else Job("dense_index") if name is None else \
            Job("named_dense_index", name=name)
        if self.add(job):
            self.corpus()
            if self.p.index_inputs(kind):  # SGPT-BE over the model step's directory
                self.model()

    def searched(self, dataset: str, method: str) -> None:
        kind = self.p.retriever_kind(dataset, method)
        self.index(kind)
        if self.p.index_inputs(kind):
            self.model()

    def declared(self, path: str, dataset: str, method: str) -> None:
        """A file `Method.inputs` declares: the job that makes it, if a rule does."""
        from ..methods.adaptive_rag.classifier import CLASSIFIER
        from ..methods.adaptive_retrieval.adaptive_retrieval import PROXY_POPULARITY
        from ..methods.dior.detectors import EARLY_DETECTOR, REALTIME_DETECTOR
        from ..methods.parts.calibrated import calibration_path
        from ..methods.radio.detector import RADIO_DETECTOR

        cfg = self.p.method(method)
        calibration = method_class(cfg.type).calibration_dataset(cfg.settings_for(dataset), dataset)
        detectors = {EARLY_DETECTOR: "early", REALTIME_DETECTOR: "realtime", RADIO_DETECTOR: "radio"}
        if calibration is not None and path == calibration_path(calibration, method):
            self.calibrate(calibration, method)
        elif path in detectors:
            self.detector(detectors[path])
        elif path == CLASSIFIER:
            self.classifier()
        elif path.startswith(PROXY_POPULARITY.split("{")[0]):
            self.popularity(path[len(PROXY_POPULARITY.split("{")[0]):-len(".json")])
        # anything else is provided by the user (a page-view popularity file): no job

    # ---- the rules ------------------------------------------------------------------------------

    def generate(self, dataset: str, method: str) -> None:
        if not self.add(Job("generate", dataset, method)):
            return
        self.split(dataset)
        self.model()
        cfg = self.p.method(method)
        cls = method_class(cfg.type)
        if cls.needs_retriever:
            self.searched(dataset, method)
        for path in cls.inputs(cfg.settings_for(dataset), dataset, method).values():
            self.declared(path, dataset, method)

    def score(self, dataset: str, method: str) -> None:
        self.add(Job("score", dataset, method))
        self.generate(dataset, method)

    def calibrate(self, dataset: str, method: str) -> None:
        from ..calibration import calibration_inputs

        if not self.add(Job("calibrate", dataset, method)):
            return
        self.split(dataset)
        self.model()
        if method_class(self.p.method(method).type).calibration_retrieves:
            self.searched(dataset, method)
        for path in calibration_inputs(self.p, dataset, method).values():
            self.declared(path, dataset, method)

    def popularity(self, dataset: str) -> None:
        if self.add(Job("popularity", dataset)):
            self.split(dataset)
            self.corpus()

    def detector(self, kind: str) -> None:
        data_rule, train_rule = DETECTOR_RULES[kind]
        if not self.add(Job(train_rule)):
            return
        self.add(Job(data_rule))
        self.model()
        if kind == "early":
            early = self.p.detectors.early
            for dataset in early.datasets:
                self.split(dataset)
            for name, ds in self.p.datasets.items():  # the other datasets' files: checked for overlap
                if name not in early.datasets:
                    self.raw_file(ds.path)
        else:
            self.raw_file(getattr(self.p.detectors, kind).passages)

    def classifier(self) -> None:
        if not self.add(Job("train_complexity_classifier")):
            return
        self.add(Job("complexity_labels"))
        c = self.p.complexity_classifier
        for dataset in c.datasets:
            for method in c.strategies.values():
                self.generate(dataset, method)

    def ablation(self, name: str) -> None:
        ablation = self.p.ablations[name]
        if ablation.plot == "significance":
            self.add(Job("significance", name=name))
            self.split(ablation.datasets[0])
            self.model()
        elif ablation.plot == "uncertainty-sweep":
            self.add(Job("uncertainty_sweep", name=name))
            self.split(ablation.datasets[0])
            self.model()
        elif ablation.plot == "sugar-entropy":
            self.add(Job("sugar_entropy_levels", name=name))
            for dataset in ablation.datasets:
                self.generate(dataset, ablation.base)
        else:
            self.add(Job("ablation", name=name))
            for dataset in ablation.datasets:
                for method in ablation.runs:
                    self.score(dataset, method)


def suite_jobs(params: Params, ablations: bool = True) -> list[Job]:
    """Every job of `snakemake all ablations` (`all` alone: `ablations=False`) on a checkout where nothing
    is built yet, sorted."""
    walk = _Walk(params)
    walk.add(Job("report"))
    for dataset in params.experiment_datasets:
        walk.add(Job("explorer_page", dataset))  # the trace explorer's page: the runs and the corpus
        walk.corpus()
        for method in params.experiment_methods:
            walk.score(dataset, method)
    for name in params.ablations if ablations else ():
        walk.ablation(name)
    return sorted(walk.jobs)


def rule_counts(jobs: list[Job]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.rule] = counts.get(job.rule, 0) + 1
    return counts
