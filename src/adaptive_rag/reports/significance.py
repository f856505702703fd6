"""Word significance in one generated sentence, ATTN vs SCW (SCAAR Figure 3): the normalised weight
r'(w) each weighting gives every word of the first look-ahead sentence of one question."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import atomic_write, read_jsonl
from .figures import save


def word_significance(params, dataset: str, question_id: str | None, split: Path, model_dir: Path,
                      similarity: str) -> tuple[str, str, list[dict]]:
    from ..data.datasets import Example
    from ..lm.base import Extras
    from ..methods.components import TriggerContext, attention_weights, scw_weights
    from ..methods.contribution import load_similarity
    from ..methods.lookahead import LookAhead
    from ..prompts.fewshot import STOP_STRINGS, build_prompt, load_exemplars
    from ..runner import build_model

    examples = [Example.from_dict(r) for r in read_jsonl(split, "split file")]
    example = next((e for e in examples if question_id in (None, e.id)), None)
    if example is None:
        raise InputError(f"{split}: no question with id {question_id!r} (significance.question)")
    ds = params.dataset(dataset)
    lm = build_model(params, model_dir)
    prompt = build_prompt(params.model.prompt_format, load_exemplars(ds.exemplars, ds.num_exemplars), example.question)
    budget = ds.max_new_tokens or params.generation.max_new_tokens
    lookahead = LookAhead(lm.generate([prompt], budget, STOP_STRINGS, Extras(attention_layer=-1))[0])
    if not lookahead.sentences:
        raise InputError(f"question {example.id!r}: the model generated no sentence to analyse")
    sentence = lookahead.sentences[0]
    units = lookahead.word_units(sentence)
    context = TriggerContext(question=example.question, similarity=load_similarity(similarity))
    attn = attention_weights(lookahead, sentence, units, context)
    scw = scw_weights(lookahead, sentence, units, context)
    rows = [{"position": k, "word": u.text, "ATTN": a, "SCW": s} for k, (u, a, s) in enumerate(zip(units, attn, scw))]
    return example.question, sentence.text, rows


def write_significance(sentence: str, rows: list[dict], csv: Path, png: Path, question: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    frame = pd.DataFrame(rows)
    with atomic_write(csv) as handle:
        frame.to_csv(handle, index=False, float_format="%.4f", lineterminator="\n")
    long = frame.melt(id_vars=["position", "word"], value_vars=["ATTN", "SCW"], var_name="weighting",
                      value_name="weight")
    long["label"] = long["position"].astype(str) + " " + long["word"]
    sns.set_theme(style="whitegrid")
    figure, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(frame) + 2), 4.2))
    sns.barplot(data=long, x="label", y="weight", hue="weighting", ax=ax)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("word of the look-ahead sentence")
    ax.set_ylabel("normalised weight r'(w) (mean 1)")
    ax.set_xticks(ax.get_xticks(), [t.get_text().split(" ", 1)[1] for t in ax.get_xticklabels()], rotation=45,
                  ha="right")
    ax.set_title(f"Q: {question}\nsentence: {sentence}", fontsize=9)
    figure.tight_layout()
    save(figure, png)
