rule score:
    input:
        predictions=f"{RUN_DIR}/predictions.jsonl",
        trace=f"{RUN_DIR}/trace.jsonl",
        provenance=f"{RUN_DIR}/provenance.json",  # call-cache hits: whether its wall times compare (time_rel)
    output:
        SCORE,
    params:
        run_dir=RUN_DIR,
    log:
        "logs/score/{dataset}/{method}.log",
    shell:
        "{CLI} score --dataset {wildcards.dataset:q} --method {wildcards.method:q} --run-dir {params.run_dir:q} "
        "--out {output:q} > {log:q} 2>&1"
