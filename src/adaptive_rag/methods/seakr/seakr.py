"""SeaKR (Yao et al. 2024): retrieve when the model's self-aware uncertainty is high, keep the
retrieved passage that lowers it most, and answer with whichever reasoning strategy is least uncertain.

Self-aware uncertainty U(c) (§3.4, after INSIDE): sample k continuations of the context, take each
one's internal state at its final EOS (layer l = L/2; the MLP output there, as the reference code
reads it), and U = (1/k) log det(Σ + αI) of their feature-centred Gram matrix. The engine returns
that Gram (exact for dropped empty samples and any α), so U costs k*k numbers per call in the cache.

Multi-hop loop (§3.1-3.3), all questions of a batch in lockstep:
1. pseudo-step: greedy next sentence (stop ". ") from exemplars + knowledge K + question + rationale
   R, plus k samples of it -> U;
2. an answer sentence ("the answer is", or "X is the answer") ends the loop first (`answer_check:
   before`, the reference code's order; the paper does not say); otherwise an empty step or U > delta
   retrieves (`retrieval: always`: every step, Table 3's "- S.A. Retrieval"); else the step joins R
   (periods inside it removed, as the reference code renders R: `rationale_periods`);
3. query: the step's words that are sure (in the question or the last rationale, or every token's
   1 - p <= `prob_threshold`), POS-filtered; the question when none; a repeated query ends the loop;
4. self-aware re-rank (§3.2): each of the top-N new passages gets its own pseudo-step with K plus
   that passage; the lowest U wins, its passage joins K and its step joins R, even an empty one
   (`rerank: search`: the search engine's first new passage, "- S.A. Re-rank"); a search with no
   new passage ends the question and, as in the reference code, is not counted as a retrieval;
5. stop on an answer sentence, at `max_steps` rationales or `max_docs` passages.
Every call stops at the reference code's strings ("\n\n", "Question:", "\nContext") and generates at
most `max_new_tokens` (the reference code's 100), whatever the dataset's budget.
Self-aware reasoning (§3.3): (a) the answer from the rationales, (b) a full chain of thought over all
of K; the one with lower U wins, an unknown/missing answer loses (`final: rationale|knowledge` keep
one, Table 3). `variant: simple` is the simple-QA set-up (§4.1.3: one retrieval): answer directly
when U <= delta, else the best of the top-N single-passage answers by U.

Deviations and switches are listed in docs/reproducing-papers.md#seakr. Probabilities here are the
raw model's (the reference vLLM fork reports them after top-k/top-p filtering).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ...errors import InputError
from ...evaluation.answer import extract_answer
from ...lm.base import (HIDDEN_STATES, LOGITS, NO_EXTRAS, SAMPLING, SCORING, Continuation, Extras, Prompt,
                       SampleSet, SamplingParams)
from ...prompts.fewshot import ANSWER_PREFIX, STOP_STRINGS, build_prompt
from ...retrieval import Hit
from ..base import Answer, Method, count_sentences
from ..parts.calibrated import load_calibration, refuse_calibration_questions, score_answers
from ..parts.lookahead import LookAhead
from ..parts.rules import ANSWER_PHRASE
from ..parts.setup import Own
from ..parts.text import Span, nlp
from ..parts import uncertainty as est
from ..registry import register

VARIANTS = ("multihop", "simple")
SOURCES = ("mlp", "residual")
QUERY_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM", "ADV"})
QUERY_DROP = frozenset({"thus", "answer", "is", "so"})
SENTENCE_STOP = ". "
STOPS = STOP_STRINGS + ("\nContext",)  # the reference code's stops: it also ends where a new context block starts
MAX_NEW_TOKENS = 100  # the reference code's budget for every SeaKR call
CALIBRATION_RULES = ("rate", "best-f1")
PERIODS = ("drop", "keep")
RATES = (0.25, 0.5, 0.75)  # the retrieval rates the calibration file gives a delta for
SAMPLED = {"eigenscore", "multi-perplexity", "ln-entropy"}  # estimators that read the k samples
_CODE_ANSWER = re.compile(r"the answer is(?:\s*:\s*)?(.*?)[,.]", re.DOTALL)
_CODE_ANSWER_BEFORE = re.compile(r"[.?!]\s*([^?!]*?)\s+is the answer\b", re.DOTALL)
_IS_THE_ANSWER = re.compile(r"\w\W*\s+is the answer\b")


@dataclass
class Assessment:
    """One context judged: its greedy continuation, U, and what the trace shows of the samples."""

    greedy: Continuation
    u: float
    samples: list[str] = field(default_factory=list)
    dropped: int = 0  # empty samples left out of the Gram

    def record(self, phase: str, **decision) -> dict:
        return {"phase": phase, "text": self.greedy.text, "finish": self.greedy.finish_reason,
                "u": _rounded(self.u), "samples": self.samples, "empty_samples": self.dropped, **decision}


class QuestionState:
    def __init__(self, example, prompt):
        self.example = example
        self.knowledge: list[Hit] = []  # K: the passages chosen by re-ranking, in order
        self.rationale = ""  # R as generated (an answer stated in the last rationale is read from it)
        self.shown = ""  # R as the next prompt shows it after "Answer:" (`accept`)
        self.steps: list[tuple[str, float]] = []  # each rationale as generated, with the U it was accepted at
        self.queries: set[str] = set()
        self.done = False
        self.answer = Answer(output="", prompt=prompt)

    def accept(self, step: str, u: float, drop_periods: bool = True) -> None:
        """`step` joins R: whole in `steps` and `rationale` (the answer check, the query's last rationale,
        the answer it states), and in the prompt's `shown` without its inner periods when `drop_periods`
        (the reference code renders each rationale so, that one of them cannot read as two sentences).
        An empty step counts as a step (`max_steps`) and adds nothing to either text."""
        self.steps.append((step.strip(), u))
        self.rationale = _appended(self.rationale, step)
        self.shown = _appended(self.shown, rendered_step(step) if drop_periods else step)


@register("seakr")
class SeaKR(Method):
    when = "the self-aware uncertainty U (EigenScore of k sampled next sentences' final states) exceeds `delta`"
    what = "the next sentence without its unsure words (POS-filtered); of the top-N passages, the one that lowers U most"
    needs_retriever = True

    @classmethod
    def setups(cls, settings) -> dict[str, dict[str, Any]]:
        """Multi-hop SeaKR searches while it reasons; the simple-QA variant searches once. Its budget, step
        cap and document pool are the reference code's (MAX_NEW_TOKENS for every call, `max_steps`,
        `max_docs`), not a table's."""
        role = "single" if settings["variant"] == "simple" else "multi"
        fields = {"prompt": "cot", "template": None, "answer_tokens": settings["max_new_tokens"],
                  "retriever": settings.get("retriever"), "top_k": settings["top_k"]}
        if settings["max_new_tokens"] == MAX_NEW_TOKENS:
            fields["answer_tokens"] = Own(MAX_NEW_TOKENS, "the reference code's budget for every SeaKR call")
        if role == "multi":
            fields.update(max_retrievals=Own(settings["max_steps"], "SeaKR's reasoning-step cap (max_steps)"),
                          max_passages=Own(settings["max_docs"], "SeaKR's knowledge pool (max_docs)"))
        return {role: fields}

    @classmethod
    def read_settings(cls, section) -> dict[str, Any]:
        estimator = section.str("estimator", "eigenscore", est.ESTIMATORS)
        settings = {
            "variant": section.str("variant", "multihop", VARIANTS),
            "estimator": estimator,
            "k": section.int("k", 20, minimum=2),
            "alpha": section.float("alpha", est.DEFAULT_ALPHA, minimum=1e-300),
            "layer": section.int("layer", None, minimum=1, allow_none=True),
            "hidden_source": section.str("hidden_source", "mlp", SOURCES),
            "delta": _read_delta(section),
            "top_k": section.int("top_k", 3, minimum=1),
            "max_steps": section.int("max_steps", 7, minimum=1),
            "max_docs": section.int("max_docs", 5, minimum=1),
            "max_new_tokens": section.int("max_new_tokens", MAX_NEW_TOKENS, minimum=1, allow_none=True),
            "rationale_periods": section.str("rationale_periods", "drop", PERIODS),
            "prob_threshold": section.float("prob_threshold", 0.1, minimum=0.0),
            "retrieval": section.str("retrieval", "adaptive", ("adaptive", "always")),
            "rerank": section.str("rerank", "uncertainty", ("uncertainty", "search")),
            "rerank_context": section.str("rerank_context", "knowledge", ("knowledge", "candidate")),
            "final": section.str("final", "select", ("select", "rationale", "knowledge")),
            "final_rationale": section.str("final_rationale", "paper", ("paper", "code")),
            "answer_check": section.str("answer_check", "before", ("before", "after")),
            "reference": section.str("reference", "paper", ("paper", "seakr-code")),
            "seed": section.seed("seed", 42),
            "retriever": cls.read_retriever(section),
        }
        if settings["delta"] == "calibrated":
            settings["calibration_dataset"] = section.str("calibration_dataset")
            settings["calibration_rule"] = section.str("calibration_rule", "rate", CALIBRATION_RULES)
            if settings["calibration_rule"] == "rate":
                settings["calibration_rate"] = section.float("calibration_rate", 0.5, minimum=0.0)
        return settings

    @classmethod
    def needs_for(cls, settings) -> set[str]:
        estimator = settings["estimator"]
        return {"eigenscore": {SAMPLING, HIDDEN_STATES}, "multi-perplexity": {SAMPLING}, "ln-entropy": {SAMPLING},
                "energy": {LOGITS}, "prompting": {SCORING}, "perplexity": set()}[estimator]

    def __init__(self, settings, context):
        super().__init__(settings, context)
        if settings["max_new_tokens"]:  # every call of the method, the calibration's plain answer included
            self.ctx = replace(context, max_new_tokens=settings["max_new_tokens"])
        self.delta, self.calibration_ids = self._threshold()
        self.sampling = SamplingParams(n=settings["k"], seed=settings["seed"])
        self.sample_extras = NO_EXTRAS
        if settings["estimator"] == "eigenscore":
            self.sample_extras = Extras(final_layers=(self.layer,), final_source=settings["hidden_source"])
        self.greedy_extras = Extras(logsumexp=True) if settings["estimator"] == "energy" else NO_EXTRAS

    @property
    def layer(self) -> int:
        """The paper's middle layer l = L/2 (1-based: layer 16 of Llama-2-7B's 32) unless set."""
        return self.settings["layer"] or self.ctx.lm.num_layers // 2

    def _threshold(self) -> tuple[float, frozenset]:
        delta = self.settings["delta"]
        if delta != "calibrated":
            return float(delta), frozenset()
        path = Path(self.ctx.inputs.get("calibration", ""))

        def read(data: dict) -> tuple[float, frozenset]:
            if self.settings["calibration_rule"] == "rate":
                value = threshold_for_rate(data["u"], self.settings["calibration_rate"])
            else:
                value = data["thresholds"]["best-f1"]
            if data["estimator"] != self.settings["estimator"]:
                raise InputError(f"{path}: calibrated for estimator {data['estimator']!r}, not "
                                 f"{self.settings['estimator']!r}; rerun the calibrate step")
            return float(value), frozenset(data["ids"])

        return load_calibration(path, "SeaKR", read)

    # ---- calibration (`adaptive-rag calibrate`) -----------------------------------------------
    # delta is read off a split that shares no question with the evaluation: per question, the
    # first pseudo-step's U exactly as the run computes it, and whether the model's plain chain of
    # thought (no retrieval) is right. A question whose own answer is wrong should retrieve, so
    # delta is the cut whose "U > delta" best predicts a wrong answer (F1; ties to the larger delta,
    # which retrieves less), or the cut giving a target retrieval rate (`calibration_rule`).

    @classmethod
    def calibration_settings(cls, settings) -> dict[str, Any]:
        return {**settings, "delta": 0.0}

    def calibrate_batch(self, examples) -> list[dict]:
        states = [QuestionState(e, None) for e in examples]
        u = [a.u for a in self.first_step(states)]
        plain = self.generate_answers([e.question for e in examples], [()] * len(examples))
        return [{"u": u_, "em": s["em"], "f1": s["f1"]} for u_, s in zip(u, score_answers(examples, plain))]

    def calibration_record(self, rows: list[dict]) -> dict:
        u, em, f1 = ([row[key] for row in rows] for key in ("u", "em", "f1"))
        grid = threshold_grid(u, [score == 0.0 for score in em])
        best = max(grid, key=lambda row: (row["f1"], row["delta"]))
        return {
            "estimator": self.settings["estimator"],
            "settings": {k: v for k, v in self.settings.items() if k != "delta"},
            "u": u, "em": em, "f1": f1, "grid": grid,
            "thresholds": {"best-f1": best["delta"],
                           **{f"rate-{rate}": threshold_for_rate(u, rate) for rate in RATES}},
            "note": "delta: U > delta retrieves. best-f1: F1 of 'U > delta' predicting a wrong (EM 0) "
                    "no-retrieval answer; rate-r: a fraction r of these questions would retrieve at the first step",
        }

    # ---- uncertainty of many contexts at once -------------------------------------------------

    def assess(self, states: Sequence[QuestionState], prompts: Sequence[Prompt], stops: Sequence[tuple],
               limit: int | None = None) -> list[Assessment]:
        """Greedy continuation and U of every prompt: one batched greedy call and one batched sampling
        call per distinct stop set; each question is charged its calls, tokens and time."""
        out: list[Assessment | None] = [None] * len(prompts)
        for stop in dict.fromkeys(stops):
            rows = [i for i, s in enumerate(stops) if s == stop]
            start = time.perf_counter()
            batch = [prompts[i] for i in rows]
            limit_ = limit or self.ctx.max_new_tokens
            greedy = self.ctx.lm.generate(batch, limit_, stop, self.greedy_extras)
            sets = (self.ctx.lm.sample_batch(batch, self.sampling, limit_, stop, self.sample_extras)
                    if self.settings["estimator"] in SAMPLED else [None] * len(rows))
            share = (time.perf_counter() - start) / len(rows)
            for i, g, sample_set in zip(rows, greedy, sets):
                answer = states[i].answer
                answer.llm_calls += 1
                answer.generated_tokens += len(g.tokens)
                answer.sentences += count_sentences(g.text)
                answer.prompt_tokens = max(answer.prompt_tokens, g.prompt_tokens or 0)
                if sample_set is not None:
                    answer.sampled_sequences += len(sample_set.samples)
                    answer.generated_tokens += sum(len(c.tokens) for c in sample_set.samples)
                answer.wall_time_s += share
                out[i] = self._judge(prompts[i], g, sample_set)
        return out

    def _judge(self, prompt: Prompt, greedy: Continuation, sample_set: SampleSet | None) -> Assessment:
        estimator = self.settings["estimator"]
        if estimator == "perplexity":
            return Assessment(greedy, est.perplexity(greedy.logprobs))
        if estimator == "energy":
            return Assessment(greedy, est.energy(greedy.logsumexp or []))
        if estimator == "prompting":
            asked = prompt.with_prefix(f"{prompt.prefix} {est.SUFFICIENCY_QUESTION} Answer:".lstrip())
            yes, no = (sum(self.ctx.lm.score(asked, choice)) for choice in est.SUFFICIENCY_CHOICES)
            return Assessment(greedy, est.prompting(no, yes))
        texts = [c.text for c in sample_set.samples]
        kept = [j for j, text in enumerate(texts) if text.strip()]  # the reference drops empty samples
        dropped = len(texts) - len(kept)
        if estimator == "eigenscore":
            u = (est.eigenscore(sample_set.grams[str(self.layer)], self.settings["alpha"], kept)
                 if kept else math.inf)
        elif estimator == "multi-perplexity":
            u = est.multi_perplexity([c.logprobs for c in sample_set.samples])
        else:
            u = est.ln_entropy([c.logprobs for c in sample_set.samples])
        return Assessment(greedy, u, texts, dropped)

    # ---- prompts ------------------------------------------------------------------------------

    def prompt(self, state: QuestionState, passages: Sequence[Hit], prefix: str = "") -> Prompt:
        return build_prompt(self.ctx.prompt_format, self.ctx.exemplars, state.example.question,
                            passages, template=self.ctx.template).with_prefix(prefix)

    def step_stop(self, state: QuestionState) -> tuple:
        """One sentence; once R holds a step, also the end of the line (the reference code's stops)."""
        return STOPS + ((SENTENCE_STOP, "\n") if state.steps else (SENTENCE_STOP,))

    def pseudo_prompts(self, states: Sequence[QuestionState]) -> tuple[list[Prompt], list[tuple]]:
        """What the next uncertainty check reads: the next sentence after K and R (multi-hop), or the
        whole answer to the bare question (simple QA)."""
        if self.settings["variant"] == "simple":
            return [self.prompt(s, ()) for s in states], [STOPS + ("\n",)] * len(states)
        return [self.prompt(s, s.knowledge, s.shown) for s in states], [self.step_stop(s) for s in states]

    def first_step(self, states: Sequence[QuestionState]) -> list[Assessment]:
        """The first check of fresh questions: what `calibrate` measures delta on."""
        return self.assess(states, *self.pseudo_prompts(states))

    # ---- the method ---------------------------------------------------------------------------

    def answer_batch(self, examples) -> list[Answer]:
        if self.calibration_ids:
            refuse_calibration_questions(examples, self.calibration_ids, self.settings["calibration_dataset"])
        states = [QuestionState(e, self.prompt_of(e)) for e in examples]
        if self.settings["variant"] == "simple":
            self.simple(states)
        else:
            active = states
            while active:
                self.step(active)
                for state in active:
                    if not state.done and (len(state.steps) >= self.settings["max_steps"]
                                           or len(state.knowledge) >= self.settings["max_docs"]):
                        state.done = True
                active = [s for s in states if not s.done]
            self.reason(states)
        answers = [s.answer for s in states]
        self.complete_answers([e.question for e in examples], answers)
        return answers

    def prompt_of(self, example):
        return build_prompt(self.ctx.prompt_format, self.ctx.exemplars, example.question,
                            template=self.ctx.template).readable()

    def step(self, active: list[QuestionState]) -> None:
        direct = self.assess(active, *self.pseudo_prompts(active))
        pending: list[tuple[QuestionState, list[Hit], str]] = []
        for state, a in zip(active, direct):
            text = sentence_of(a.greedy)
            uncertain = a.u > self.delta
            state.answer.detections += int(uncertain)
            answered = self.says_answer(text)
            if answered and self.settings["answer_check"] == "before":
                retrieve = False
            else:
                retrieve = not text.strip() or uncertain or self.settings["retrieval"] == "always"
            if not retrieve:
                self.accept(state, text, a.u)
                state.done = answered
                state.answer.steps.append(a.record("direct", delta=self.delta, kept=True))
                continue
            query = self.query(state, a.greedy)
            record = a.record("direct", delta=self.delta, kept=False, query=query)
            if query in state.queries:  # the reference code ends the question here ("Retrieval Duplicated")
                state.done = True
                state.answer.steps.append({**record, "stopped": "repeated query"})
                continue
            state.queries.add(query)
            hits = self.retrieve(state, query)
            held = {h.id for h in state.knowledge}
            candidates = [h for h in hits if h.id not in held]
            state.answer.steps.append({**record, "retrieved": [h.id for h in hits]})
            if not candidates:  # the reference code's rag() gives up here, and counts no retrieval
                state.done = True
                state.answer.steps[-1]["stopped"] = "no new passage"
                continue
            self.count_retrieval(state, hits)
            if self.settings["rerank"] == "search":
                candidates = candidates[:1]
            pending.append((state, candidates, query))
        if pending:
            self.rerank(pending)

    def rerank(self, pending: list[tuple[QuestionState, list[Hit], str]]) -> None:
        """Every candidate of every question in one batched assessment; lowest U wins per question,
        candidates whose step is empty last, ties to the search order."""
        owners, prompts, stops = [], [], []
        for state, candidates, _ in pending:
            for hit in candidates:
                passages = ([*state.knowledge, hit] if self.settings["rerank_context"] == "knowledge" else [hit])
                owners.append(state)
                prompts.append(self.prompt(state, passages, state.shown))
                stops.append(self.step_stop(state))
        judged = iter(self.assess(owners, prompts, stops))
        for state, candidates, query in pending:
            results = [next(judged) for _ in candidates]
            order = sorted(range(len(candidates)),
                           key=lambda j: (not results[j].greedy.text.strip(), results[j].u))
            best = order[0]
            chosen, a = candidates[best], results[best]
            state.knowledge.append(chosen)
            text = sentence_of(a.greedy)
            self.accept(state, text, a.u)
            state.answer.steps.append(a.record(
                "rerank", query=query, candidates=[{"id": h.id, "u": _rounded(r.u), "text": r.greedy.text}
                                                   for h, r in zip(candidates, results)], chosen=chosen.id))
            state.done = self.says_answer(text)  # an empty step joins R and the loop goes on (reference code)

    def accept(self, state: QuestionState, text: str, u: float) -> None:
        state.accept(text, u, drop_periods=self.settings["rationale_periods"] == "drop")

    def says_answer(self, text: str) -> bool:
        return says_answer(text, code=self.settings["reference"] == "seakr-code")

    def retrieve(self, state: QuestionState, query: str) -> list[Hit]:
        start = time.perf_counter()
        hits = self.search(query, self.settings["top_k"])
        state.answer.wall_time_s += time.perf_counter() - start
        return hits

    @staticmethod
    def count_retrieval(state: QuestionState, hits: Sequence[Hit]) -> None:
        """Rc: a search that gave the question something to read (its passages join the record)."""
        state.answer.retrievals += 1
        state.answer.passages.extend({"id": h.id, "title": h.title, "score": h.score,
                                      "retrieval": state.answer.retrievals - 1} for h in hits)

    def query(self, state: QuestionState, c: Continuation) -> str:
        """The pseudo-step's sure words, POS-filtered (FLARE-style masking, as the reference code does)."""
        last = state.steps[-1][0] if state.steps else ""
        words = sure_words(c, state.example.question, last, self.settings["prob_threshold"],
                           last_sentence_only=self.settings["reference"] == "seakr-code")
        return pos_filter(" ".join(words)) or pos_filter(state.example.question)

    # ---- self-aware reasoning -----------------------------------------------------------------

    def reason(self, states: list[QuestionState]) -> None:
        final = self.settings["final"]
        rationale = self.from_rationale(states) if final in ("select", "rationale") else [None] * len(states)
        knowledge = self.from_knowledge(states) if final in ("select", "knowledge") else [None] * len(states)
        for state, a, b in zip(states, rationale, knowledge):
            pick = choose(a, b)
            chosen = a if pick == "rationale" else b
            state.answer.output = self.final_text(chosen["output"])
            state.answer.steps.append({"phase": "select", "chosen": pick,
                                       **{name: c and {"answer": c["answer"], "u": _rounded(c["u"])}
                                          for name, c in (("rationale", a), ("knowledge", b))}})

    def final_text(self, output: str) -> str:
        if self.settings["reference"] == "seakr-code":
            found = code_answer(output)
            if found is not None:
                return f"{ANSWER_PREFIX} {found}."
        return output

    def from_rationale(self, states: list[QuestionState]) -> list[dict]:
        """(a): paper: the answer in the last rationale, else "So the answer is" forced after R (U of
        that call); code: the rationales as numbered context passages, a fresh chain of thought."""
        out: list[dict | None] = [None] * len(states)
        todo = []
        for i, state in enumerate(states):
            if self.settings["final_rationale"] == "paper" and state.steps and self.says_answer(state.steps[-1][0]):
                out[i] = _candidate(state.rationale, state.steps[-1][1])
            else:
                todo.append(i)
        if self.settings["final_rationale"] == "paper":
            prompts = [self.prompt(states[i], states[i].knowledge,
                                   _join(states[i].shown, ANSWER_PREFIX, self.ctx.prompt_format)) for i in todo]
            judged = self.assess([states[i] for i in todo], prompts, [STOPS + ("\n",)] * len(todo))
            for i, prompt, a in zip(todo, prompts, judged):
                out[i] = _candidate(prompt.prefix + a.greedy.text, a.u)
                states[i].answer.steps.append(a.record("final-rationale"))
            return out
        prompts = [self.prompt(states[i], rationale_passages(states[i].steps)) for i in todo]
        judged = self.assess([states[i] for i in todo], prompts, [STOPS + ("\n",)] * len(todo))
        texts = [a.greedy.text for a in judged]
        need = [j for j, text in enumerate(texts) if not extract_answer(text)[1]]
        forced = self.force([states[todo[j]] for j in need], [prompts[j] for j in need], [texts[j] for j in need],
                            STOPS + ("\n",), judge=False)
        for j, (text, _) in zip(need, forced):
            texts[j] = text
        for j, (i, a) in enumerate(zip(todo, judged)):
            out[i] = _candidate(texts[j], a.u)  # the code scores the unforced call
            states[i].answer.steps.append(a.record("final-rationale"))
        return out

    def from_knowledge(self, states: list[QuestionState]) -> list[dict]:
        """(b): a full chain of thought with all of K as context; forced to the answer phrase if it has
        none. Its U: the chain's (paper), or the last call's, the forced one when forcing happened (code)."""
        stop = STOPS + (("\n",) if self.settings["final_rationale"] == "paper" else ())
        prompts = [self.prompt(s, s.knowledge) for s in states]
        judged = self.assess(states, prompts, [stop] * len(states))
        out = [_candidate(a.greedy.text, a.u) for a in judged]
        todo = [i for i, a in enumerate(judged) if not extract_answer(a.greedy.text)[1]]
        code = self.settings["final_rationale"] == "code"
        forced = self.force([states[i] for i in todo], [prompts[i] for i in todo],
                            [judged[i].greedy.text for i in todo], STOPS + ("\n",), judge=code)
        for i, (text, u) in zip(todo, forced):
            out[i] = _candidate(text, u if code else out[i]["u"])
        for state, a in zip(states, judged):
            state.answer.steps.append(a.record("final-knowledge"))
        return out

    def force(self, states, prompts, texts, stop, judge: bool) -> list[tuple[str, float]]:
        """Append "So the answer is" to each text and continue it (judged: with U, else greedy only)."""
        forced = [p.with_prefix(_join(p.prefix + t, ANSWER_PREFIX, self.ctx.prompt_format))
                  for p, t in zip(prompts, texts)]
        if not forced:
            return []
        if judge:
            judged = self.assess(states, forced, [stop] * len(forced), self.ctx.answer_fallback_tokens or 20)
            results = [(f.prefix + a.greedy.text, a.u) for f, a in zip(forced, judged)]
        else:
            continuations = self.ctx.lm.generate(forced, self.ctx.answer_fallback_tokens or 20, stop)
            for state, c in zip(states, continuations):
                state.answer.llm_calls += 1
                state.answer.generated_tokens += len(c.tokens)
            results = [(f.prefix + c.text, math.nan) for f, c in zip(forced, continuations)]
        for state, (text, _) in zip(states, results):
            state.answer.steps.append({"phase": "force-answer", "text": text})
        return results

    # ---- simple QA ----------------------------------------------------------------------------

    def simple(self, states: list[QuestionState]) -> None:
        """One retrieval at most: the direct answer when U <= delta (and `retrieval: adaptive`), else the
        single-passage answer of lowest U among the top-N (or the first passage's, `rerank: search`)."""
        stop = STOPS + ("\n",)
        direct = self.first_step(states)
        pending = []
        for state, a in zip(states, direct):
            uncertain = a.u > self.delta
            state.answer.detections += int(uncertain)
            if a.greedy.text.strip() and not uncertain and self.settings["retrieval"] == "adaptive":
                state.answer.output = a.greedy.text.strip()
                state.answer.steps.append(a.record("direct", delta=self.delta, kept=True))
                continue
            state.answer.steps.append(a.record("direct", delta=self.delta, kept=False))
            hits = self.retrieve(state, state.example.question)
            if hits:
                self.count_retrieval(state, hits)
                pending.append((state, hits[:1] if self.settings["rerank"] == "search" else hits))
            else:
                state.answer.output = a.greedy.text.strip()
        owners = [s for s, hits in pending for _ in hits]
        judged = iter(self.assess(owners, [self.prompt(s, [h]) for s, hits in pending for h in hits],
                                  [stop] * len(owners)))
        for state, hits in pending:
            results = [next(judged) for _ in hits]
            best = min(range(len(hits)), key=lambda j: (not results[j].greedy.text.strip(), results[j].u))
            state.answer.output = results[best].greedy.text.strip()
            state.answer.steps.append(results[best].record(
                "rerank", candidates=[{"id": h.id, "u": _rounded(r.u)} for h, r in zip(hits, results)],
                chosen=hits[best].id))


