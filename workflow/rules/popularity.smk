# Adaptive Retrieval's popularity when a configuration sets `popularity_proxy: corpus-frequency`: per
# question, the passages of the run's corpus that mention its entity (a corpus count, not page views).
# Its generate and calibrate rules declare the file (Method.inputs), so it is made for the run's split
# and for its calibration split. A page-view file the user provides (data/popularity/<dataset>.json,
# the default `popularity`) has no rule: the proxy's files live under data/popularity/corpus-frequency/.

from pathlib import Path

from adaptive_rag.methods.adaptive_retrieval.adaptive_retrieval import PROXY_POPULARITY
from adaptive_rag.methods.adaptive_retrieval.corpus_frequency import entities_path


rule popularity:
    input:
        split=SPLIT,
        collection=COLLECTION_DIR,
    output:
        popularity=PROXY_POPULARITY,
        entities=str(entities_path(Path(PROXY_POPULARITY))),
    threads: P.retrieval.threads
    log:
        "logs/popularity/{dataset}.log",
    shell:
        "{CLI} popularity --dataset {wildcards.dataset:q} --split {input.split:q} --collection {input.collection:q} "
        "--out {output.popularity:q} --threads {threads} > {log:q} 2>&1"
