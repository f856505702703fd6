rule model:
    output:
        directory(MODEL_DIR),
    params:
        settings=settings_key(P.model.source, *([P.model.architecture] if P.model.architecture != "causal" else [])),
    log:
        "logs/model.log",
    benchmark:
        "logs/benchmarks/model.tsv"
    shell:
        "{CLI} model --out {output:q} > {log:q} 2>&1"
