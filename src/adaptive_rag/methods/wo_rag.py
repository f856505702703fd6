"""wo-RAG: few-shot chain-of-thought with no retrieval; the floor every RAG method is compared to."""

from __future__ import annotations

from .registry import register
from .base import Answer, Method
from .parts.rules import read_answer_style, read_generation_rules


@register("wo-rag")
class WithoutRetrieval(Method):
    when = 'never'
    what = '–'
    reads_answer_style = True
    role = "none"

    @classmethod
    def read_settings(cls, section):
        return {**read_generation_rules(section), **read_answer_style(section)}

    def answer_batch(self, examples) -> list[Answer]:
        return self.generate_answers([e.question for e in examples], [()] * len(examples))
