rule index:
    input:
        COLLECTION_DIR,
    output:
        directory(INDEX_DIR),
    threads: P.retrieval.threads
    log:
        f"logs/index/{P.corpus.name}.log",
    benchmark:
        f"logs/benchmarks/index-{P.corpus.name}.tsv"
    shell:
        "{CLI} index --collection {input:q} --out {output:q} --threads {threads:q} --log {log:q} >> {log:q} 2>&1"


rule dense_index:
    input:
        COLLECTION_DIR,
    output:
        directory(DENSE_DIR),
    params:
        settings=settings_key(P.retrieval.dense),
    threads: P.retrieval.threads
    log:
        f"logs/index/{P.corpus.name}-dense.log",
    benchmark:
        f"logs/benchmarks/dense-index-{P.corpus.name}.tsv"
    shell:
        "{CLI} dense-index --collection {input:q} --out {output:q} --threads {threads:q} > {log:q} 2>&1"
