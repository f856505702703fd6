rule report:
    input:
        expand(SCORE, dataset=P.experiment_datasets, method=P.experiment_methods),
    output:
        table_md="reports/tables/scores.md",
        table_csv="reports/tables/scores.csv",
        figure="reports/figures/scores.png",
    log:
        "logs/report.log",
    shell:
        "{CLI} report --scores {input} --table-md {output.table_md} --table-csv {output.table_csv} "
        "--figure {output.figure} > {log} 2>&1"
