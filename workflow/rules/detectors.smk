# DioR's trained detectors and RaDIO's (`detectors:` in params.yaml; docs/dior.md#detectors-as-workflow-targets,
# docs/radio.md#the-detector): their training data, the trained weights with held-out metrics, DioR's Figures 4-9
# and its detector table. The weights are at the fixed paths the `dior` and `radio` methods read
# (methods/dior/detectors.py: EARLY_DETECTOR, REALTIME_DETECTOR; methods/radio/detector.py: RADIO_DETECTOR).
# Only rules of configured detectors exist; none is part of the default target.
# Targets: `snakemake --cores all detectors` (everything below), or any rule name, e.g. train_early_detector.
from adaptive_rag.methods.dior.detectors import (EARLY_DATA, EARLY_DETECTOR, REALTIME_DATA, REALTIME_DETECTOR,
                                                  data_sidecars, metrics_path)
from adaptive_rag.methods.radio.detector import RADIO_DATA, RADIO_DETECTOR

DETECTOR_FIGURES = "reports/ablations/dior-fig"  # + 4..9, .png and .csv
DETECTOR_TABLE = "reports/ablations/dior-detectors"  # + .md, .csv, .html
DETECTOR_REPORTS = []  # what `report_all` shows once built (Snakefile)


def detector_result(path):
    """A detector figure or table in the HTML report, under DioR, captioned by workflow/report/dior-detectors.rst."""
    return report(path, caption="../report/dior-detectors.rst", category="DioR", subcategory="detectors")


def sidecar(data, which):
    return str(data_sidecars(data)[0 if which == "meta" else 1])


if P.detectors is not None and P.detectors.early is not None:
    EARLY = P.detectors.early

    rule detector_data_early:
        input:
            splits=expand(SPLIT, dataset=EARLY.datasets),
            model=MODEL_DIR,
            # every other dataset's file: the training questions are checked against their samples
            others=sorted({ds.path for name, ds in P.datasets.items() if name not in EARLY.datasets}),
        output:
            data=EARLY_DATA,
            meta=sidecar(EARLY_DATA, "meta"),
        params:
            settings=settings_key(EARLY.data_settings(), P.model.key(), *(P.datasets[n] for n in sorted(P.datasets))),
        threads: P.generation.threads  # the model's torch threads
        resources:
            gpu=MODEL_GPUS,
        log:
            "logs/detectors/data-early.log",
        benchmark:
            "logs/benchmarks/detector-data-early.tsv"
        shell:
            "{CLI} detector-data --kind early --model-dir {input.model:q} --splits {input.splits:q} "
            "--out {output.data:q} > {log:q} 2>&1"

    rule train_early_detector:
        input:
            data=EARLY_DATA,
            meta=sidecar(EARLY_DATA, "meta"),
        output:
            weights=EARLY_DETECTOR,
            metrics=str(metrics_path(EARLY_DETECTOR)),
        params:
            settings=settings_key(EARLY.features, EARLY.training),
        log:
            "logs/detectors/train-early.log",
        benchmark:
            "logs/benchmarks/train-early-detector.tsv"
        shell:
            "{CLI} train-detector --kind early --data {input.data:q} --out {output.weights:q} > {log:q} 2>&1"

    DETECTOR_PLOTS = [f"{DETECTOR_FIGURES}{n}.{suffix}" for n in range(4, 10) for suffix in ("png", "csv")]

    rule dior_detector_plots:
        input:
            data=EARLY_DATA,
            meta=sidecar(EARLY_DATA, "meta"),
        output:
            [detector_result(path) for path in DETECTOR_PLOTS],
        log:
            "logs/detectors/plots.log",
        shell:
            "{CLI} detector-plots --data {input.data:q} --out-prefix {DETECTOR_FIGURES} > {log:q} 2>&1"

    DETECTOR_REPORTS += DETECTOR_PLOTS


