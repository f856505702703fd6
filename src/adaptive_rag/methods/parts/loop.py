"""The shared dynamic-retrieval loop of the DRAGIN lineage (FL-RAG, FS-RAG, FLARE, DRAGIN, SCAAR, DioR).

Two shapes, one implementation of everything around them (prompting, budgets, stop rules, the
answer fallback, counters and traces):
- `TriggeredRetrieval`: generate a look-ahead without passages, split it into sentences, ask the
  method's trigger ("when") about each sentence in order; at the first that fires, truncate there,
  build the method's query ("what"), retrieve top-k and regenerate from the truncation point with
  the passages; keep the regenerated text (all of it, or only its first sentence as the reference
  code does), continue.
- `EveryStepRetrieval`: retrieve before every step with the previous step's text (the question on
  the first), generate the step with the passages (FL-RAG: a fixed number of tokens; FS-RAG: a
  sentence).
Under greedy decoding, checking the sentences of one long look-ahead in order gives the same text as
generating and checking one sentence at a time, at a fraction of the calls.

A question stops when its text says "the answer is", when a step adds nothing, when the model ends
its answer, or at the token budget. Questions advance in lockstep: every step is one batched call.
The loop rules (stop strings, how far each call looks ahead, how "the answer is" is checked, whether
the end-of-turn token is kept, how kept pieces are joined) are settings (`rules.py`), read with the
other common settings.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from ...lm.base import NO_EXTRAS, Continuation, Extras
from ..base import Answer, Method, count_sentences, step_record
from . import joining
from .lookahead import LookAhead
from .rules import read_loop_rules

if TYPE_CHECKING:
    from .components import Detection

KEEP = ("all", "first-sentence")


class QuestionState:
    """One question's progress: the answer kept so far, the passages in use, counters and trace."""

    def __init__(self, example, prompt):
        self.example = example
        self.text = ""  # the answer kept so far (exact generated text: it is fed back as the prefix)
        self.kept_tokens = 0
        self.hits: Sequence = ()
        self.query = example.question  # EveryStepRetrieval's next query
        self.done = False
        self.answer = Answer(output="", prompt=prompt)
        self.next_prefix: str | None = None  # the next call's prefix when it is not `text` (`joining: dragin-code`)
        self.before = ""  # `joining: dragin-code`: the look-ahead's sentences before the fired one

    def keep(self, lookahead: LookAhead, chars: int) -> str:
        """Append the first `chars` characters of a continuation (trailing space dropped: the next
        continuation brings its own leading space, as the model tokenizes it)."""
        new = lookahead.text[:chars].rstrip()
        self.text += new
        self.kept_tokens += lookahead.tokens_within(len(new))
        return new

    def retrieved(self, hits, step: int) -> None:
        self.hits = hits
        self.answer.retrievals += 1
        self.answer.passages.extend({"id": h.id, "title": h.title, "score": h.score, "retrieval": step}
                                    for h in hits)


