rule score:
    input:
        predictions=f"{RUN_DIR}/predictions.jsonl",
        trace=f"{RUN_DIR}/trace.jsonl",
    output:
        SCORE,
    params:
        run_dir=RUN_DIR,
    log:
        "logs/score/{dataset}/{method}.log",
    shell:
        "{CLI} score --dataset {wildcards.dataset} --method {wildcards.method} --run-dir {params.run_dir} "
        "--out {output} > {log} 2>&1"