# ---- pieces with no state (tested on their own) -------------------------------------------------


def sentence_of(c: Continuation) -> str:
    """A pseudo-step as a rationale: the generated sentence with the period the ". " stop cut off."""
    text = c.text.rstrip()
    if text.strip() and not text.endswith((".", "!", "?")):
        text += "."
    return text


def rendered_step(step: str) -> str:
    """A rationale as the reference code puts it in the prompt: every period inside it removed (so "M.D."
    or "3.5" cannot read as a sentence end) and one put back at its end; the leading space kept."""
    body = step.strip().replace(".", "").rstrip()
    if not body:
        return ""
    if not body.endswith(("!", "?")):
        body += "."
    return step[:len(step) - len(step.lstrip())] + body


def says_answer(text: str, code: bool = False) -> bool:
    """Whether a step states its answer: "the answer is ..." or "... X is the answer" (both of the
    reference code's patterns; the paper's phrase is "So the final answer is"). `code`: the reference's
    regexes as they are, which also want a comma or period after the answer and a sentence end before
    "X is the answer" (so a step that is just "X is the answer." does not end its loop)."""
    if code:
        return bool(code_answer(text))
    lower = text.lower()
    return ANSWER_PHRASE in lower or bool(_IS_THE_ANSWER.search(lower))


