# Thresholds read off data (SeaKR's `delta: calibrated`, SUGAR's `thresholds: calibrated | mean`): a
# configuration's `calibration_dataset` makes data/calibration/<calibration_dataset>/<method>.json an input
# of its generate rule (Method.inputs); this one rule writes it from the calibration split, whatever the
# method type (`adaptive-rag calibrate` asks the type what to compute). Types that answer with retrieval
# while calibrating (SUGAR) also need their index, which the step finds where the index rule builds it;
# files the configuration declares besides its calibration (Adaptive Retrieval's popularity) are inputs too.

from adaptive_rag.calibration import calibration_inputs


def calibrate_inputs(wc):
    inputs = {"split": SPLIT.format(dataset=wc.dataset), "model": MODEL_DIR}
    if method_class(P.method(wc.method).type).calibration_retrieves:
        inputs["index"] = search_index(wc.dataset, wc.method)
        inputs.update(encoder_inputs(wc.dataset, wc.method, inputs))
    inputs.update(calibration_inputs(P, wc.dataset, wc.method))  # files the method reads (a popularity file)
    return inputs


rule calibrate:
    input:
        unpack(calibrate_inputs),
    output:
        "data/calibration/{dataset}/{method}.json",
    params:
        settings=lambda wc: json.dumps(P.run_settings(wc.dataset, wc.method), sort_keys=True),
    threads: P.generation.threads  # the model's torch threads: two calibrations at once would each take them all
    resources:
        gpu=MODEL_GPUS,
    log:
        "logs/calibrate/{dataset}/{method}.log",
    shell:
        "{CLI} calibrate --dataset {wildcards.dataset:q} --method {wildcards.method:q} --split {input.split:q} "
        "--model-dir {input.model:q} --out {output:q} > {log:q} 2>&1"
