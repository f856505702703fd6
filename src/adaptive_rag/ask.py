"""`adaptive-rag ask`: one configured method on one question, and what it did on the way.

Why it is built this way: trying a method on a question must show what a run of the workflow would
do with it, not what a look-alike does. So nothing here implements a method or a prompt: the model,
the index, the exemplars, the template and the method are built by the functions `generate` uses
(`runner.build_method` and the rest), from the paths where the workflow builds them, and the question's
record is the one a run writes (`runner.question_record`). The only addition is a searcher that keeps
the passages it returned, so that their text can be shown beside the ids the trace holds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import Params
from .data.datasets import Example
from .errors import InputError
from .methods.registry import method_class
from .prompts.fewshot import resolve_exemplars
from .prompts.template import DEFAULT as DEFAULT_TEMPLATE
from .runner import build_method, cache_stats, method_inputs, open_method_retriever, question_record

if TYPE_CHECKING:
    from .retrieval import Hit

QUESTION_ID = "ask"  # the record's id: no split question has it, so no calibration split refuses it


class KeptPassages:
    """A searcher that keeps every passage it returned (by id); everything else is the wrapped one's."""

    def __init__(self, retriever):
        self.retriever = retriever
        self.passages: dict[str, "Hit"] = {}

    def search(self, query: str, k: int) -> list["Hit"]:
        hits = self.retriever.search(query, k)
        for hit in hits:
            self.passages.setdefault(hit.id, hit)
        return hits

    def __getattr__(self, name: str) -> Any:  # identity(), a BM25 index's term statistics, ...
        return getattr(self.retriever, name)


@dataclass
class Asked:
    """One question answered: what was used, and the records a run would write for it."""

    params: str
    dataset: str
    method: str
    method_type: str
    settings: dict
    exemplars: str
    template: str
    model_dir: str | None
    prompt_format: str
    model: dict
    index: dict | None
    inputs: dict[str, str]
    call_cache: dict | None
    prediction: dict
    trace: dict
    passages: dict[str, dict] = field(default_factory=dict)  # id -> title, text of every passage searched


def built_model_dir(params: Params) -> Path | None:
    """The `model` step's directory (None for an API model); refused, naming its target, when not built."""
    if params.model.backend != "hf":
        return None
    model_dir = Path(params.model_dir)
    if not model_dir.is_dir():
        raise InputError(f"{model_dir}: missing; model.name {params.model.name!r} is built there "
                         f"(snakemake --cores all {model_dir} makes it)")
    return model_dir


def built_index_dir(params: Params, dataset: str, method: str) -> Path | None:
    """The index the configuration searches (None: it does not retrieve); refused, naming its target,
    when not built."""
    if not method_class(params.method(method).type).needs_retriever:
        return None
    kind = params.retriever_kind(dataset, method)
    index_dir = Path(params.index_dir(kind))
    if not index_dir.is_dir():
        raise InputError(f"{index_dir}: missing; methods.{method} searches the {kind} index "
                         f"(snakemake --cores all {index_dir} makes it)")
    return index_dir


def check_utf8(question: str) -> None:
    """A question from the command line is text: bytes that are not UTF-8 reach Python as lone surrogates
    (`surrogateescape`), which no prompt, cache key or trace can hold; refused naming the first such byte."""
    raw = os.fsencode(question)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[:exc.start].decode("utf-8", "replace")[-20:]
        raise InputError(f"the question is not UTF-8 text: byte 0x{raw[exc.start]:02x} after {before!r} "
                         f"({exc.reason}); pass it in UTF-8 (set the terminal's encoding to UTF-8, or convert it "
                         f"with iconv)") from None


def check_fits(runner, lm, question: str, what: str, encoder_only: bool = False) -> None:
    """The method's first prompt on `question` (exemplars and template included) and its token budget
    within the model's context, measured with the model's own tokenizer before the model runs; refused
    naming the numbers and how long the question may be. A model that states no context (an API model,
    whose server refuses itself) is not checked. `encoder_only`: the budget is the decoder's, apart."""
    limit = getattr(lm, "context_length", None)
    tokenizer = getattr(lm, "tokenizer", None)
    if not limit or tokenizer is None:
        return
    prompt, budget = runner.opening_call(question)
    budget = 0 if encoder_only else budget
    total = len(lm.encode(prompt)[0])
    if total + budget <= limit:
        return
    own = len(tokenizer(question, add_special_tokens=False)["input_ids"])
    room = limit - budget - (total - own)
    fix = (f"shorten the question to at most {room:,} tokens" if room > 0 else
           "even an empty question does not fit: use fewer exemplars (num_exemplars) or a smaller budget")
    raise InputError(f"the question is {own:,} tokens; the first prompt of {what} is {total:,} tokens with it "
                     f"(exemplars and template included), which with the answer budget of {budget:,} new tokens is "
                     f"more than the model's context of {limit:,} tokens: {fix}")


def ask(params: Params, question: str, method: str, dataset: str | None = None) -> Asked:
    """Run `method` on `question` with `dataset`'s exemplars and template (default: the experiment's
    first dataset), exactly as a generation run would answer it."""
    from .lm.factory import build_model

    check_utf8(question)
    if not question.strip():
        raise InputError("the question is empty: pass it as the first argument, quoted")
    question = question.strip()
    dataset = dataset or params.experiment_datasets[0]
    ds, mcfg = params.dataset(dataset), params.method(method)
    model_dir = built_model_dir(params)
    typed = method_class(mcfg.type).typed_question(mcfg.settings_for(dataset), question, params, method)
    index_dir = built_index_dir(params, dataset, method)
    inputs = method_inputs(params, dataset, method, typed=True)
    params.check_model_tokens([(dataset, method)], model_dir)  # before the weights load
    retriever = open_method_retriever(params, dataset, method, index_dir)
    kept = KeptPassages(retriever) if retriever is not None else None
    lm = build_model(params, model_dir, 0)
    runner = build_method(params, dataset, method, lm, kept, inputs, typed)
    check_fits(runner, lm, question, f"methods.{method} on {dataset}", params.model.architecture == "seq2seq")
    example = Example(id=QUESTION_ID, question=question, answers=[], answer_type="span")
    record = question_record(example, runner.answer_batch([example])[0])
    return Asked(params=params.source, dataset=dataset, method=method, method_type=mcfg.type,
                 settings=runner.settings, exemplars=f"{resolve_exemplars(ds.exemplars)} ({ds.num_exemplars})",
                 template=ds.template or DEFAULT_TEMPLATE,
                 model_dir=str(model_dir) if model_dir is not None else None,
                 prompt_format=params.model.prompt_format, model=lm.identity(),
                 index=retriever.identity() if retriever is not None else None,
                 inputs={name: str(path) for name, path in inputs.items()}, call_cache=cache_stats(lm),
                 prediction=record["prediction"], trace=record["trace"],
                 passages={h.id: {"title": h.title, "text": h.text} for h in (kept.passages.values() if kept else ())})
