"""One generation job: a dataset split x a method -> predictions.jsonl, trace.jsonl, provenance.json.

Why it is built this way:
- Questions are cut into fixed batches by position (batch i = questions [i*C, (i+1)*C), C =
  `generation.chunk_size`). A resumed run and every Accelerate process compute exactly the batches an
  uninterrupted single-process run computes, so their results are identical, not merely close. A batch
  holds several of the model's `batch_size` rows: the engine keeps its rows full until the batch's last
  question (continuous batching), and the batch is what a method advances in lockstep.
- Each finished batch is appended (flushed and fsynced) to a per-process progress log under
  `<out>/.progress/`; a killed job loses at most the batch in flight and a rerun skips what is done,
  but only batches made from the same settings, split, exemplars, model, index and code
  (`progress.ProgressLog` keys each log on them and lets one process write it at a time).
- The three declared outputs are written only when every batch is done, atomically, predictions
  last: Snakemake and DVC never see a half-written run as complete.
- predictions.jsonl holds only what is deterministic for a given params.yaml (reruns compare
  byte-for-byte); wall times and machine facts go to trace.jsonl and provenance.json.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import provenance
from .config import Params, as_dict, dataset_settings
from .data.datasets import Example
from .errors import InputError
from .evaluation.answer import predicted
from .io import read_jsonl, write_json, write_jsonl
from .live_progress import job_progress
from .lm.factory import build_model
from .methods.registry import method_class
from .methods.base import Context, Method
from .progress import ProgressLog, code_digest, digest, file_digest
from .prompts.fewshot import load_exemplars, resolve_exemplars
from .prompts.template import DEFAULT as DEFAULT_TEMPLATE, load_template, resolve_template
from .retrieval.factory import open_retriever

if TYPE_CHECKING:
    from .lm.base import LanguageModel
    from .retrieval import Retriever


def process_rank() -> tuple[int, int, int]:
    """(rank, world size, local rank) as set by `accelerate launch` (or torchrun); (0, 1, 0) otherwise."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def run_generation(params: Params, dataset: str, method: str, split: Path, model_dir: Path | None,
                   index_dir: Path | None, out_dir: Path, progress_bar: bool = True,
                   progress_fd: int | None = None) -> dict | None:
    started, start = provenance.now(), time.perf_counter()
    # where a job's time goes besides the model's calls (docs/performance.md#a-jobs-time-outside-the-model)
    timings = {"process_start_s": provenance.process_age()}
    rank, world, local_rank = process_rank()
    ds, mcfg = params.dataset(dataset), params.method(method)
    settings = mcfg.settings_for(dataset)
    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file (run the splits step first)")]
    size = params.generation.chunk_size  # questions a method advances together; the unit of resume
    batches = [examples[i:i + size] for i in range(0, len(examples), size)]
    batch_ids = [[e.id for e in batch] for batch in batches]

    mark = time.perf_counter()
    retriever = open_method_retriever(params, dataset, method, index_dir)
    timings["retriever_open_s"] = round(time.perf_counter() - mark, 3)
    declared = method_inputs(params, dataset, method)
    inputs = {"settings": digest(params.run_settings(dataset, method)), "split": file_digest(split),
              **{f"input:{name}": file_digest(path) for name, path in declared.items()},
              "exemplars": file_digest(resolve_exemplars(ds.exemplars)),
              "template": file_digest(resolve_template(ds.template or DEFAULT_TEMPLATE)),
              "model": digest(_model_files(params, model_dir)),
              "index": digest(retriever.identity() if retriever else None), "code": code_digest()}
    params.check_model_tokens([(dataset, method)], model_dir)  # before the weights load
    with ProgressLog(out_dir, rank, inputs) as progress:
        done = progress.finished(batch_ids)
        mine = [b for b in range(len(batches)) if b % world == rank and b not in done]
        mark = time.perf_counter()
        lm = build_model(params, model_dir, local_rank) if mine else None
        timings["model_load_s"] = round(time.perf_counter() - mark, 3)
        mark = time.perf_counter()
        runner = build_method(params, dataset, method, lm, retriever, declared)
        timings["method_setup_s"] = round(time.perf_counter() - mark, 3)
        timings["chunks_s"] = []  # each chunk answered here; the first also loads what a method loads lazily
        with job_progress(f"{dataset}/{method}", len(examples), sum(len(batches[b]) for b in done),
                          progress_bar and rank == 0, progress_fd, lm) as bar:
            for b in mine:
                mark = time.perf_counter()
                answers = runner.answer_batch(batches[b])
                timings["chunks_s"].append(round(time.perf_counter() - mark, 3))
                progress.append(b, [question_record(example, answer)
                                    for example, answer in zip(batches[b], answers)])
                bar.update(len(answers))
        spent = lm.time_spent() if lm is not None and hasattr(lm, "time_spent") else None
        if spent is not None:  # the fast path: prompt prefill against decode steps
            timings["engine"] = spent

        if world > 1:
            from accelerate import PartialState

            PartialState().wait_for_everyone()
            if rank != 0:
                return None
        done = progress.finished(batch_ids)
        missing = [b for b in range(len(batches)) if b not in done]
        if missing:
            raise RuntimeError(f"{out_dir}: batches {missing[:5]} were not produced by any process")
        records = [r for b in range(len(batches)) for r in done[b]]

        stats = cache_stats(lm)
        record = {
            "dataset": dataset, "method": method, "method_type": mcfg.type, "questions": len(examples),
            "started": started, "finished": provenance.now(), "wall_time_s": round(time.perf_counter() - start, 2),
            "resumed_batches": len(batches) - len(mine) if world == 1 else None, "processes": world,
            "discarded_batches": progress.discarded,
            "git": provenance.git_state(), "versions": provenance.package_versions(), "host": provenance.host(),
            "seeds": {"global": params.seed, "sample": ds.sample.seed},
            "params": {"model": as_dict(params.model), "generation": as_dict(params.generation),
                       "dataset": dataset_settings(ds), "method": {"name": method, "type": mcfg.type, "settings": settings},
                       "retrieval": as_dict(params.retrieval)},
            "model": lm.identity() if lm is not None else _model_identity(params, model_dir),
            **({"cpu_kernels": lm.kernel_choice} if getattr(lm, "kernel_choice", None) else {}),
            "index": retriever.identity() if retriever else None,
            "call_cache": stats,
            "timings": timings,
        }
        write_jsonl(out_dir / "trace.jsonl", (r["trace"] for r in records))
        write_json(out_dir / "provenance.json", record)
        # Written last: Snakemake and DVC treat a run as finished only when all three outputs exist.
        write_jsonl(out_dir / "predictions.jsonl", (r["prediction"] for r in records))
    shutil.rmtree(progress.directory, ignore_errors=True)
    return record


