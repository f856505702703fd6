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


# The one encoder of `retrieval.dense: {encoder: ...}` (methods search it as `dense`). Its input, params
# and command are what they were before named encoders, so an index built then is not rebuilt.
if P.retrieval.dense is not None:

    rule dense_index:
        input:
            COLLECTION_DIR,
        output:
            directory(DENSE_DIR),
        params:
            settings=settings_key(P.retrieval.dense.key()),
        threads: P.retrieval.threads
        log:
            f"logs/index/{P.corpus.name}-dense.log",
        benchmark:
            f"logs/benchmarks/dense-index-{P.corpus.name}.tsv"
        shell:
            "{CLI} dense-index --collection {input:q} --out {output:q} --threads {threads:q} > {log:q} 2>&1"


def named_dense_inputs(wc):
    """The corpus, and the model step's directory when the encoder is that model (SGPT-BE over SmolLM2)."""
    return {"collection": COLLECTION_DIR, **{"encoder": path for path in P.index_inputs(NAMED_DENSE + wc.encoder)}}


# Each named encoder of `retrieval.dense: {<name>: {...}}` has its own index, data/index/<corpus>/dense-<name>/
# (methods search it as `dense:<name>`); a job is planned only for the encoders some run searches.
if P.retrieval.encoders:

    rule named_dense_index:
        input:
            unpack(named_dense_inputs),
        output:
            directory(P.index_dir(NAMED_DENSE + "{encoder}")),
        params:
            settings=lambda wc: settings_key(P.retrieval.encoders[wc.encoder].key()),
        wildcard_constraints:
            encoder="|".join(map(re.escape, P.retrieval.encoders)),
        threads: P.retrieval.threads
        log:
            f"logs/index/{P.corpus.name}-dense-{{encoder}}.log",
        benchmark:
            f"logs/benchmarks/dense-index-{P.corpus.name}-{{encoder}}.tsv"
        shell:
            "{CLI} dense-index --encoder {wildcards.encoder:q} --collection {input.collection:q} --out {output:q} "
            "--threads {threads:q} > {log:q} 2>&1"
