"""SR-RAG: retrieve once with the question, put the top-k passages in the prompt, then generate."""

from __future__ import annotations

import time

from .registry import register
from .base import Answer, Method
from .parts.rules import read_answer_style, read_generation_rules


@register("sr-rag")
class SingleRoundRetrieval(Method):
    when = 'once, before generating'
    what = 'the question'
    needs_retriever = True
    reads_answer_style = True
    role = "single"

    @classmethod
    def read_settings(cls, section):
        return {"top_k": section.int("top_k", 3, minimum=1), "retriever": cls.read_retriever(section),
                **read_generation_rules(section), **read_answer_style(section)}

    def answer_batch(self, examples) -> list[Answer]:
        start = time.perf_counter()
        hits = [self.search(e.question, self.settings["top_k"]) for e in examples]
        retrieval_share = (time.perf_counter() - start) / max(1, len(examples))
        answers = self.generate_answers([e.question for e in examples], hits, retrievals=1)
        for answer in answers:
            answer.wall_time_s += retrieval_share
        return answers
