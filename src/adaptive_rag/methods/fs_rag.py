"""FS-RAG (IRCoT-like): retrieve before every sentence, with the previous sentence as the query (the
question before the first)."""

from __future__ import annotations

from .registry import register
from .parts.loop import FINISHED, EveryStepRetrieval


@register("fs-rag")
class FixedSentenceRetrieval(EveryStepRetrieval):
    when = 'before every sentence'
    what = 'the previous sentence (the question first)'
    @classmethod
    def read_settings(cls, section):
        return cls.read_common(section)

    def keep_step(self, state, lookahead) -> str:
        sentences = lookahead.sentences
        chars = sentences[0].end if sentences else len(lookahead.text)
        new = state.keep(lookahead, chars)
        if len(sentences) <= 1 and lookahead.c.finish_reason in FINISHED:
            state.done = True
        return new
