"""Few-shot chain-of-thought prompts in the DRAGIN-lineage format, and a one-shot direct-answer prompt.

Exemplars are data (a JSON list of `{question, reasoning, answer}`), so a user can point params at a
published exemplar set and compare implementations on the same prompt. Each prompt has two
renderings because the choice matters a lot for small instruct models: `raw` (the few-shot text the
reference code feeds every model) and `chat` (the same turns through the model's chat template).

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

ANSWER_PREFIX = "So the answer is"
INSTRUCTION = (f'Answer the question by reasoning step by step in one or two short sentences, then finish with '
               f'"{ANSWER_PREFIX} <answer>." where <answer> is a short phrase.')
CONTEXT_INSTRUCTION = "Answer in the same format as before, using the context if it helps."
STOP_STRINGS = ("\n\n", "Question:")
PROMPT_STYLES = ("cot", "qa-oneshot")
QA_INSTRUCTION = "Answer the question with a short answer only (a few words), without explanation."
QA_STOP_STRINGS = ("\n", "Q:")


@dataclass(frozen=True)
class Exemplar:
    question: str
    reasoning: str
    answer: str

    def completion(self) -> str:
        return f"{self.reasoning} {ANSWER_PREFIX} {self.answer}."


BUILTIN = "builtin:"
BUILTIN_DIR = Path(__file__).parent / "exemplars"


def resolve_exemplars(spec: str) -> Path:
    """`builtin:<dataset>` names a set shipped with the package; anything else is a file path."""
    if spec.startswith(BUILTIN):
        path = BUILTIN_DIR / f"{spec[len(BUILTIN):]}.json"
        if not path.is_file():
            known = ", ".join(sorted(BUILTIN + p.stem for p in BUILTIN_DIR.glob("*.json")))
            raise InputError(f"no built-in exemplar set {spec!r}; available: {known}")
        return path
    return Path(spec)


def load_exemplars(spec: str | Path, count: int) -> list[Exemplar]:
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
    if count > len(exemplars):
        raise InputError(f"{path}: num_exemplars is {count} but the file has only {len(exemplars)}")
    return exemplars[:count]


def context_block(passages: Sequence[Hit]) -> str:
    lines = [f"[{i}] {p.title}: {p.text}" for i, p in enumerate(passages, 1)]
    return "Context:\n" + "\n".join(lines) + f"\n{CONTEXT_INSTRUCTION}\n"


@dataclass(frozen=True)
class Style:
    """How exemplars and the question are laid out: the chain of thought every method uses, or SUGAR's
    one-shot direct answer (`Q: ... A: ...`, the paper's "one task demonstration")."""

    instruction: str
    question: str  # the label before a question
    answer: str  # the label before an answer (raw prompts)
    direct: bool  # the exemplar's short answer, not its reasoning; one shot only

    def completion(self, e: Exemplar) -> str:
        return e.answer if self.direct else e.completion()

    def shots(self, exemplars: Sequence[Exemplar]) -> Sequence[Exemplar]:
        return exemplars[:1] if self.direct else exemplars


COT = Style(INSTRUCTION, "Question:", "Answer:", direct=False)
QA_ONESHOT = Style(QA_INSTRUCTION, "Q:", "A:", direct=True)


def raw_prompt(exemplars: Sequence[Exemplar], question: str, passages: Sequence[Hit] = (),
               style: Style = COT) -> Prompt:
    shots = f"{style.instruction}\n\n" + "".join(
        f"{style.question} {e.question}\n{style.answer} {style.completion(e)}\n\n" for e in style.shots(exemplars))
    context = context_block(passages) if passages else ""
    return Prompt(text=f"{shots}{context}{style.question} {question}\n{style.answer}", shared=len(shots))


def chat_prompt(exemplars: Sequence[Exemplar], question: str, passages: Sequence[Hit] = (),
                style: Style = COT) -> Prompt:
    messages = [{"role": "system", "content": style.instruction}]
    for e in style.shots(exemplars):
        messages.append({"role": "user", "content": f"{style.question} {e.question}"})
        messages.append({"role": "assistant", "content": style.completion(e)})
    shared = len(messages)
    context = context_block(passages) if passages else ""
    messages.append({"role": "user", "content": f"{context}{style.question} {question}"})
    return Prompt.chat(messages, shared=shared)


def build_prompt(prompt_format: str, exemplars: Sequence[Exemplar], question: str,
                 passages: Sequence[Hit] = (), style: Style = COT) -> Prompt:
    return (chat_prompt if prompt_format == "chat" else raw_prompt)(exemplars, question, passages, style)


def build_qa_prompt(prompt_format: str, exemplars: Sequence[Exemplar], question: str,
                    passages: Sequence[Hit] = ()) -> Prompt:
    """SUGAR's one-shot direct-answer prompt; stops at `QA_STOP_STRINGS`, and the completion is the answer."""
    return build_prompt(prompt_format, exemplars, question, passages, QA_ONESHOT)