if P.detectors is not None and P.detectors.realtime is not None:
    REALTIME = P.detectors.realtime

    rule detector_data_realtime:
        input:
            passages=REALTIME.passages,
            model=MODEL_DIR,
        output:
            data=REALTIME_DATA,
            meta=sidecar(REALTIME_DATA, "meta"),
            arrays=sidecar(REALTIME_DATA, "arrays"),
        params:
            settings=settings_key(REALTIME.data_settings(), P.model.key(), P.generation.batch_size),
        threads: P.generation.threads  # the model's torch threads
        resources:
            gpu=MODEL_GPUS,
        log:
            "logs/detectors/data-realtime.log",
        benchmark:
            "logs/benchmarks/detector-data-realtime.tsv"
        shell:
            "{CLI} detector-data --kind realtime --model-dir {input.model:q} --out {output.data:q} > {log:q} 2>&1"

    rule train_realtime_detector:
        input:
            data=REALTIME_DATA,
            meta=sidecar(REALTIME_DATA, "meta"),
            arrays=sidecar(REALTIME_DATA, "arrays"),
        output:
            weights=REALTIME_DETECTOR,
            metrics=str(metrics_path(REALTIME_DETECTOR)),
        params:
            settings=settings_key(REALTIME.training),
        log:
            "logs/detectors/train-realtime.log",
        benchmark:
            "logs/benchmarks/train-realtime-detector.tsv"
        shell:
            "{CLI} train-detector --kind realtime --data {input.data:q} --out {output.weights:q} > {log:q} 2>&1"


if P.detectors is not None and P.detectors.radio is not None:
    RADIO = P.detectors.radio

    # RaDIO's MLP (docs/radio.md#the-detector): passages whose entities the model rewrites, then TF-IDF + PCA + MLP
    rule detector_data_radio:
        input:
            passages=RADIO.passages,
            model=MODEL_DIR,
        output:
            data=RADIO_DATA,
            meta=sidecar(RADIO_DATA, "meta"),
        params:
            settings=settings_key(RADIO.data_settings(), P.model.key(), P.generation.batch_size, P.generation.chunk_size),
        threads: P.generation.threads  # the model's torch threads
        resources:
            gpu=MODEL_GPUS,
        log:
            "logs/detectors/data-radio.log",
        benchmark:
            "logs/benchmarks/detector-data-radio.tsv"
        shell:
            "{CLI} detector-data --kind radio --model-dir {input.model:q} --out {output.data:q} > {log:q} 2>&1"

    rule train_radio_detector:
        input:
            data=RADIO_DATA,
            meta=sidecar(RADIO_DATA, "meta"),
        output:
            weights=RADIO_DETECTOR,
            metrics=str(metrics_path(RADIO_DETECTOR)),
        params:
            settings=settings_key(RADIO.training_settings()),
        log:
            "logs/detectors/train-radio.log",
        benchmark:
            "logs/benchmarks/train-radio-detector.tsv"
        shell:
            "{CLI} train-detector --kind radio --data {input.data:q} --out {output.weights:q} > {log:q} 2>&1"


DETECTOR_METRICS = {} if P.detectors is None else {kind: str(metrics_path(path)) for kind, path, cfg in (
    ("early", EARLY_DETECTOR, P.detectors.early), ("realtime", REALTIME_DETECTOR, P.detectors.realtime))
    if cfg is not None}

if DETECTOR_METRICS:  # DioR's detector table

    rule dior_detector_table:
        input:
            **DETECTOR_METRICS,
        output:
            md=detector_result(f"{DETECTOR_TABLE}.md"),
            csv=detector_result(f"{DETECTOR_TABLE}.csv"),
            html=detector_result(f"{DETECTOR_TABLE}.html"),  # the report shows HTML inline, the rest as downloads
        params:
            metrics=" ".join(f"--{kind} {path}" for kind, path in DETECTOR_METRICS.items()),
        log:
            "logs/detectors/table.log",
        shell:
            "{CLI} detector-table {params.metrics} --md {output.md:q} --csv {output.csv:q} --html {output.html:q} "
            "> {log:q} 2>&1"

    DETECTOR_REPORTS += [f"{DETECTOR_TABLE}.{suffix}" for suffix in ("md", "csv", "html")]

if P.detectors is not None:

    rule detectors:
        input:
            [path for path in (EARLY_DETECTOR if P.detectors.early else None,
                               REALTIME_DETECTOR if P.detectors.realtime else None,
                               RADIO_DETECTOR if P.detectors.radio else None) if path],
            DETECTOR_REPORTS,
