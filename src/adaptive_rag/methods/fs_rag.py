"""FS-RAG: retrieve before every sentence, with the previous sentence as the query (the question before
the first).

By default each retrieval replaces the passages in the prompt, as the DRAGIN lineage's FS-RAG does.
`accumulate: true` turns it into IRCoT (Trivedi et al. 2022), the interleaved baseline SeaKR compares
with: the prompt holds every passage retrieved so far, each id once, in retrieval order, because a
multi-hop chain needs the evidence of its earlier steps while a later sentence's query no longer finds
it. IRCoT bounds the prompt by keeping the earliest `max_passages` (15 paragraphs in the paper).
"""

from __future__ import annotations

from .registry import register
from .parts.loop import EveryStepRetrieval


@register("fs-rag")
class FixedSentenceRetrieval(EveryStepRetrieval):
    when = 'before every sentence'
    what = ('the previous sentence (the question first); `accumulate: true` (IRCoT) keeps the earlier '
            'passages too, the first `max_passages` (15)')
    @classmethod
    def read_settings(cls, section):
        settings = {**cls.read_common(section), "accumulate": section.bool("accumulate", False)}
        if settings["accumulate"]:
            settings["max_passages"] = section.int("max_passages", 15, minimum=1)
        return settings

    def retrieve(self, state, query) -> list:
        """Only what the prompt shows accumulates: the answer's passages still record each search as it
        returned, so retrieval is traced the same with and without `accumulate`."""
        held = state.hits
        hits = super().retrieve(state, query)
        if self.settings["accumulate"]:
            ids = {h.id for h in held}
            new = [h for h in hits if h.id not in ids]
            state.hits = [*held, *new][:self.settings["max_passages"]]
        return hits

    def keep_step(self, state, lookahead) -> str:
        sentences = lookahead.sentences
        chars = sentences[0].end if sentences else len(lookahead.text)
        new = state.keep(lookahead, chars)
        if len(sentences) <= 1 and self.rules.finished(lookahead.c):
            state.done = True
        return new
