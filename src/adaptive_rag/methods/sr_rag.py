"""SR-RAG: retrieve once with the question, put the top-k passages in the prompt, then generate."""

from __future__ import annotations

import time

from . import register
from .base import Answer, Method


@register("sr-rag")
class SingleRoundRetrieval(Method):
    needs_retriever = True

    @classmethod
    def read_settings(cls, section):
        return {"top_k": section.int("top_k", 3, minimum=1)}

    def answer(self, example) -> Answer:
        start = time.perf_counter()
        passages = self.ctx.retriever.search(example.question, self.settings["top_k"])
        result = self.generate_answer(example.question, passages, retrievals=1)
        result.wall_time_s = time.perf_counter() - start
        return result
