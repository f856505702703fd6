def needs_retriever(method):
    return method_class(P.method(method).type).needs_retriever


def search_index(dataset, method):
    return INDEX_DIRS[P.retriever_kind(dataset, method)]


def generate_inputs(wc):
    dataset = P.dataset(wc.dataset)
    inputs = {"split": SPLIT.format(dataset=wc.dataset), "exemplars": str(resolve_exemplars(dataset.exemplars))}
    if P.model.backend == "hf":
        inputs["model"] = MODEL_DIR
    if needs_retriever(wc.method):
        inputs["index"] = search_index(wc.dataset, wc.method)
    return inputs


def launcher():
    """Several processes (GPUs) through Accelerate, or the plain CLI."""
    if P.generation.processes > 1:
        return (f"{shlex.quote(sys.executable)} -m accelerate.commands.launch --multi_gpu "
                f"--num_processes {P.generation.processes} -m adaptive_rag --params params.yaml")
    return CLI


rule generate:
    input:
        unpack(generate_inputs),
    output:
        predictions=f"{RUN_DIR}/predictions.jsonl",
        trace=f"{RUN_DIR}/trace.jsonl",
        provenance=f"{RUN_DIR}/provenance.json",
    params:
        settings=lambda wc: settings_key(
            P.seed, P.model, P.generation.decoding, P.generation.max_new_tokens, P.generation.batch_size,
            P.generation.answer_fallback_tokens,
            P.method(wc.method), P.dataset(wc.dataset), P.retrieval if needs_retriever(wc.method) else None,
        ),
        launcher=launcher(),
        model=lambda wc, input: f"--model-dir {input.model}" if "model" in input.keys() else "",
        index=lambda wc, input: f"--index {input.index}" if "index" in input.keys() else "",
        out_dir=RUN_DIR,
    threads: P.generation.threads * P.generation.processes
    resources:
        gpu=P.generation.processes if P.model.device.startswith("cuda") else 0,
    log:
        "logs/generate/{dataset}/{method}.log",
    benchmark:
        "logs/benchmarks/generate-{dataset}-{method}.tsv"
    shell:
        "{params.launcher} generate --dataset {wildcards.dataset} --method {wildcards.method} "
        "--split {input.split} {params.model} {params.index} --out-dir {params.out_dir} > {log} 2>&1"
