# Adaptive-RAG's query-complexity classifier (`complexity_classifier:` in params.yaml; docs/methods.md#adaptive-rag):
# the labels, made from the three strategies' runs on the labelled datasets (each run the generate rule's
# target), and the classifier trained on them with its held-out metrics beside the weights. The weights are at
# the fixed path the `adaptive-rag` method reads (methods/adaptive_rag/classifier.py: CLASSIFIER), an input of
# its runs. The rules exist only when the section is configured; none is part of the default target.
# Targets: `snakemake --cores all complexity_classifier` (both), or complexity_labels.
from adaptive_rag.methods.adaptive_rag.classifier import CLASSIFIER, LABELS_FILE, metrics_path

if P.complexity_classifier is not None:
    COMPLEXITY = P.complexity_classifier

    rule complexity_labels:
        input:
            [f"{RUN_DIR}/predictions.jsonl".format(dataset=dataset, method=method)
             for dataset in COMPLEXITY.datasets for method in COMPLEXITY.strategies.values()],
        output:
            LABELS_FILE,
        params:
            settings=settings_key({key: getattr(COMPLEXITY, key) for key in COMPLEXITY.LABEL_KEYS}),
        log:
            "logs/complexity/labels.log",
        shell:
            "{CLI} complexity-labels --runs data/runs --out {output:q} > {log:q} 2>&1"

    rule train_complexity_classifier:
        input:
            LABELS_FILE,
        output:
            weights=CLASSIFIER,
            metrics=str(metrics_path(CLASSIFIER)),
        params:
            settings=settings_key(COMPLEXITY.training_settings()),
        threads: 1  # a small job: the questions' embeddings and a regression (t5: one GPU where the model has one)
        resources:
            gpu=1 if COMPLEXITY.classifier == "t5" and MODEL_GPUS else 0,
        log:
            "logs/complexity/train.log",
        benchmark:
            "logs/benchmarks/train-complexity-classifier.tsv"
        shell:
            "{CLI} train-complexity-classifier --labels {input:q} --out {output.weights:q} > {log:q} 2>&1"

    rule complexity_classifier:
        input:
            rules.train_complexity_classifier.output,