def code_answer(text: str) -> str | None:
    """The reference code's answer extraction: after "the answer is" up to the first comma or period,
    else between a sentence end and "is the answer"; None when neither matches."""
    lower = text.lower()
    found = _CODE_ANSWER.search(lower) or _CODE_ANSWER_BEFORE.search(lower)
    return found.group(1).strip() if found else None


def sure_words(c: Continuation, question: str, last_rationale: str, threshold: float,
               last_sentence_only: bool = False) -> list[str]:
    """Words of the step the model is sure of: every token's 1 - p <= threshold, or the word already
    appears in the question or the last rationale (substring test, as the reference code)."""
    look = LookAhead(c)
    spans = look.sentences or [Span(0, len(look.text), look.text)]
    if last_sentence_only:  # the reference code resets its list per sentence, so only the last counts
        spans = spans[-1:]
    out = []
    for span in spans:
        for unit in look.word_units(span):
            doubt = max(1.0 - math.exp(c.logprobs[t]) for t in unit.tokens)
            if unit.text in question or (last_rationale and unit.text in last_rationale) or doubt <= threshold:
                out.append(unit.text)
    return out


def pos_filter(text: str) -> str:
    """Content words only (NOUN, ADJ, VERB, PROPN, NUM, ADV), without thus/answer/is/so."""
    if not text.strip():
        return ""
    kept = [t.text for t in nlp()(text.strip()) if t.pos_ in QUERY_POS and t.text not in QUERY_DROP]
    return " ".join(kept)


