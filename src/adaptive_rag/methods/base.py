"""What every method shares: settings, the prompt, and the per-question record it returns."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..prompts.fewshot import STOP_STRINGS, Exemplar, chat_messages, raw_prompt

if TYPE_CHECKING:
    from ..config import Section
    from ..data.datasets import Example
    from ..lm.hf import HFModel
    from ..retrieval import Hit, Retriever


@dataclass
class Answer:
    """One question's outcome: the generated text plus the counters the efficiency tables need."""

    output: str
    prompt: str
    passages: list[dict] = field(default_factory=list)
    retrievals: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    wall_time_s: float = 0.0


@dataclass
class Context:
    """Everything a method may use; built once per run by the runner."""

    lm: "HFModel"
    exemplars: Sequence[Exemplar]
    prompt_format: str
    max_new_tokens: int
    retriever: "Retriever | None" = None


class Method:
    type_name = "?"
    needs_retriever = False

    def __init__(self, settings: dict[str, Any], context: Context):
        self.settings, self.ctx = settings, context

    @classmethod
    def read_settings(cls, section: "Section") -> dict[str, Any]:
        return {}

    def answer(self, example: "Example") -> Answer:
        raise NotImplementedError

    def render(self, question: str, passages: Sequence["Hit"] = ()) -> str:
        if self.ctx.prompt_format == "chat":
            return self.ctx.lm.render_chat(chat_messages(self.ctx.exemplars, question, passages))
        return raw_prompt(self.ctx.exemplars, question, passages)

    def generate_answer(self, question: str, passages: Sequence["Hit"] = (), retrievals: int = 0) -> Answer:
        start = time.perf_counter()
        prompt = self.render(question, passages)
        generation = self.ctx.lm.generate(prompt, self.ctx.max_new_tokens, STOP_STRINGS)
        return Answer(
            output=generation.text, prompt=prompt,
            passages=[{"id": p.id, "title": p.title, "score": p.score} for p in passages],
            retrievals=retrievals, llm_calls=1, prompt_tokens=generation.prompt_tokens,
            generated_tokens=generation.new_tokens, wall_time_s=time.perf_counter() - start,
        )
