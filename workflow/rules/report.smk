rule report:
    input:
        expand(SCORE, dataset=P.experiment_datasets, method=P.experiment_methods),
    output:
        table_md="reports/tables/scores.md",
        table_csv="reports/tables/scores.csv",
        table_tex="reports/tables/scores.tex",
        figure="reports/figures/scores.png",
        retrievals_md="reports/tables/retrievals.md",
        retrievals_csv="reports/tables/retrievals.csv",
        retrievals_figure="reports/figures/retrievals.png",
    params:
        settings=settings_key(P.report, P.experiment_baseline),  # intervals and baseline: rerun when they change
    log:
        "logs/report.log",
    shell:
        "{CLI} report --scores {input:q} --table-md {output.table_md:q} --table-csv {output.table_csv:q} "
        "--table-tex {output.table_tex:q} --figure {output.figure:q} --retrievals-md {output.retrievals_md:q} "
        "--retrievals-csv {output.retrievals_csv:q} "
        "--retrievals-figure {output.retrievals_figure:q} > {log:q} 2>&1"
