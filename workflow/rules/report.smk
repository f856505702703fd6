# The main experiment's tables and figures. Each output is flagged for Snakemake's HTML report
# (`snakemake --report reports/report.html report_all`, see docs/workflow.md); a report flag is no
# rerun trigger, so flagging changes nothing about when the rule runs. The report shows HTML and PNG
# inline and every other file as a download, so each table is also written as HTML.
from adaptive_rag.dvc_stages import EXPLORER_PAGE
from adaptive_rag.reports.resolved import settings_digest

TABLES = "reports/tables"


def main_result(path, subcategory):
    """An output shown in the HTML report under "Main experiment", captioned by workflow/report/<subcategory>.rst."""
    return report(path, caption=f"../report/{subcategory}.rst", category="Main experiment",
                  subcategory=subcategory)


rule report:
    input:
        expand(SCORE, dataset=P.experiment_datasets, method=P.experiment_methods),
    output:
        quality_md=main_result(f"{TABLES}/quality.md", "scores"),
        quality_html=main_result(f"{TABLES}/quality.html", "scores"),
        quality_tex=main_result(f"{TABLES}/quality.tex", "scores"),
        cost_md=main_result(f"{TABLES}/cost.md", "scores"),
        cost_html=main_result(f"{TABLES}/cost.html", "scores"),
        cost_tex=main_result(f"{TABLES}/cost.tex", "scores"),
        table_csv=main_result(f"{TABLES}/scores.csv", "scores"),
        figure=main_result("reports/figures/scores.png", "scores"),
        figure_svg=main_result("reports/figures/scores.svg", "scores"),  # drawn on the report's front page
        retrievals_md=main_result(f"{TABLES}/retrievals.md", "retrievals"),
        retrievals_html=main_result(f"{TABLES}/retrievals.html", "retrievals"),
        retrievals_csv=main_result(f"{TABLES}/retrievals.csv", "retrievals"),
        retrievals_figure=main_result("reports/figures/retrievals.png", "retrievals"),
        resolved=main_result("reports/params.yaml", "configuration"),
    params:
        settings=settings_key(P.report, P.experiment_baseline),  # intervals and baseline: rerun when they change
        resolved=settings_digest(P),  # what reports/params.yaml shows: rerun when any of it changes
        tables=TABLES,
    log:
        "logs/report.log",
    shell:
        "{CLI} report --scores {input:q} --quality {params.tables:q}/quality --cost {params.tables:q}/cost "
        "--table-csv {output.table_csv:q} --figure {output.figure:q} --figure-svg {output.figure_svg:q} --retrievals {params.tables:q}/retrievals "
        "--retrievals-figure {output.retrievals_figure:q} --params-yaml {output.resolved:q} > {log:q} 2>&1"


def experiment_runs(wc):
    """The run directories of the experiment's methods on one dataset, in `experiment.methods` order."""
    return [RUN_DIR.format(dataset=wc.dataset, method=m) for m in P.experiment_methods]


def experiment_run_files(wc):
    return [f"{run}/{name}" for run in experiment_runs(wc) for name in ("predictions.jsonl", "trace.jsonl",
                                                                        "provenance.json")]


# The trace explorer (docs/workflow.md#the-trace-explorer): one offline page per experiment dataset with
# every question's steps as the runs recorded them, built from the run files and the corpus (the
# passages' text); no model runs.
rule explorer_page:
    input:
        runs=experiment_run_files,
        corpus=COLLECTION_DIR,
    output:
        page=main_result(EXPLORER_PAGE, "explorer"),
    params:
        runs=experiment_runs,
    log:
        "logs/explorer/{dataset}.log",
    shell:
        "{CLI} explorer --runs {params.runs:q} --corpus {input.corpus:q} --out {output.page:q} > {log:q} 2>&1"


rule explorer:
    input:
        expand(EXPLORER_PAGE, dataset=P.experiment_datasets),