def rationale_passages(steps: list[tuple[str, float]]) -> list[Hit]:
    """The rationales as numbered context passages, the last one's answer sentences removed (code (a))."""
    from ..parts.text import sentences

    texts = [text for text, _ in steps]
    if texts:
        last = " ".join(s.text for s in sentences(texts[-1]) if not says_answer(s.text))
        texts = texts[:-1] + ([last] if last.strip() else [])
    return [Hit(id=f"rationale-{i}", title="", text=text, score=0.0) for i, text in enumerate(texts, 1)]


def choose(a: dict | None, b: dict | None) -> str:
    """Rationale (a) or knowledge (b): a missing or "unknown" answer loses; else lower U; ties to (b)."""
    if a is None:
        return "knowledge"
    if b is None:
        return "rationale"
    if _unknown(a["answer"]):
        return "knowledge"
    if _unknown(b["answer"]):
        return "rationale"
    return "rationale" if a["u"] < b["u"] else "knowledge"


def threshold_grid(u: list[float], wrong: list[bool]) -> list[dict]:
    """Every distinct cut (each observed U, and one below all): retrieval rate and how well "U > delta"
    finds the questions the model answers wrongly on its own."""
    finite = sorted({v for v in u if math.isfinite(v)})
    cuts = ([finite[0] - 1.0] if finite else [0.0]) + finite
    rows = []
    for delta in cuts:
        predicted = [v > delta for v in u]
        tp = sum(p and w for p, w in zip(predicted, wrong))
        fp = sum(p and not w for p, w in zip(predicted, wrong))
        fn = sum(w and not p for p, w in zip(predicted, wrong))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append({"delta": delta, "retrieval_rate": sum(predicted) / len(u), "precision": precision,
                     "recall": recall, "f1": f1})
    return rows


