rule corpus:
    input:
        P.corpus.passages,
    output:
        directory(COLLECTION_DIR),
    log:
        f"logs/corpus/{P.corpus.name}.log",
    benchmark:
        f"logs/benchmarks/corpus-{P.corpus.name}.tsv"
    shell:
        "{CLI} corpus --out {output:q} > {log:q} 2>&1"
