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
    log:
        "logs/report.log",
    shell:
        "{CLI} report --scores {input} --table-md {output.table_md} --table-csv {output.table_csv} "
        "--table-tex {output.table_tex} --figure {output.figure} --retrievals-md {output.retrievals_md} "
        "--retrievals-csv {output.retrievals_csv} "
        "--retrievals-figure {output.retrievals_figure} > {log} 2>&1"
