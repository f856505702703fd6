"""Word significance in one generated sentence, ATTN vs SCW (SCAAR Figure 3): the normalised weight
r'(w) each weighting gives every word of the first look-ahead sentence of one question.

An analysis step, not a method: it builds the configured model once, looks ahead on one question and
returns rows; `reports.significance` draws them.
"""

from __future__ import annotations

from pathlib import Path

from ...data.datasets import Example
from ...errors import InputError
from ...io import read_jsonl
from ...lm.base import Extras
from ...lm.factory import build_model
from ...prompts.fewshot import STOP_STRINGS, build_prompt, load_exemplars
from ...prompts.template import load_template
from .components import TriggerContext, attention_weights, normalise, scw_weights
from .contribution import load_similarity
from .lookahead import LookAhead


def word_significance(params, dataset: str, question_id: str | None, split: Path, model_dir: Path,
                      similarity: str) -> tuple[str, str, list[dict]]:
    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file")]
    example = next((e for e in examples if question_id in (None, e.id)), None)
    if example is None:
        raise InputError(f"{split}: no question with id {question_id!r} (significance.question)")
    ds = params.dataset(dataset)
    lm = build_model(params, model_dir)
    prompt = build_prompt(params.model.prompt_format, load_exemplars(ds.exemplars, ds.num_exemplars), example.question,
                          template=load_template(ds.template))
    budget = ds.max_new_tokens or params.generation.max_new_tokens
    lookahead = LookAhead(lm.generate([prompt], budget, STOP_STRINGS, Extras(attention_layer=-1))[0])
    if not lookahead.sentences:
        raise InputError(f"question {example.id!r}: the model generated no sentence to analyse")
    sentence = lookahead.sentences[0]
    units = lookahead.word_units(sentence)
    context = TriggerContext(question=example.question, similarity=load_similarity(similarity))
    # on one scale: each weighting's raw weights normalised by Eq. 2 (mean 1 over the sentence)
    attn = normalise(attention_weights(lookahead, sentence, units, context))
    scw = normalise(scw_weights(lookahead, sentence, units, context))
    rows = [{"position": k, "word": u.text, "ATTN": a, "SCW": s} for k, (u, a, s) in enumerate(zip(units, attn, scw))]
    return example.question, sentence.text, rows
