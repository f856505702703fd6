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
        "{CLI} index --collection {input} --out {output} --threads {threads} --log {log} >> {log} 2>&1"
