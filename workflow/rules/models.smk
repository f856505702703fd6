rule model:
    output:
        directory(MODEL_DIR),
    params:
        settings=settings_key(P.model.source),
    log:
        "logs/model.log",
    benchmark:
        "logs/benchmarks/model.tsv"
    shell:
        "{CLI} model --out {output:q} > {log:q} 2>&1"
