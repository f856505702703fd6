"""What every row of a paper's table runs under, and where its rows differ in more than the paper varies.

A table compares methods; it measures them only where its rows answer under one set-up. For each
ablation (a table or figure) and each of its datasets, every row (a method configuration) lists per role
(`none`: no retrieval, `single`: one search then the answer, `multi`: searches while generating;
`methods/parts/setup.py`) its prompt style and template, exemplars, answer budget, index, passages per
search, search cap and passages kept, resolved against the dataset and the profile. Rows of one role
must agree on every field, except those the ablation varies (`vary:` keys) and those a row's own
method fixes as its paper or reference code does (`Own`, with the reason). `differences` lists what is
left, one line each; `adaptive-rag check-params` prints them as warnings, and the test suite holds every
shipped profile to none. A table's Time baseline (`time_baseline`) must be one of its rows, so its
Time of 1.00 is visible.
"""

from __future__ import annotations

from typing import Any

from .methods.parts.setup import ROLES, Own
from .methods.registry import method_class

FIELDS = ("prompt", "template", "exemplars", "answer_tokens", "retriever", "top_k", "max_retrievals", "max_passages")
# an ablation's `vary:` key -> the set-up field it changes on purpose
VARIED = {"prompt_style": "prompt", "template": "template", "max_new_tokens": "answer_tokens",
          "retriever": "retriever", "top_k": "top_k", "max_retrievals": "max_retrievals",
          "max_passages": "max_passages"}


def row_setup(params, dataset: str, method: str) -> dict[str, dict[str, Any]]:
    """{role: {field: value}} of one row, every default resolved (the dataset's template and budget, the
    profile's index); an `Own` value stays wrapped."""
    cfg = params.method(method)
    ds = params.dataset(dataset)
    out = {}
    for role, fields in method_class(cfg.type).setups(cfg.settings_for(dataset)).items():
        fields = dict(fields)
        prompt = fields["prompt"]
        if fields.get("template") is None:
            fields["template"] = ds.template or "default"
        style = prompt.value if isinstance(prompt, Own) else prompt
        fields["exemplars"] = f"{ds.exemplars} ({1 if style == 'qa-oneshot' else ds.num_exemplars})"
        if fields.get("answer_tokens") is None:
            fields["answer_tokens"] = ds.max_new_tokens or params.generation.max_new_tokens
        if "retriever" in fields and fields["retriever"] is None:
            fields["retriever"] = params.retriever_kind(dataset, method)
        out[role] = {k: fields[k] for k in FIELDS if k in fields}
    return out


def ablation_setups(params, ablation) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """{dataset: {row: {role: fields}}} of a table-like ablation's rows (its variants)."""
    rows = [v.method for v in ablation.variants]
    return {d: {m: row_setup(params, d, m) for m in rows} for d in ablation.datasets}


def differences(params, ablation) -> list[str]:
    """One line per set-up field in which two rows of one role differ, on one dataset of the ablation,
    beyond what the ablation varies and what the rows' methods fix themselves; and one line if the Time
    baseline is not a row."""
    lines = []
    rows = [v.method for v in ablation.variants]
    if ablation.time_baseline and rows and ablation.time_baseline not in rows:
        lines.append(f"ablations.{ablation.name}: the Time baseline {ablation.time_baseline} is not one of its rows, "
                     f"so its Time of 1.00 is not shown; vary a method configuration it is made from")
    varied = {VARIED[k] for k in ablation.vary if k in VARIED}
    for dataset, setups in ablation_setups(params, ablation).items():
        for role in ROLES:
            for field in FIELDS:
                if field in varied:
                    continue
                values = {row: roles[role][field] for row, roles in setups.items()
                          if role in roles and field in roles[role] and not isinstance(roles[role][field], Own)}
                if len(set(map(repr, values.values()))) > 1:
                    shown = ", ".join(f"{_short(row, ablation.name)} {value}" for row, value in values.items())
                    lines.append(f"ablations.{ablation.name} ({dataset}): rows that answer {_ROLE[role]} differ in "
                                 f"{field}: {shown}")
    return lines


def setup_table(params, ablation, dataset: str) -> str:
    """A markdown table of every row's set-up on one dataset: role, then each field (own values marked)."""
    setups = ablation_setups(params, ablation)[dataset]
    head = "| row | role | " + " | ".join(FIELDS) + " |\n|" + "---|" * (len(FIELDS) + 2) + "\n"
    body = "".join(f"| {_short(row, ablation.name)} | {role} | "
                   + " | ".join(str(fields.get(f, "–")) for f in FIELDS) + " |\n"
                   for row, roles in setups.items() for role, fields in roles.items())
    return head + body


_ROLE = {"none": "without retrieval", "single": "after one search", "multi": "while searching"}


def _short(row: str, ablation: str) -> str:
    return row[len(ablation) + 2:] if row.startswith(ablation + "--") else row
