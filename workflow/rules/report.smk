# The main experiment's tables and figures. Each output is flagged for Snakemake's HTML report
# (`snakemake --report reports/report.html report_all`, see docs/workflow.md); a report flag is no
# rerun trigger, so flagging changes nothing about when the rule runs.


def main_result(path, subcategory):
    """An output shown in the HTML report under "Main experiment", captioned by workflow/report/<subcategory>.rst."""
    return report(path, caption=f"../report/{subcategory}.rst", category="Main experiment",
                  subcategory=subcategory)


rule report:
    input:
        expand(SCORE, dataset=P.experiment_datasets, method=P.experiment_methods),
    output:
        table_md=main_result("reports/tables/scores.md", "scores"),
        table_csv=main_result("reports/tables/scores.csv", "scores"),
        table_tex=main_result("reports/tables/scores.tex", "scores"),
        figure=main_result("reports/figures/scores.png", "scores"),
        retrievals_md=main_result("reports/tables/retrievals.md", "retrievals"),
        retrievals_csv=main_result("reports/tables/retrievals.csv", "retrievals"),
        retrievals_figure=main_result("reports/figures/retrievals.png", "retrievals"),
    params:
        settings=settings_key(P.report, P.experiment_baseline),  # intervals and baseline: rerun when they change
    log:
        "logs/report.log",
    shell:
        "{CLI} report --scores {input:q} --table-md {output.table_md:q} --table-csv {output.table_csv:q} "
        "--table-tex {output.table_tex:q} --figure {output.figure:q} --retrievals-md {output.retrievals_md:q} "
        "--retrievals-csv {output.retrievals_csv:q} "
        "--retrievals-figure {output.retrievals_figure:q} > {log:q} 2>&1"
