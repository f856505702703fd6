# SeaKR's calibrated threshold: `delta: calibrated` makes data/calibration/<calibration_dataset>/<method>.json
# an input of that method's generate rule (Method.inputs); this rule writes it from the calibration split.


rule calibrate:
    input:
        split=SPLIT,
        model=MODEL_DIR,
    output:
        "data/calibration/{dataset}/{method}.json",
    params:
        settings=lambda wc: json.dumps(P.run_settings(wc.dataset, wc.method), sort_keys=True),
    log:
        "logs/calibrate/{dataset}/{method}.log",
    shell:
        "{CLI} calibrate --dataset {wildcards.dataset:q} --method {wildcards.method:q} --split {input.split:q} "
        "--model-dir {input.model:q} --out {output:q} > {log:q} 2>&1"
