"""FL-RAG: retrieve every n generated tokens, with the previous window as the query (the question
before the first window)."""

from __future__ import annotations

from .registry import register
from .parts.loop import EveryStepRetrieval


@register("fl-rag")
class FixedLengthRetrieval(EveryStepRetrieval):
    when = 'every `window` generated tokens'
    what = 'the previous window (the question first)'
    @classmethod
    def read_settings(cls, section):
        return {**cls.read_common(section), "window": section.int("window", 25, minimum=1)}

    def step_limit(self, state) -> int:
        return min(self.settings["window"], self.remaining(state))

    def keep_step(self, state, lookahead) -> str:
        new = state.keep(lookahead, len(lookahead.text))
        state.done = self.rules.finished(lookahead.c)
        return new
