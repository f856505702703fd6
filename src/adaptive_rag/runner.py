"""One generation job: a dataset split x a method -> predictions.jsonl, trace.jsonl, provenance.json.

predictions.jsonl holds only what is deterministic for a given params.yaml (so reruns compare
byte-for-byte); wall times and other machine-dependent facts go to trace.jsonl and provenance.json.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from . import provenance
from .config import Params, as_dict
from .data.datasets import Example
from .evaluation.answer import extract_answer
from .io import read_jsonl, write_json, write_jsonl
from .lm.models import model_identity
from .methods import method_class
from .methods.base import Context
from .prompts.fewshot import load_exemplars


def run_generation(params: Params, dataset: str, method: str, split: Path, model_dir: Path,
                   index_dir: Path | None, out_dir: Path) -> dict:
    started, start = provenance.now(), time.perf_counter()
    ds, mcfg = params.dataset(dataset), params.method(method)
    cls = method_class(mcfg.type)
    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file (run the splits step first)")]
    exemplars = load_exemplars(ds.exemplars, ds.num_exemplars)

    retriever = None
    if cls.needs_retriever:
        if index_dir is None:
            raise ValueError(f"method {method!r} retrieves but no index was given")
        from .retrieval.bm25 import BM25Retriever

        retriever = BM25Retriever(index_dir, params.retrieval.k1, params.retrieval.b)
    from .lm.hf import HFModel

    lm = HFModel(model_dir, params.model.dtype, params.model.device, params.generation.threads, params.seed)
    runner = cls(mcfg.settings, Context(lm=lm, exemplars=exemplars, prompt_format=params.model.prompt_format,
                                         max_new_tokens=ds.max_new_tokens or params.generation.max_new_tokens, retriever=retriever))

    predictions, traces = [], []
    for example in tqdm(examples, desc=f"{dataset}/{method}", unit=" q"):
        result = runner.answer(example)
        prediction, found = extract_answer(result.output)
        predictions.append({
            "id": example.id, "question": example.question, "answers": example.answers,
            "answer_type": example.answer_type,
            "prediction": prediction, "answer_found": found, "output": result.output,
            "retrievals": result.retrievals, "retrieved_ids": [p["id"] for p in result.passages],
        })
        traces.append({
            "id": example.id, "prompt": result.prompt, "passages": result.passages, "output": result.output,
            "counters": {"retrievals": result.retrievals, "llm_calls": result.llm_calls,
                         "prompt_tokens": result.prompt_tokens, "generated_tokens": result.generated_tokens,
                         "wall_time_s": round(result.wall_time_s, 3)},
        })

    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / "trace.jsonl", traces)
    record = {
        "dataset": dataset, "method": method, "method_type": mcfg.type, "questions": len(examples),
        "started": started, "finished": provenance.now(), "wall_time_s": round(time.perf_counter() - start, 2),
        "git": provenance.git_state(), "versions": provenance.package_versions(), "host": provenance.host(),
        "seeds": {"global": params.seed, "sample": ds.sample.seed},
        "params": {"model": as_dict(params.model), "generation": as_dict(params.generation),
                   "dataset": as_dict(ds), "method": as_dict(mcfg), "retrieval": as_dict(params.retrieval)},
        "model": {"dir": str(model_dir), **model_identity(model_dir)},
        "index": retriever.identity() if retriever else None,
        "torch_threads": lm.torch.get_num_threads(),
    }
    write_json(out_dir / "provenance.json", record)
    # Written last: Snakemake and DVC treat a run as finished only when all three outputs exist.
    write_jsonl(out_dir / "predictions.jsonl", predictions)
    return record
