"""dvc.yaml, written from params.yaml: one DVC stage per artifact that is shared, each running the
Snakemake target that builds it.

Why generated rather than templated: DVC's `${...}` templating cannot put a list into `deps`/`outs`
and has no conditionals, so it cannot say "the report reads every experiment run" (a dataset x method
product) nor "this ablation writes md, csv, tex and png, that one csv and png" (the kinds' rules write
different files). A DVC stage that owned a whole directory (`data/runs`) would overlap the ablations'
runs written into it, and every ablation would leave that stage dirty. So each stage here names
exactly the paths it owns, computed from the same `Params` the Snakefile reads:

- `model`, `corpus`, `index_<kind>` (each index some run searches: `index_bm25`, `index_dense`, and
  `index_dense-<name>` for a named encoder), `split_<dataset>`;
- `generate_<dataset>_<method>` per experiment run: owns `data/runs/<dataset>/<method>`;
- `report`: owns the experiment's score files and the tables and figures of `rule report`;
- `ablation_<name>` per ablation (the Snakemake target of the same name): owns its report files under
  reports/ablations/. Its variants' runs and scores are Snakemake intermediates that no stage owns
  (they are not pushed); the stage's params are every setting those runs depend on (the generate
  rule's `run_settings`), so DVC reruns it exactly when Snakemake would rerun one of its runs, and its
  deps name the experiment runs and scores it reads, so DVC orders it after the stages owning them.

Params dependencies mirror the settings each Snakemake rule reruns on (`Params.run_settings`), not
whole sections, so e.g. `generation.threads` reruns no run in either tool (only the report, whose
`reports/params.yaml` shows every resolved setting).
`adaptive-rag dvc-yaml` writes the file; `--check` (and `adaptive-rag dvc-record`) refuse a stale one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ablations import RULE_PREFIX as ABLATION_RULE_PREFIX
from .config import DENSE_KEYS
from .errors import ConfigError
from .retrieval import encoder_name
from .settings import rule_name

HEADER = """\
# GENERATED from params.yaml by `adaptive-rag dvc-yaml`: do not edit by hand. After changing params.yaml's
# names or structure (experiment, datasets, ablations, model.name, corpus, retrieval.type) run
# `adaptive-rag dvc-yaml`; `adaptive-rag dvc-yaml --check`, `adaptive-rag dvc-record` and the tests
# refuse a stale file. Each stage runs one Snakemake target, so `dvc repro` and `snakemake --cores all`
# run the same commands and write the same files; after a Snakemake build, `adaptive-rag dvc-record`
# records its outputs in dvc.lock without recomputing them. See docs/sharing-with-dvc.md.
"""

SNAKEMAKE = "snakemake --cores all"
SRC = "src/adaptive_rag"
CODE = {  # the package code each kind of step runs (a change reruns the stage)
    "corpus": [f"{SRC}/data/corpus.py"],
    "index": [f"{SRC}/retrieval"],
    "split": [f"{SRC}/data/datasets.py", f"{SRC}/data/sampling.py"],
    "generate": [f"{SRC}/calibration.py", f"{SRC}/lm", f"{SRC}/methods", f"{SRC}/prompts", f"{SRC}/retrieval",
                 f"{SRC}/runner.py"],
    "report": [f"{SRC}/evaluation", f"{SRC}/reports"],
}
CODE["ablation"] = [*CODE["generate"], f"{SRC}/ablations.py", *CODE["report"]]
# DioR's detectors: building their data runs the model (and the dataset loaders, for the disjointness check)
CODE["detector_data"] = [f"{SRC}/methods/dior/detector_data.py", f"{SRC}/data", f"{SRC}/evaluation/metrics.py",
                         f"{SRC}/lm", *(f"{SRC}/methods/dior/{name}.py" for name in ("attribution", "detectors",
                                                                                  "realtime_labels")),
                         *(f"{SRC}/methods/parts/{name}.py" for name in ("contribution", "lookahead", "text",
                                                                         "uncertainty"))]
CODE["train_detector"] = [f"{SRC}/methods/dior/detector_train.py", f"{SRC}/methods/dior/detectors.py",
                          f"{SRC}/methods/dior/detector_nets.py", f"{SRC}/methods/parts/uncertainty.py"]
CODE["detector_report"] = [f"{SRC}/reports/detectors.py", f"{SRC}/reports/figures.py"]
# RaDIO's detector: its data runs the model over passages (NER, the corpus reader); training is its own module
CODE["radio_detector_data"] = [f"{SRC}/methods/radio/detector_data.py", f"{SRC}/methods/radio/detector.py",
                               f"{SRC}/methods/dior/detector_data.py", f"{SRC}/data", f"{SRC}/lm",
                               f"{SRC}/methods/parts/text.py"]
CODE["train_radio_detector"] = [f"{SRC}/methods/radio/detector_train.py", f"{SRC}/methods/radio/detector.py",
                                f"{SRC}/methods/parts/uncertainty.py"]
# Adaptive-RAG's classifier: its labels read the strategies' runs (their code is the generate stage's)
CODE["complexity_labels"] = [*CODE["generate"], f"{SRC}/evaluation/metrics.py"]
CODE["train_complexity_classifier"] = [f"{SRC}/methods/adaptive_rag/classifier.py",
                                       f"{SRC}/methods/adaptive_rag/labels.py"]
# What `rule dior_detector_plots` and `rule dior_detector_table` (workflow/rules/detectors.smk) write.
DETECTOR_FIGURES = tuple(f"reports/ablations/dior-fig{n}.{suffix}" for n in range(4, 10) for suffix in ("png", "csv"))
DETECTOR_TABLE = tuple(f"reports/ablations/dior-detectors.{suffix}" for suffix in ("md", "csv", "html"))

# What `rule report` (workflow/rules/report.smk) writes.
REPORT_FILES = (*(f"reports/tables/{table}.{suffix}" for table in ("quality", "cost")
                  for suffix in ("md", "html", "tex")),
                "reports/tables/scores.csv", "reports/figures/scores.png", "reports/figures/scores.svg",
                *(f"reports/tables/retrievals.{suffix}" for suffix in ("md", "html", "csv")),
                "reports/figures/retrievals.png", "reports/params.yaml")
# What `rule explorer_page` (workflow/rules/report.smk) writes, per experiment dataset.
EXPLORER_PAGE = "reports/explorer/{dataset}.html"
# The sections `reports/params.yaml` shows besides the experiment's own keys (`reports.resolved`): the
# report rule reruns when any of them changes, and so does the DVC stage.
SHOWN_SECTIONS = ("seed", "model", "corpus", "retrieval", "generation")
# What each ablation kind's rule (workflow/rules/ablations.smk) writes as reports/ablations/<name>.<suffix>;
# every kind not named here goes through `rule ablation`.
ABLATION_SUFFIXES = {"significance": ("csv", "png"), "uncertainty-sweep": ("csv", "png"),
                     "sugar-entropy": ("md", "csv", "png", "html")}
TABLE_SUFFIXES = ("md", "csv", "tex", "png", "html")
# The generation settings `Params.run_settings` reruns a run on (not threads, cache or processes).
GENERATION_KEYS = ("decoding", "max_new_tokens", "batch_size", "answer_fallback_tokens")


def ablation_rule(name: str) -> str:
    """The Snakemake target of an ablation (the Snakefile's own naming), also its DVC stage name."""
    return rule_name(ABLATION_RULE_PREFIX, name)


def ablation_files(ablation) -> list[str]:
    suffixes = ABLATION_SUFFIXES.get(ablation.plot, TABLE_SUFFIXES)
    return [f"reports/ablations/{ablation.name}.{suffix}" for suffix in suffixes]


def run_dir(dataset: str, method: str) -> str:
    return f"data/runs/{dataset}/{method}"


def score_file(dataset: str, method: str) -> str:
    return f"data/scores/{dataset}/{method}.json"


class _Builder:
    """Collects the stages of one params file; each helper answers one question about a run."""

    def __init__(self, params):
        from .methods.registry import method_class

        self.p, self.method_class = params, method_class
        self.raw = params.raw
        self.model_dir = params.model_dir if params.model.backend == "hf" else None
        self.variant_of = {v.method: (a.name, v.base) for a in params.ablations.values() for v in a.variants}
        self.experiment = [(d, m) for d in params.experiment_datasets for m in params.experiment_methods]

    # ---- params keys: only those present in params.yaml (DVC refuses a missing one) ----

    def _present(self, key: str) -> bool:
        node = self.raw
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def key(self, section: str, name: str, *rest: str) -> str:
        """`section.name[.rest]`, or the whole section where `name` has a dot (DVC splits keys on dots)."""
        return section if "." in name else ".".join((section, name, *rest))

    def keys(self, keys) -> list[str]:
        out = []
        for k in keys:
            if self._present(k) and k not in out:
                out.append(k)
        return out

    def method_keys(self, method: str) -> list[str]:
        """Where a configuration's settings live: its `methods:` entry, or (a variant) its ablation's
        `vary` and its base's entry."""
        if method in self.variant_of:
            ablation, base = self.variant_of[method]
            return [self.key("ablations", ablation, "vary"), self.key("methods", base)]
        return [self.key("methods", method)]

    # ---- what a run reads ----

    def retrieves(self, method: str) -> bool:
        return self.method_class(self.p.method(method).type).needs_retriever

    def calibration(self, dataset: str, method: str) -> str | None:
        cfg = self.p.method(method)
        return self.method_class(cfg.type).calibration_dataset(cfg.settings_for(dataset), dataset)

    def index_kinds(self, dataset: str, method: str) -> list[str]:
        kinds = [self.p.retriever_kind(dataset, method)] if self.retrieves(method) else []
        calibration = self.calibration(dataset, method)
        if calibration and self.method_class(self.p.method(method).type).calibration_retrieves:
            kinds.append(self.p.retriever_kind(calibration, method))
        return kinds

    def declared_inputs(self, dataset: str, method: str) -> list[str]:
        """The files the method type declares (`Method.inputs`, DioR's trained detectors), so the stage
        waits for the stages that write them and reruns when they change. A calibration file is left
        out: the run's own Snakemake target makes it, from the split and settings already listed; so are
        the type's `derived_inputs` (Adaptive Retrieval's corpus-frequency popularity, made from the split
        and the corpus behind the listed index)."""
        from .methods.parts.calibrated import calibration_path

        cfg = self.p.method(method)
        cls = self.method_class(cfg.type)
        declared = cls.inputs(cfg.settings_for(dataset), dataset, method)
        calibration = self.calibration(dataset, method)
        own = calibration_path(calibration, method) if calibration else None
        return [path for name, path in declared.items() if path != own and name not in cls.derived_inputs]

    def exemplars(self, dataset: str) -> list[str]:
        spec = self.p.dataset(dataset).exemplars
        return [] if spec.startswith("builtin:") else [spec]  # built-in sets are package code

    def run_inputs(self, dataset: str, method: str) -> tuple[list[str], list[str]]:
        """(deps, params) of one run and its calibration: what `generate_inputs`/`calibrate_inputs`
        read and what `Params.run_settings` reruns on."""
        calibration = self.calibration(dataset, method)
        datasets = [dataset] + ([calibration] if calibration else [])
        kinds = self.index_kinds(dataset, method)
        deps = [d for d in [self.model_dir] if d]
        deps += [path for kind in kinds for path in (self.p.index_dir(kind), *self.p.index_inputs(kind))]
        deps += [f"data/splits/{d}.jsonl" for d in datasets] + self.exemplars(dataset)
        deps += self.declared_inputs(dataset, method)
        params = ["seed", "model", *(f"generation.{k}" for k in GENERATION_KEYS), *self.method_keys(method)]
        params += [self.key("datasets", d) for d in datasets]
        params += ["retrieval"] if kinds else []
        return deps, params


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def _covered(key: str, keys: list[str]) -> bool:
    """`key` is inside another listed key (`ablations.x.vary` inside `ablations.x`)."""
    return any(key.startswith(other + ".") for other in keys)


def _stage(target: str, deps: list[str], params: list[str], outs: list[str]) -> dict:
    stage: dict[str, Any] = {"cmd": f"{SNAKEMAKE} {target}"}
    if deps:
        stage["deps"] = _unique(deps)
    params = _unique(params)
    params = [k for k in params if not _covered(k, params)]
    if params:
        stage["params"] = params
    stage["outs"] = _unique(outs)
    return stage


def build_stages(params) -> dict[str, dict]:
    """Stage name -> {cmd, deps, params, outs}, in dependency order."""
    b = _Builder(params)
    p = params
    stages = _Stages()
    if b.model_dir:
        stages.add("model", _stage("model", [], b.keys(["model.name", "model.source"]), [b.model_dir]))
    collection = f"data/corpus/{p.corpus.name}"
    planned = list(b.experiment) + [(d, m) for a in p.ablations.values() for d in a.datasets for m in a.runs]
    kinds = _unique([p.retrieval.type, *(k for d, m in planned for k in b.index_kinds(d, m))])
    stages.add("corpus", _stage(collection, [p.corpus.passages, *CODE["corpus"]], b.keys(["corpus"]), [collection]))
    for kind in sorted(kinds):  # bm25, dense, dense:<name>: the kinds some run searches
        name = encoder_name(kind)
        # the BM25 index is built without settings; a named encoder's index with that encoder's alone
        # (the single form beside named encoders: its own keys, so a named encoder's change leaves it)
        single = ["retrieval.dense"] if not p.retrieval.encoders else [f"retrieval.dense.{k}" for k in DENSE_KEYS]
        keys = [b.key("retrieval.dense", name)] if name else single if kind == "dense" else []
        index = p.index_dir(kind)
        stages.add(f"index_{Path(index).name}", _stage(index, [collection, *p.index_inputs(kind), *CODE["index"]],
                                                       b.keys(keys), [index]))
    used = set(p.experiment_datasets) | {d for a in p.ablations.values() for d in a.datasets}
    used |= {c for d, m in planned if (c := b.calibration(d, m))}
    if p.detectors is not None and p.detectors.early is not None:  # the early detector's training splits
        used |= set(p.detectors.early.datasets)
    if p.complexity_classifier is not None:  # the classifier's labelled splits
        used |= set(p.complexity_classifier.datasets)
    for name, ds in p.datasets.items():  # the splits something reads (a built-everything tree has no others)
        if name in used:
            split = f"data/splits/{name}.jsonl"
            stages.add(f"split_{name}", _stage(
                split, [ds.path, *CODE["split"]],
                b.keys([b.key("datasets", name, k) for k in ("format", "path", "sample")]),
                [split, f"data/splits/{name}.meta.json"]))
    for dataset, method in b.experiment:
        deps, keys = b.run_inputs(dataset, method)
        stages.add(f"generate_{dataset}_{method}", _stage(
            f"{run_dir(dataset, method)}/predictions.jsonl", deps + CODE["generate"], b.keys(keys),
            [run_dir(dataset, method)]))
    if b.experiment:
        report_keys = ["experiment", "report", *(b.key("datasets", d) for d in p.experiment_datasets)]  # report: intervals
        report_keys += [k for m in p.experiment_methods for k in b.method_keys(m)]  # which run is wo-RAG (S_eff)
        report_keys += list(SHOWN_SECTIONS)  # reports/params.yaml shows them resolved
        stages.add("report", _stage("report", [run_dir(d, m) for d, m in b.experiment] + CODE["report"],
                                    b.keys(report_keys),
                                    [score_file(d, m) for d, m in b.experiment] + list(REPORT_FILES)))
        # the trace explorer reads the runs and the corpus (the passages' text), nothing of params.yaml
        # but which runs it shows
        stages.add("explorer", _stage("explorer", [run_dir(d, m) for d, m in b.experiment]
                                      + [p.corpus_dir, f"{SRC}/reports"], b.keys(["experiment"]),
                                      [EXPLORER_PAGE.format(dataset=d) for d in p.experiment_datasets]))
    for ablation in p.ablations.values():
        stages.add(ablation_rule(ablation.name), _ablation_stage(b, ablation))
    if p.detectors is not None:
        _detector_stages(b, stages)
    if p.complexity_classifier is not None:
        _complexity_stages(b, stages)
    return dict(stages)


def _complexity_stages(b: _Builder, stages: "_Stages") -> None:
    """Adaptive-RAG's classifier (workflow/rules/complexity.smk): the labels, whose stage covers the
    strategies' runs on the labelled splits (Snakemake intermediates no stage owns, as an ablation's
    variants: every input and setting of theirs is a dep or param of this stage), and the trained
    weights with their metrics."""
    from .methods.adaptive_rag.classifier import CLASSIFIER, LABELS_FILE, metrics_path

    cfg = b.p.complexity_classifier
    deps, keys = [], [f"complexity_classifier.{key}" for key in cfg.LABEL_KEYS]
    for dataset in cfg.datasets:
        for method in cfg.strategies.values():
            run_deps, run_keys = b.run_inputs(dataset, method)
            deps += run_deps
            keys += run_keys
    stages.add("complexity_labels", _stage("complexity_labels", deps + CODE["complexity_labels"], b.keys(keys),
                                           [LABELS_FILE]))
    training = [f"complexity_classifier.{key}" for key in cfg.training_settings()]
    stages.add("train_complexity_classifier", _stage(
        "train_complexity_classifier", [LABELS_FILE, *CODE["train_complexity_classifier"]], b.keys(training),
        [CLASSIFIER, str(metrics_path(CLASSIFIER))]))


def _detector_keys(kind: str, keys) -> list[str]:
    """`detectors.<kind>.<key>` for each key (those absent from params.yaml are dropped by `_Builder.keys`)."""
    return [f"detectors.{kind}.{key}" for key in keys]


def _detector_stages(b: _Builder, stages: "_Stages") -> None:
    """DioR's detectors (workflow/rules/detectors.smk): each kind's data and trained weights, the figures
    (early) and the table, and RaDIO's; each stage runs the rule of the same name. The data stages' params are the
    detector's section and the model (the early data also checks every dataset, so every dataset's
    entry and file is a dependency of it)."""
    from .methods.dior.detectors import (EARLY_DATA, EARLY_DETECTOR, REALTIME_DATA, REALTIME_DETECTOR,
                                          data_sidecars, metrics_path)

    p = b.p
    model = [d for d in [b.model_dir] if d]
    metrics = []
    if p.detectors.early is not None:
        early = p.detectors.early
        meta = str(data_sidecars(EARLY_DATA)[0])
        others = sorted({ds.path for name, ds in p.datasets.items() if name not in early.datasets})
        stages.add("detector_data_early", _stage(
            "detector_data_early", model + [f"data/splits/{d}.jsonl" for d in early.datasets] + others
            + CODE["detector_data"], b.keys([*_detector_keys("early", early.DATA_KEYS), "model", "datasets"]),
            [EARLY_DATA, meta]))
        stages.add("train_early_detector", _stage(
            "train_early_detector", [EARLY_DATA, meta, *CODE["train_detector"]],
            b.keys(_detector_keys("early", early.TRAINING_KEYS)), [EARLY_DETECTOR, str(metrics_path(EARLY_DETECTOR))]))
        stages.add("dior_detector_plots", _stage(
            "dior_detector_plots", [EARLY_DATA, meta, *CODE["detector_report"]], [], list(DETECTOR_FIGURES)))
        metrics.append(str(metrics_path(EARLY_DETECTOR)))
    if p.detectors.realtime is not None:
        realtime = p.detectors.realtime
        meta, arrays = (str(path) for path in data_sidecars(REALTIME_DATA))
        stages.add("detector_data_realtime", _stage(
            "detector_data_realtime", model + [realtime.passages, *CODE["detector_data"]],
            b.keys([*_detector_keys("realtime", realtime.DATA_KEYS), "model", "generation.batch_size"]),
            [REALTIME_DATA, meta, arrays]))
        stages.add("train_realtime_detector", _stage(
            "train_realtime_detector", [REALTIME_DATA, meta, arrays, *CODE["train_detector"]],
            b.keys(_detector_keys("realtime", realtime.TRAINING_KEYS)),
            [REALTIME_DETECTOR, str(metrics_path(REALTIME_DETECTOR))]))
        metrics.append(str(metrics_path(REALTIME_DETECTOR)))
    if p.detectors.radio is not None:
        _radio_detector_stages(b, stages, model)
    if metrics:
        stages.add("dior_detector_table", _stage("dior_detector_table", metrics + CODE["detector_report"], [],
                                                 list(DETECTOR_TABLE)))


def _radio_detector_stages(b: _Builder, stages: "_Stages", model: list[str]) -> None:
    """RaDIO's detector (docs/radio.md#the-detector): its data from the passages and the model, then the MLP."""
    from .methods.dior.detectors import data_sidecars, metrics_path
    from .methods.radio.detector import RADIO_DATA, RADIO_DETECTOR

    radio = b.p.detectors.radio
    meta = str(data_sidecars(RADIO_DATA)[0])
    stages.add("detector_data_radio", _stage(
        "detector_data_radio", model + [radio.passages, *CODE["radio_detector_data"]],
        b.keys([*_detector_keys("radio", radio.DATA_KEYS), "model", "generation.batch_size", "generation.chunk_size"]),
        [RADIO_DATA, meta]))
    stages.add("train_radio_detector", _stage(
        "train_radio_detector", [RADIO_DATA, meta, *CODE["train_radio_detector"]],
        b.keys(_detector_keys("radio", radio.TRAINING_KEYS)), [RADIO_DETECTOR, str(metrics_path(RADIO_DETECTOR))]))


class _Stages(dict):
    """Stages by DVC-safe name: DVC forbids '.' in a stage name (method names may hold one,
    `scaar-theta--scaar-0.9`), and two runs must never map to one name (`a_b` x `c` and `a` x `b_c`)."""

    def add(self, name: str, stage: dict) -> None:
        safe = name.replace(".", "_")
        if safe in self:
            raise ConfigError(f"two DVC stages would both be named {safe!r}; rename a dataset, method or "
                              f"ablation so that they differ")
        self[safe] = stage


def _ablation_stage(b: _Builder, ablation) -> dict:
    """An ablation's report files; deps and params cover every run it reads (see the module doc)."""
    deps, keys = [], [b.key("ablations", ablation.name), "report"]  # report: the tables' intervals
    for dataset in ablation.datasets:
        deps += [f"data/splits/{dataset}.jsonl", *b.exemplars(dataset)]
        keys.append(b.key("datasets", dataset))
        for method in ablation.runs:
            run_deps, run_keys = b.run_inputs(dataset, method)
            deps += run_deps
            keys += run_keys
            if (dataset, method) in b.experiment:  # owned by generate_*/report: order after them
                deps.append(run_dir(dataset, method))
                if ablation.plot != "sugar-entropy":  # that one reads traces, not scores
                    deps.append(score_file(dataset, method))
    if not ablation.runs:  # significance, uncertainty-sweep: the model on one split, a base configuration
        deps += [d for d in [b.model_dir] if d]
        keys += ["seed", "model", *b.method_keys(ablation.base)]
    return _stage(ablation_rule(ablation.name), deps + CODE["ablation"], b.keys(keys), ablation_files(ablation))


def check_outs_disjoint(stages: dict) -> None:
    """No path is inside (or equal to) another stage's out: DVC refuses overlapping outputs, and an out
    written into another's directory would leave that stage dirty."""
    owned = sorted((Path(out).parts, name) for name, stage in stages.items() for out in stage["outs"])
    for (parts, name), (next_parts, next_name) in zip(owned, owned[1:]):
        if next_parts[:len(parts)] == parts:
            raise ConfigError(f"DVC stages {name!r} and {next_name!r} both own {'/'.join(next_parts)}")


def render(params) -> str:
    """The text of dvc.yaml for these params."""
    import yaml

    stages = build_stages(params)
    check_outs_disjoint(stages)
    body = yaml.safe_dump({"stages": stages}, sort_keys=False, default_flow_style=None, width=116)
    return HEADER + body


def check_current(params, path: str | Path = "dvc.yaml") -> None:
    """Raise a ConfigError naming what differs unless `path` is exactly what `render` writes."""
    import yaml

    path = Path(path)
    expected = render(params)
    if not path.is_file():
        raise ConfigError(f"{path} not found: write it with `adaptive-rag dvc-yaml`")
    text = path.read_text(encoding="utf-8")
    if text == expected:
        return
    try:
        have = (yaml.safe_load(text) or {}).get("stages") or {}
    except yaml.YAMLError:
        have = {}
    want = yaml.safe_load(expected)["stages"]
    added, removed = [n for n in want if n not in have], [n for n in have if n not in want]
    changed = [n for n in want if n in have and have[n] != want[n]]
    parts = [f"{label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
             for label, names in (("missing stages", added), ("stages no longer in params", removed),
                                  ("changed stages", changed)) if names]
    detail = "; ".join(parts) or "same stages, different text"
    raise ConfigError(f"{path} is out of date with {params.source} ({detail}); "
                      f"run `adaptive-rag dvc-yaml` to rewrite it")


def stale_message(params, path: str | Path = "dvc.yaml") -> str | None:
    """Why `path` is stale, or None when it is current or absent (a checkout without DVC)."""
    if not Path(path).is_file():
        return None
    try:
        check_current(params, path)
    except ConfigError as exc:
        return str(exc)
    return None