class DynamicMethod(Method):
    needs_retriever = True

    @classmethod
    def read_common(cls, section, keep: str = "all") -> dict[str, Any]:
        rules = read_loop_rules(section)
        if rules.get("joining", "exact") != "exact" and not issubclass(cls, TriggeredRetrieval):
            raise section.fail("joining", "dragin-code joins the pieces of the triggered loop (FLARE, DRAGIN); "
                                          "remove it from this method")
        if rules.get("empty_query", "question") != "question" and not issubclass(cls, TriggeredRetrieval):
            raise section.fail("empty_query", "only a trigger's query can come out empty (FLARE, DRAGIN and their "
                                              "kin); remove it from this method")
        return {
            "top_k": section.int("top_k", 3, minimum=1),
            "max_retrievals": section.int("max_retrievals", None, minimum=0, allow_none=True),
            "keep": section.str("keep", keep, KEEP),
            "retriever": cls.read_retriever(section),
            **rules,
        }

    def answer_batch(self, examples) -> list[Answer]:
        states = [QuestionState(e, self.cot_prompt(e.question).readable()) for e in examples]
        while True:
            active = [s for s in states if not s.done]
            if not active:
                break
            before = [s.text for s in active]
            self.step(active)
            for state, old in zip(active, before):
                if state.done:
                    continue
                if self.rules.joining == "dragin-code":  # src/generate.py: no growth in length, or over budget
                    stalled = len(state.text) <= len(old)
                    over = self.text_tokens(state.text) > self.ctx.max_new_tokens
                else:
                    stalled, over = state.text == old, state.kept_tokens >= self.ctx.max_new_tokens
                if stalled or self.rules.says_answer(state.text) or over:
                    state.done = True
        for state in states:
            state.answer.output = state.text.strip()
        answers = [s.answer for s in states]
        self.complete_answers([e.question for e in examples], answers)
        return answers

    def step(self, active: list[QuestionState]) -> None:
        raise NotImplementedError

    def text_tokens(self, text: str) -> int:
        """`len(tokenizer.encode(text))`, the reference loops' budget check (`joining: dragin-code`)."""
        tokenizer = getattr(self.ctx.lm, "tokenizer", None)
        if tokenizer is None:
            from ...errors import ConfigError

            raise ConfigError("joining: dragin-code counts the text's tokens with the model's tokenizer, which "
                              "this backend does not give (the hf backend does); use joining: exact")
        return len(tokenizer.encode(text))

    def capped(self, state: QuestionState) -> bool:
        cap = self.settings["max_retrievals"]
        return cap is not None and state.answer.retrievals >= cap

    def generate(self, states: Sequence[QuestionState], with_passages: bool, limits: Sequence[int],
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """One batched call for every question, each with its own token limit (what is left of its
        budget: calls split by limit would decode mostly one row at a time); counts the call, its tokens
        and sentences."""
        if not states:
            return []
        start = time.perf_counter()
        searched = with_passages and self.rules.empty_query == "search"
        prompts = [self.cot_prompt(s.example.question, s.hits if with_passages else (), searched=searched)
                   .with_prefix(s.text if s.next_prefix is None else s.next_prefix) for s in states]
        same = len(set(limits)) == 1
        results = [self.rules.ended(c, self.ctx.lm) for c in
                   self.ctx.lm.generate(prompts, limits[0] if same else list(limits), self.rules.stop, extras)]
        share = (time.perf_counter() - start) / len(states)
        for state, c in zip(states, results):
            answer = state.answer
            answer.llm_calls += 1
            answer.generated_tokens += len(c.tokens)
            answer.sentences += count_sentences(c.text)
            answer.prompt_tokens = max(answer.prompt_tokens, c.prompt_tokens or 0)
            answer.wall_time_s += share
        return results

    def retrieve(self, state: QuestionState, query: str) -> list:
        start = time.perf_counter()
        # an empty query (`empty_query: search`) finds nothing, as a search engine answers it
        hits = self.search(query, self.settings["top_k"]) if query.strip() else []
        state.answer.wall_time_s += time.perf_counter() - start
        state.retrieved(hits, state.answer.retrievals)
        return hits

    def remaining(self, state: QuestionState) -> int:
        """Tokens the next call may generate (`lookahead`): what is left of the budget, by default."""
        return self.rules.call_tokens(self.ctx.max_new_tokens, state.kept_tokens)

    def keep_regenerated(self, state: QuestionState, lookahead: LookAhead) -> str:
        """All of a continuation made with passages, or its first sentence (the reference code)."""
        if self.rules.joining == "dragin-code":
            first = self.settings["keep"] == "first-sentence"
            new = joining.first_sentence(lookahead.sentences) if first else lookahead.text.strip()
            state.text = joining.kept_after_regeneration(state.text, state.before, new, self.skip_empty)
            if not first and self.rules.finished(lookahead.c):
                state.done = True
            return new
        chars = len(lookahead.text)
        if self.settings["keep"] == "first-sentence" and lookahead.sentences:
            chars = lookahead.sentences[0].end
        new = state.keep(lookahead, chars)
        if chars == len(lookahead.text) and self.rules.finished(lookahead.c):
            state.done = True
        return new


class TriggeredRetrieval(DynamicMethod):
    """Look ahead, judge sentence by sentence, retrieve and regenerate at the first that fires."""

    # `joining: dragin-code`: leave empty pieces out of the joins (AttnWeightRAG, DRAGIN) or not (TokenRAG, FLARE)
    skip_empty = False

    def extras(self) -> Extras:
        return NO_EXTRAS

    def detect(self, state: QuestionState, lookahead: LookAhead, sentence) -> "Detection":
        raise NotImplementedError

    def build_query(self, state: QuestionState, lookahead: LookAhead, sentence, detection) -> str:
        raise NotImplementedError

    def sentences_kept(self, index: int) -> int:
        """How many of the look-ahead's sentences are kept before regenerating when its `index`-th fired:
        all those before it (a method whose reference code keeps fewer says so here)."""
        return index

    def unfired_record(self, state: QuestionState) -> dict:
        """What the trace records of a look-ahead kept whole besides the step itself (a method whose
        judgement has something to show where nothing fired, e.g. RaDIO's detector scores)."""
        return {}

    def trigger_record(self, state: QuestionState) -> dict:
        """What the trace records of one trigger besides the detection, query and retrieved ids (a method
        whose query or retrieval has more to show, e.g. DioR's keyword scores and search rounds)."""
        return {}

    def step(self, active: list[QuestionState]) -> None:
        joined = self.rules.joining == "dragin-code"
        for state in active:
            state.next_prefix = joining.lookahead_prefix(state.text, self.skip_empty) if joined else None
        continuations = self.generate(active, False, [self.remaining(s) for s in active], self.extras())
        regenerate = []
        for state, c in zip(active, continuations):
            lookahead = LookAhead(c)
            if not lookahead.text.strip():
                state.done = True
                state.answer.steps.append(step_record("look-ahead", c))
                continue
            fired, passed = None, []
            if not self.capped(state):
                for index, sentence in enumerate(lookahead.sentences):
                    detection = self.detect(state, lookahead, sentence)
                    if detection.fire:
                        fired = (index, sentence, detection)
                        break
                    passed.append({"sentence": index, "start": sentence.start, **detection.record()})
            # the sentences judged that did not fire, with the trigger's numbers (trace only: the explorer
            # shades them); absent when none was judged, so such records stay as they were
            judged = {"judged": passed} if passed else {}
            if fired is None:
                if joined:
                    state.text = joining.kept_after_lookahead(state.text, lookahead.text)
                else:
                    state.keep(lookahead, len(lookahead.text))
                state.done = self.rules.finished(c)
                state.answer.steps.append(step_record("look-ahead", c, kept=len(lookahead.text), **judged,
                                                      **self.unfired_record(state)))
                continue
            index, sentence, detection = fired
            state.answer.detections += 1
            # The query may read the text before the sentence, so it is built before the text is cut.
            query = self.build_query(state, lookahead, sentence, detection) or ""
            if not query.strip() and self.rules.empty_query == "question":
                query = state.example.question
            kept = self.sentences_kept(index)
            cut = lookahead.sentences[kept].start
            if joined:
                state.before = joining.text_before(lookahead.sentences, kept)
                state.next_prefix = joining.regenerate_prefix(state.text, state.before, self.skip_empty)
            else:
                state.keep(lookahead, cut)
            hits = self.retrieve(state, query)
            state.answer.steps.append(step_record("look-ahead", c, kept=cut, sentence=index, **judged,
                                                  fired=sentence.text, detection=detection.record(), query=query,
                                                  retrieved=[h.id for h in hits], **self.trigger_record(state)))
            regenerate.append(state)
        if regenerate:
            continuations = self.generate(regenerate, True, [self.remaining(s) for s in regenerate])
            for state, c in zip(regenerate, continuations):
                lookahead = LookAhead(c)
                new = self.keep_regenerated(state, lookahead)
                state.answer.steps.append(step_record("regenerate", c, kept=len(new)))


class EveryStepRetrieval(DynamicMethod):
    """Retrieve before every step with the previous step's text; generate the step with the passages."""

    def step_limit(self, state: QuestionState) -> int:
        return self.remaining(state)

    def step(self, active: list[QuestionState]) -> None:
        queries = {}
        for state in active:
            if not self.capped(state):
                queries[id(state)] = state.query
                self.retrieve(state, state.query)
        limits = [self.step_limit(s) if id(s) in queries else self.remaining(s) for s in active]
        continuations = self.generate(active, True, limits)
        for state, c in zip(active, continuations):
            lookahead = LookAhead(c)
            if id(state) in queries:
                new = self.keep_step(state, lookahead)
                state.query = new.strip() or state.query
            else:  # retrieval cap reached: the rest of the answer, with the last passages
                new = state.keep(lookahead, len(lookahead.text))
                state.done = True
            state.answer.steps.append(step_record("generate", c, kept=len(new), query=queries.get(id(state)),
                                                  retrieved=[h.id for h in state.hits]))

    def keep_step(self, state: QuestionState, lookahead: LookAhead) -> str:
        raise NotImplementedError