def open_method_retriever(params: Params, dataset: str, method: str, index_dir: Path | None) -> "Retriever | None":
    """The index a configuration searches (`Params.retriever_kind`), opened; None for a method that
    does not retrieve."""
    if not method_class(params.method(method).type).needs_retriever:
        return None
    if index_dir is None:
        raise InputError(f"method {method!r} retrieves but no index was given (--index)")
    return open_retriever(params.retriever_kind(dataset, method), index_dir, params.retrieval.k1, params.retrieval.b)


def method_inputs(params: Params, dataset: str, method: str, typed: bool = False) -> dict[str, Path]:
    """The files a configuration declares (`Method.inputs`: a calibration, detectors), each checked to
    exist: a missing one is refused naming the Snakemake target that makes it. `typed`: for a question
    typed to `ask`, without those keyed by a split's question ids (`Method.per_question_inputs`)."""
    mcfg = params.method(method)
    cls = method_class(mcfg.type)
    declared = {name: Path(path) for name, path in cls.inputs(mcfg.settings_for(dataset), dataset, method).items()
                if not (typed and name in cls.per_question_inputs)}
    for name, path in declared.items():
        if not path.is_file():
            make = (f"provide {cls.provided_inputs[name]}" if name in cls.provided_inputs
                    else f"snakemake --cores all {path} makes it")
            raise InputError(f"{path}: missing; methods.{method} reads it as its {name} ({make})")
    return declared


