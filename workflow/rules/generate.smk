def needs_retriever(method):
    return method_class(P.method(method).type).needs_retriever


def search_index(dataset, method):
    """The one index a run searches (`Params.retriever_kind`: bm25, dense or dense:<name>)."""
    return P.index_dir(P.retriever_kind(dataset, method))


def encoder_inputs(dataset, method, inputs):
    """What the run's searcher loads besides its index: the model directory its SGPT-BE encoder names
    (already an input when the run's own model is that directory)."""
    return {"encoder": path for path in P.index_inputs(P.retriever_kind(dataset, method))
            if path not in inputs.values()}


def generate_inputs(wc):
    dataset = P.dataset(wc.dataset)
    inputs = {"split": SPLIT.format(dataset=wc.dataset), "exemplars": str(resolve_exemplars(dataset.exemplars))}
    if P.model.backend == "hf":
        inputs["model"] = MODEL_DIR
    if needs_retriever(wc.method):
        inputs["index"] = search_index(wc.dataset, wc.method)
        inputs.update(encoder_inputs(wc.dataset, wc.method, inputs))
    method = P.method(wc.method)  # files the method declares (SeaKR's calibrated delta)
    inputs.update(method_class(method.type).inputs(method.settings_for(wc.dataset), wc.dataset, wc.method))
    return inputs


def launcher():
    """Several processes (GPUs) through Accelerate, or the plain CLI."""
    if P.generation.processes > 1:
        return (f"{shlex.quote(sys.executable)} -m accelerate.commands.launch --multi_gpu "
                f"--num_processes {P.generation.processes} -m adaptive_rag --params params.yaml")
    return CLI


def live_progress():
    """The job's progress lines go to Snakemake's stderr, its terminal (adaptive_rag/live_progress.py):
    `3>&2` opens descriptor 3 on it before the redirections send everything else to the log. Not for
    a job of a cluster executor (remote: no terminal there, its progress stays in the log), nor under
    accelerate launch, whose processes do not inherit the descriptor."""
    if workflow.remote_exec or P.generation.processes > 1:
        return ""
    return "--progress-fd 3 3>&2"


# A global, not a `params:` entry: where the progress goes is no reason to rerun a job.
LIVE_PROGRESS = live_progress()


rule generate:
    input:
        unpack(generate_inputs),
    output:
        predictions=f"{RUN_DIR}/predictions.jsonl",
        trace=f"{RUN_DIR}/trace.jsonl",
        provenance=f"{RUN_DIR}/provenance.json",
    params:
        settings=lambda wc: json.dumps(P.run_settings(wc.dataset, wc.method), sort_keys=True),
        launcher=launcher(),
        model=lambda wc, input: f"--model-dir {shlex.quote(input.model)}" if "model" in input.keys() else "",
        index=lambda wc, input: f"--index {shlex.quote(input.index)}" if "index" in input.keys() else "",
        out_dir=RUN_DIR,
    threads: P.generation.threads * P.generation.processes
    resources:
        gpu=P.generation.processes * MODEL_GPUS,  # one per Accelerate process
    log:
        "logs/generate/{dataset}/{method}.log",
    benchmark:
        "logs/benchmarks/generate-{dataset}-{method}.tsv"
    shell:
        "{params.launcher} generate --dataset {wildcards.dataset:q} --method {wildcards.method:q} "
        "--split {input.split:q} {params.model} {params.index} --out-dir {params.out_dir:q} {LIVE_PROGRESS} "
        "> {log:q} 2>&1"
