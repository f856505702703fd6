"""Few-shot prompts: exemplars (data: a JSON list of `{question, reasoning, answer}`), the stop strings
and answer phrase the methods share, and the one entry point that renders a prompt.

The layout itself (instruction, exemplar lines, passages, the question) is a template file
(`template.py`; the project's own is `templates/default.yaml`), so a user can point params at a
published exemplar set *and* a published layout and compare implementations on the same prompt.
Each prompt has two renderings because the choice matters a lot for small instruct models: `raw`
(the few-shot text the reference code feeds every model) and `chat` (the same turns through the
model's chat template).

The `qa-oneshot` style is SUGAR's "one task demonstration of the `Q: question A:` format": the first
exemplar's question and short answer, no reasoning, and the whole completion is the answer: short
answers are what semantic entropy can cluster reliably, and a chain of thought is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..io import read_json
from ..lm.base import Prompt
from ..retrieval import Hit
from .template import Template, load_template, resolve_builtin

ANSWER_PREFIX = "So the answer is"
STOP_STRINGS = ("\n\n", "Question:")
COT, QA_ONESHOT = "cot", "qa-oneshot"
PROMPT_STYLES = (COT, QA_ONESHOT)
QA_STOP_STRINGS = ("\n", "Q:")


def __getattr__(name: str) -> str:
    """`INSTRUCTION` and `QA_INSTRUCTION`: the default template's instructions (read on first use)."""
    if name in ("INSTRUCTION", "QA_INSTRUCTION"):
        return load_template().styles[COT if name == "INSTRUCTION" else QA_ONESHOT].instruction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Exemplar:
    question: str
    reasoning: str
    answer: str


BUILTIN = "builtin:"
BUILTIN_DIR = Path(__file__).parent / "exemplars"


def resolve_exemplars(spec: str) -> Path:
    """`builtin:<dataset>` names a set shipped with the package; anything else is a file path."""
    return resolve_builtin(spec, BUILTIN_DIR, ".json", "exemplar set")


def load_exemplars(spec: str | Path, count: int) -> list[Exemplar]:
    """The first `count` exemplars of the set (check-params checks the count: `Params.check_inputs`)."""
    exemplars = read_exemplars(spec)
    if count > len(exemplars):
        raise InputError(f"{resolve_exemplars(str(spec))}: num_exemplars is {count} but the file has only "
                         f"{len(exemplars)}")
    return exemplars[:count]


def read_exemplars(spec: str | Path) -> list[Exemplar]:
    """Every exemplar of a set (`builtin:<dataset>` or a JSON file), checked field by field."""
    path = resolve_exemplars(str(spec))
    data = read_json(path, "exemplar file")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of exemplars")
    exemplars = []
    for index, record in enumerate(data):
        if not isinstance(record, dict):
            raise InputError(f"{path}: record {index}: expected an object")
        for key in ("question", "reasoning", "answer"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise InputError(f"{path}: record {index}, field '{key}': missing or not a non-empty string")
        exemplars.append(Exemplar(record["question"].strip(), record["reasoning"].strip(), record["answer"].strip()))
    return exemplars


def build_prompt(prompt_format: str, exemplars: Sequence[Exemplar], question: str,
                 passages: Sequence[Hit] = (), style: str = COT, template: Template | None = None,
                 searched: bool = False) -> Prompt:
    """The prompt of one question in `template`'s layout (None: the project's default template);
    `searched`: write the context block even without passages (`Template.render`)."""
    return (template or load_template()).render(prompt_format, exemplars, question, passages, style, searched)


def build_qa_prompt(prompt_format: str, exemplars: Sequence[Exemplar], question: str,
                    passages: Sequence[Hit] = (), template: Template | None = None) -> Prompt:
    """SUGAR's one-shot direct-answer prompt; stops at `QA_STOP_STRINGS`, and the completion is the answer."""
    return build_prompt(prompt_format, exemplars, question, passages, QA_ONESHOT, template)
