"""Few-shot chain-of-thought prompts in the DRAGIN-lineage format.

Exemplars are data (a JSON list of `{question, reasoning, answer}`), so a user can point params at a
published exemplar set and compare implementations on the same prompt. Each prompt has two
renderings because the choice matters a lot for small instruct models: `raw` (the few-shot text the
reference code feeds every model) and `chat` (the same turns through the model's chat template).
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


def raw_prompt(exemplars: Sequence[Exemplar], question: str, passages: Sequence[Hit] = ()) -> Prompt:
    shots = f"{INSTRUCTION}\n\n" + "".join(f"Question: {e.question}\nAnswer: {e.completion()}\n\n" for e in exemplars)
    context = context_block(passages) if passages else ""
    return Prompt(text=f"{shots}{context}Question: {question}\nAnswer:", shared=len(shots))


def chat_prompt(exemplars: Sequence[Exemplar], question: str, passages: Sequence[Hit] = ()) -> Prompt:
    messages = [{"role": "system", "content": INSTRUCTION}]
    for e in exemplars:
        messages.append({"role": "user", "content": f"Question: {e.question}"})
        messages.append({"role": "assistant", "content": e.completion()})
    shared = len(messages)
    context = context_block(passages) if passages else ""
    messages.append({"role": "user", "content": f"{context}Question: {question}"})
    return Prompt.chat(messages, shared=shared)


def build_prompt(prompt_format: str, exemplars: Sequence[Exemplar], question: str,
                 passages: Sequence[Hit] = ()) -> Prompt:
    return (chat_prompt if prompt_format == "chat" else raw_prompt)(exemplars, question, passages)
