def generate_inputs(wc):
    dataset = P.dataset(wc.dataset)
    inputs = {"split": SPLIT.format(dataset=wc.dataset), "model": MODEL_DIR, "exemplars": str(resolve_exemplars(dataset.exemplars))}
    if method_class(P.method(wc.method).type).needs_retriever:
        inputs["index"] = INDEX_DIR
    return inputs


rule generate:
    input:
        unpack(generate_inputs),
    output:
        predictions=f"{RUN_DIR}/predictions.jsonl",
        trace=f"{RUN_DIR}/trace.jsonl",
        provenance=f"{RUN_DIR}/provenance.json",
    params:
        settings=lambda wc: settings_key(
            P.seed, P.model, P.generation, P.method(wc.method), P.dataset(wc.dataset),
            P.retrieval if method_class(P.method(wc.method).type).needs_retriever else None,
        ),
        index=lambda wc, input: f"--index {input.index}" if "index" in input.keys() else "",
        out_dir=RUN_DIR,
    threads: P.generation.threads
    log:
        "logs/generate/{dataset}/{method}.log",
    benchmark:
        "logs/benchmarks/generate-{dataset}-{method}.tsv"
    shell:
        "{CLI} generate --dataset {wildcards.dataset} --method {wildcards.method} --split {input.split} "
        "--model-dir {input.model} {params.index} --out-dir {params.out_dir} > {log} 2>&1"
