rule split:
    input:
        lambda wc: P.dataset(wc.dataset).path,
    output:
        split=SPLIT,
        meta="data/splits/{dataset}.meta.json",
    params:
        settings=lambda wc: json.dumps([dataset_settings(P.dataset(wc.dataset))], sort_keys=True),
    log:
        "logs/splits/{dataset}.log",
    shell:
        "{CLI} split --dataset {wildcards.dataset:q} --out {output.split:q} > {log:q} 2>&1"
