# adaptive-rag workflow. Thin by design: configuration comes from params.yaml, logic from the package
# CLI (`adaptive-rag <step>`); the rules only wire files together. See README.md.
import os
import sys

from adaptive_rag.config import load_params
from adaptive_rag.dvc_stages import stale_message
from adaptive_rag.errors import ConfigError


configfile: "params.yaml"


# The HTML report's front page (`snakemake --report reports/report.html report_all`, docs/workflow.md).
report: "workflow/report/workflow.rst"


try:
    P = load_params("params.yaml")
    P.check_inputs()
except ConfigError as exc:
    sys.exit(f"error: {exc}")
if config != P.raw:
    sys.exit("error: params.yaml is the only configuration; edit it instead of passing --config/--configfile")
_stale = stale_message(P, "dvc.yaml")  # dvc.yaml is generated from params.yaml: DVC would track old stages
if _stale:
    print(f"warning: {_stale}", file=sys.stderr)


include: "workflow/rules/common.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/popularity.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/score.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/ablations.smk"
include: "workflow/rules/detectors.smk"
include: "workflow/rules/complexity.smk"


rule all:
    default_target: True
    input:
        rules.report.output,
        rules.explorer.input,


# Named targets for partial runs and for the coarse DVC stages (dvc.yaml calls these).
rule downloads:
    input:
        [path for d in P.downloads.values() for path in (d.path, *d.extracted_paths())],


rule indexes:
    input:
        INDEX_DIR,
        SEARCH_INDEX,


rule splits:
    input:
        expand(SPLIT, dataset=P.experiment_datasets),


rule runs:
    input:
        expand(f"{RUN_DIR}/predictions.jsonl", dataset=P.experiment_datasets, method=P.experiment_methods),


rule scores:
    input:
        expand(SCORE, dataset=P.experiment_datasets, method=P.experiment_methods),


# What the HTML report shows: `snakemake --report reports/report.html report_all` (or `make report`).
# The main experiment's tables and figures, and those of every ablation already built (its figure
# exists): an ablation not run yet is left out rather than run, since some take hours. Every output of
# a job in this DAG that is flagged `report(...)` (report.smk, ablations.smk) goes into the report.
rule report_all:
    input:
        rules.report.output,
        rules.explorer.input,  # the trace explorer, one page per experiment dataset
        [path for path in expand(f"{ABLATION_PREFIX}.png", ablation=list(P.ablations)) if os.path.exists(path)],
        [path for path in DETECTOR_REPORTS if os.path.exists(path)],  # DioR's detector figures and table, once built
