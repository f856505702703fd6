# Paths and helpers shared by the rules. Every path the workflow writes is defined here once.
import json
import re
import shlex
import sys

from adaptive_rag.config import as_dict, dataset_settings
from adaptive_rag.methods.registry import method_class
from adaptive_rag.prompts.fewshot import resolve_exemplars
from adaptive_rag.retrieval import NAMED_DENSE

# The Python running Snakemake runs the steps too, so an unactivated venv works the same.
CLI = f"{shlex.quote(sys.executable)} -m adaptive_rag --params params.yaml"
MODEL_DIR = P.model_dir
COLLECTION_DIR = P.corpus_dir
INDEX_DIR = P.index_dir("bm25")
DENSE_DIR = P.index_dir("dense")
SEARCH_INDEX = P.index_dir(P.retrieval.type)  # what retrieving methods search unless they name a retriever
SPLIT = "data/splits/{dataset}.jsonl"
RUN_DIR = "data/runs/{dataset}/{method}"
SCORE = "data/scores/{dataset}/{method}.json"
# GPUs per process of a job that runs the model in-process (generate, calibrate, significance, the SeaKR
# sweep): declared as the `gpu` resource, which a cluster executor turns into a GPU request (the SLURM
# plugin's `--gpus`, docs/scale-out.md). None on the CPU, and none for an API model: its server has them.
MODEL_GPUS = 1 if P.model.backend == "hf" and P.model.device.startswith("cuda") else 0


def settings_key(*sections):
    """A stable string of the settings a rule depends on: changing them (and only them) reruns the rule."""
    return json.dumps([as_dict(s) for s in sections], sort_keys=True)


wildcard_constraints:
    dataset="|".join(map(re.escape, P.datasets)),
    method="|".join(map(re.escape, P.methods)),
