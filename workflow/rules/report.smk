# The main experiment's tables and figures. Each output is flagged for Snakemake's HTML report
# (`snakemake --report reports/report.html report_all`, see docs/workflow.md); a report flag is no
# rerun trigger, so flagging changes nothing about when the rule runs. The report shows HTML and PNG
# inline and every other file as a download, so each table is also written as HTML.
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
        "--table-csv {output.table_csv:q} --figure {output.figure:q} --retrievals {params.tables:q}/retrievals "
        "--retrievals-figure {output.retrievals_figure:q} --params-yaml {output.resolved:q} > {log:q} 2>&1"
