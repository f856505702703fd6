"""What every method shares: settings, the prompt, and the per-question record it returns.

Methods answer a batch of questions at once so the backend can advance them in lockstep (one
batched forward per step) instead of one question at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..prompts.fewshot import STOP_STRINGS, Exemplar, build_prompt

if TYPE_CHECKING:
    from ..config import Section
    from ..data.datasets import Example
    from ..lm.base import LanguageModel
    from ..retrieval import Hit, Retriever


@dataclass
class Answer:
    """One question's outcome: the generated text plus the counters the efficiency tables need."""

    output: str
    prompt: Any  # the prompt as traces record it (text, or chat messages)
    passages: list[dict] = field(default_factory=list)
    retrievals: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    wall_time_s: float = 0.0


@dataclass
class Context:
    """Everything a method may use; built once per run by the runner."""

    lm: "LanguageModel"
    exemplars: Sequence[Exemplar]
    prompt_format: str
    max_new_tokens: int
    retriever: "Retriever | None" = None


class Method:
    type_name = "?"
    needs_retriever = False
    needs: frozenset[str] = frozenset()  # model capabilities beyond token log-probabilities

    def __init__(self, settings: dict[str, Any], context: Context):
        self.settings, self.ctx = settings, context

    @classmethod
    def read_settings(cls, section: "Section") -> dict[str, Any]:
        return {}

    def answer_batch(self, examples: Sequence["Example"]) -> list[Answer]:
        raise NotImplementedError

    def generate_answers(self, questions: Sequence[str], passages: Sequence[Sequence["Hit"]],
                         retrievals: int = 0) -> list[Answer]:
        """One greedy call for the whole batch; each question's wall time is its share of the call."""
        start = time.perf_counter()
        prompts = [build_prompt(self.ctx.prompt_format, self.ctx.exemplars, q, p)
                   for q, p in zip(questions, passages)]
        continuations = self.ctx.lm.generate(prompts, self.ctx.max_new_tokens, STOP_STRINGS)
        share = (time.perf_counter() - start) / max(1, len(questions))
        return [
            Answer(output=c.text.strip(), prompt=prompt.readable(),
                   passages=[{"id": h.id, "title": h.title, "score": h.score} for h in hits],
                   retrievals=retrievals, llm_calls=1, prompt_tokens=c.prompt_tokens or 0,
                   generated_tokens=len(c.tokens), wall_time_s=share)
            for prompt, c, hits in zip(prompts, continuations, passages)
        ]