def threshold_for_rate(values: Sequence[float], rate: float) -> float:
    """The delta at which round(rate * n) of the n calibration values exceed it (U > delta retrieves)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no calibration values")
    above = round(min(max(rate, 0.0), 1.0) * len(ordered))
    return ordered[0] - 1.0 if above >= len(ordered) else ordered[len(ordered) - above - 1]


def _appended(text: str, step: str) -> str:
    """`step` after `text`, one space between them; an empty step adds nothing."""
    if not step.strip():
        return text
    return text + (" " + step if text and not step[0].isspace() else step)


def _candidate(output: str, u: float) -> dict:
    answer, found = extract_answer(output)
    return {"output": output, "answer": answer if found else None, "u": u}


def _unknown(answer: str | None) -> bool:
    return answer is None or not answer.strip() or "unknown" in answer.lower()


def _join(text: str, phrase: str, prompt_format: str) -> str:
    """`phrase` after `text`, spaced as the model writes it (raw prompts end "Answer:", so a space)."""
    if text.strip():
        return f"{text.rstrip()} {phrase}"
    return f" {phrase}" if prompt_format == "raw" else phrase


def _rounded(u: float | None) -> float | None:
    """U as the trace stores it: null when undefined or infinite (every sample empty), so the trace stays JSON."""
    return round(float(u), 6) if u is not None and math.isfinite(u) else None


def _read_delta(section):
    value = section.raw("delta", -6.0)
    if value == "calibrated":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise section.fail("delta", f"expected a number or 'calibrated', got {value!r}")
    return float(value)