def method_context(params: Params, dataset: str, lm: "LanguageModel | None", retriever: "Retriever | None" = None,
                   inputs: dict[str, Path] | None = None, typed: dict | None = None) -> Context:
    """What a method of a run on `dataset` is given: the dataset's exemplars, template and token budget,
    the model's prompt format, the generation and retrieval settings every method shares."""
    ds = params.dataset(dataset)
    return Context(lm=lm, exemplars=load_exemplars(ds.exemplars, ds.num_exemplars),
                   prompt_format=params.model.prompt_format,
                   max_new_tokens=ds.max_new_tokens or params.generation.max_new_tokens, retriever=retriever,
                   answer_fallback_tokens=params.generation.answer_fallback_tokens,
                   query_max_words=params.retrieval.query_max_words,
                   query_max_tokens=params.retrieval.query_max_tokens, inputs=inputs or {},
                   template=load_template(ds.template), typed=typed or {})


def build_method(params: Params, dataset: str, method: str, lm: "LanguageModel | None",
                 retriever: "Retriever | None", inputs: dict[str, Path], typed: dict | None = None) -> Method:
    """The configured method for `dataset`, as every generation runs it (`generate`, `ask`): the model's
    capabilities checked against what the settings need (no model: a resumed run with nothing left)."""
    mcfg = params.method(method)
    cls = method_class(mcfg.type)
    settings = mcfg.settings_for(dataset)
    if lm is not None:
        from .lm.base import require

        require(lm.capabilities, cls.needs_for(settings), f"method {method!r}", params.model.backend)
    return cls(settings, method_context(params, dataset, lm, retriever, inputs, typed))


def cache_stats(lm: "LanguageModel | None") -> dict | None:
    """The call cache's hits and misses so far (None: no model, or no cache configured)."""
    return lm.cache.stats() if lm is not None and hasattr(lm, "cache") else None


def _model_files(params: Params, model_dir: Path | None) -> dict | None:
    """What identifies the weights a run's progress was made with, without loading them: the model
    step's identity record (weights sha256), else each file's size and modification time."""
    if params.model.backend != "hf" or model_dir is None:
        return None  # the API model's name and URL are part of the run's settings
    from .lm.models import IDENTITY

    if (model_dir / IDENTITY).is_file():
        return _model_identity(params, model_dir)
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(model_dir.iterdir()) if p.is_file()}


def _model_identity(params: Params, model_dir: Path | None) -> dict | None:
    """Identity without loading the model (a resumed run that had nothing left to generate)."""
    if params.model.backend == "hf" and model_dir is not None:
        from .lm.models import model_identity

        return {"backend": "hf", "model": model_dir.name, **model_identity(model_dir)}
    return {"backend": params.model.backend, "model": params.model.api.model if params.model.api else None}


def question_record(example: Example, answer) -> dict:
    """One question's line of predictions.jsonl and of trace.jsonl (`ask` shows the same two)."""
    prediction, found = predicted(answer.output, answer.direct, answer.extraction)
    counters = answer.counters()
    record = {
        "prediction": {
            "id": example.id, "question": example.question, "answers": example.answers,
            "answer_type": example.answer_type, "prediction": prediction, "answer_found": found,
            "output": answer.output, "retrievals": answer.retrievals, "counters": counters,
            "retrieved_ids": [p["id"] for p in answer.passages],
        },
        "trace": {
            "id": example.id, "prompt": answer.prompt, "passages": answer.passages, "output": answer.output,
            "steps": answer.steps,
            "counters": {**counters, "prompt_tokens": answer.prompt_tokens,
                         "wall_time_s": round(answer.wall_time_s, 3)},
        },
    }
    if answer.direct:  # only then, so every other method's records stay as they were
        record["prediction"]["direct"] = True
    return record
