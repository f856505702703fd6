"""Self-RAG (Asai et al., ICLR 2024): short-form inference with a model fine-tuned to write reflection tokens.

The spec is the public reference code, `retrieval_lm/run_short_form.py` of AkariAsai/self-rag
(`call_model_rerank_w_scores_batch`, run with `--mode adaptive_retrieval --threshold 0.2 --use_groundness
--use_utility --use_seqscore` as its README's question-answering commands are):

1. Retrieve? The probability of `[Retrieval]` at the first generated position after the prompt, normalised
   against `[No Retrieval]`, above `threshold` (0.2).
2. Retrieving: one greedy generation per passage, the prompt followed by
   `[Retrieval]<paragraph>{title}\\n{text}</paragraph>`, each scored by its critique tokens:
   ISREL = p([Relevant]) / (p([Relevant]) + p([Irrelevant])) at the first generated position;
   ISSUP = (p(full) + 0.5 p(partial)) / (p(full) + p(partial) + p(none)) where the generation first writes
   one of the three support tokens (0 if it writes none); ISUSE = sum_i u_i p([Utility:i]) / sum_i
   p([Utility:i]) with u = (-1, -0.5, 0, 0.5, 1) where it first writes a utility token (0 if none); the
   segment's score is w_rel ISREL + w_sup ISSUP + w_use ISUSE, plus exp(mean token log-probability)
   when `use_seqscore`. The best-scoring generation is the answer (the first on a tie).
3. Not retrieving: the greedy generation after the prompt followed by `[No Retrieval]`.

The answer is post-processed as `postprocess_answer_option_conditioned` and `main` do: reflection tokens,
`</s>`, `<|endoftext|>` and newlines removed, a leading `#` or `:` dropped. Long-form inference (the
segment-level beam of `run_long_form_static.py`) is not implemented.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from ..errors import ConfigError
from ..lm.base import LOGITS, NO_EXTRAS, Continuation, Extras, Prompt
from .base import Answer, Method, count_sentences, step_record
from .parts.setup import Own
from .registry import register

RETRIEVE, NO_RETRIEVE = "[Retrieval]", "[No Retrieval]"
RELEVANCE = ("[Relevant]", "[Irrelevant]")
SUPPORT = ("[Fully supported]", "[Partially supported]", "[No support / Contradictory]")
UTILITY = tuple(f"[Utility:{i}]" for i in range(1, 6))
UTILITY_VALUES = (-1.0, -0.5, 0.0, 0.5, 1.0)  # run_short_form.py's `ut_scores`
PARAGRAPH = ("<paragraph>", "</paragraph>")
# What the method writes or reads; a tokenizer without them belongs to a model not trained to use them.
REFLECTION_TOKENS = (RETRIEVE, NO_RETRIEVE, *RELEVANCE, *SUPPORT, *UTILITY, *PARAGRAPH)
CRITIQUE = (*RELEVANCE, *SUPPORT, *UTILITY)  # watched in every passage's generation, in this order
# utils.py's `control_tokens` plus the end-of-text markers the reference removes from an answer
STRIPPED = (*REFLECTION_TOKENS, "[Continue to Use Evidence]", "</s>", "<|endoftext|>", "\n")
SELF_RAG_MODEL = "selfrag/selfrag_llama2_7b"
PROMPT = "### Instruction:\n{question}\n\n### Response:\n"  # utils.py's PROMPT_DICT["prompt_no_input"]
MODES = ("adaptive", "always", "never")
# The reference code's arithmetic first: it made the published Self-RAG numbers that the seed papers' tables
# compare against (docs/reproducing-papers.md, "Self-RAG baseline"); `probability` is the paper's §3.3 text.
RETRIEVE_RULES = ("reference-logprobs", "probability")


def retrieve_score(logprob_retrieve: float, logprob_no: float, rule: str = RETRIEVE_RULES[0]) -> float:
    """What is compared with `threshold`. `probability` (the paper, §3.3): p([Retrieval]) / (p([Retrieval])
    + p([No Retrieval])). `reference-logprobs`: the same ratio of the log-probabilities themselves, which is
    what run_short_form.py's `call_model_rerank_w_scores_batch` computes (its `score_dict` holds vLLM's
    log-probabilities, never exponentiated); it grows as [Retrieval] becomes the *less* likely token."""
    if rule == "reference-logprobs":
        total = logprob_retrieve + logprob_no
        return logprob_retrieve / total if total else 0.0
    retrieve, no = math.exp(logprob_retrieve), math.exp(logprob_no)
    return retrieve / (retrieve + no) if retrieve + no > 0 else 0.0


@dataclass
class SegmentScore:
    """One passage's generation as `call_model_rerank_w_scores_batch` scores it."""

    relevance: float
    support: float
    utility: float
    sequence: float  # exp(mean token log-probability); counted only with use_seqscore
    final: float


def first_position(token_ids: Sequence[int], wanted: Sequence[int]) -> int | None:
    """The first generated position that holds one of `wanted` (the reference's appearance index)."""
    return next((i for i, t in enumerate(token_ids) if t in wanted), None)


def normalised(logprobs: Sequence[float]) -> list[float]:
    """Probabilities of a group of tokens renormalised over the group."""
    probs = [math.exp(lp) for lp in logprobs]
    total = sum(probs)
    return [p / total for p in probs] if total > 0 else [0.0] * len(probs)


def score_segment(c: Continuation, ids: dict[str, int], weights: tuple[float, float, float],
                  use_seqscore: bool) -> SegmentScore:
    """ISREL, ISSUP, ISUSE and the final score of one passage's generation (watched over CRITIQUE)."""
    token_ids, watched = c.token_ids or [], c.watched or []
    column = {name: j for j, name in enumerate(CRITIQUE)}

    def group(position: int, names: Sequence[str]) -> list[float]:
        return normalised([watched[position][column[name]] for name in names])

    relevance = group(0, RELEVANCE)[0] if watched else 0.0
    support = utility = 0.0
    at = first_position(token_ids, [ids[name] for name in SUPPORT])
    if at is not None:
        full, partial, _ = group(at, SUPPORT)
        support = full + 0.5 * partial
    at = first_position(token_ids, [ids[name] for name in UTILITY])
    if at is not None:
        utility = sum(u * p for u, p in zip(UTILITY_VALUES, group(at, UTILITY)))
    sequence = math.exp(sum(c.logprobs) / max(len(c.logprobs), 1))
    w_rel, w_sup, w_use = weights
    final = w_rel * relevance + w_sup * support + w_use * utility + (sequence if use_seqscore else 0.0)
    return SegmentScore(relevance, support, utility, sequence, final)


def postprocess(text: str) -> str:
    """The answer as the reference scores it: reflection and end markers removed, then a leading `#` or
    `:` dropped (`postprocess_answer_option_conditioned`, then `main`)."""
    for token in STRIPPED:
        text = text.replace(token, "")
    if text[:1] in ("#", ":"):
        text = text[1:]
    return text.strip()


def missing_reflection_tokens(tokens, model: str) -> str | None:
    """Why a model whose tokenizer holds `tokens` cannot run Self-RAG (None: it holds every reflection token)."""
    missing = [name for name in REFLECTION_TOKENS if name not in tokens]
    if not missing:
        return None
    return (f"model {model!r} has no Self-RAG reflection tokens ({', '.join(missing)}); set "
            f"model.source: {SELF_RAG_MODEL} (params/self-rag.yaml)")


def reflection_ids(lm) -> dict[str, int]:
    """Token id of every reflection token in the model's tokenizer; refuses a model without them."""
    vocab = lm.tokenizer.get_vocab()
    problem = missing_reflection_tokens(vocab, lm.identity().get("model", "?"))
    if problem:
        raise ConfigError(f"method self-rag: {problem}")
    return {name: vocab[name] for name in REFLECTION_TOKENS}


@register("self-rag")
class SelfRAG(Method):
    when = "`mode: adaptive`: p([Retrieval]) / (p([Retrieval]) + p([No Retrieval])) at the first position > `threshold`"
    what = "the question; one generation per passage, the best by its critique tokens (ISREL, ISSUP, ISUSE)"
    needs_retriever = True
    needs = frozenset({LOGITS})  # reflection-token probabilities at chosen positions, not only the top few

    @classmethod
    def setups(cls, settings) -> dict[str, dict]:
        """Self-RAG answers in its own model's instruction format with its README's budget."""
        return {"single": {"prompt": Own("self-rag", "the Self-RAG model's instruction format"), "template": None,
                           "answer_tokens": Own(settings["max_new_tokens"], "the reference's QA commands"),
                           "retriever": settings.get("retriever"), "top_k": settings["top_k"]}}

    @classmethod
    def read_settings(cls, section):
        return {
            "mode": section.str("mode", "adaptive", MODES),
            "threshold": section.float("threshold", 0.2, minimum=0.0, maximum=1.0),  # README: --threshold 0.2
            "retrieve_rule": section.str("retrieve_rule", RETRIEVE_RULES[0], RETRIEVE_RULES),
            "top_k": section.int("top_k", 3, minimum=1),
            "w_rel": section.float("w_rel", 1.0, minimum=0.0),
            "w_sup": section.float("w_sup", 1.0, minimum=0.0),
            "w_use": section.float("w_use", 0.5, minimum=0.0),
            "use_seqscore": section.bool("use_seqscore", True),
            "max_new_tokens": section.int("max_new_tokens", 100, minimum=1),  # README's QA commands
            "retriever": cls.read_retriever(section),
        }

    checks_tokens = True

    @classmethod
    def tokens_problem(cls, settings, tokens, model) -> str | None:
        return missing_reflection_tokens(tokens, model)

    def __init__(self, settings, context):
        super().__init__(settings, context)
        # Before any generation: a model without the tokens would be asked for meaningless positions.
        self.ids = reflection_ids(context.lm) if context.lm is not None else {}

    def opening_call(self, question: str) -> tuple[Prompt, int]:
        return Prompt(text=PROMPT.format(question=question)), self.settings["max_new_tokens"]

    def answer_batch(self, examples) -> list[Answer]:
        s = self.settings
        start = time.perf_counter()
        prompts = [PROMPT.format(question=e.question) for e in examples]
        answers = [Answer(output="", prompt=p, direct=True) for p in prompts]
        retrieve = self.decide(prompts, answers)
        hits = {i: self.search(examples[i].question, s["top_k"]) for i, r in enumerate(retrieve) if r}
        plain = [i for i, r in enumerate(retrieve) if not r]
        for i, c in zip(plain, self.generate([prompts[i] + NO_RETRIEVE for i in plain])):
            self.count(answers[i], c, "generate")
            answers[i].output = postprocess(c.text)
        segments = [(i, h) for i in hits for h in hits[i]]
        watch = Extras(watch_ids=tuple(self.ids[name] for name in CRITIQUE))
        generations = self.generate([prompts[i] + f"{RETRIEVE}{PARAGRAPH[0]}{h.title}\n{h.text}{PARAGRAPH[1]}"
                                     for i, h in segments], watch)
        best: dict[int, tuple[float, str]] = {}
        weights = (s["w_rel"], s["w_sup"], s["w_use"])
        for (i, h), c in zip(segments, generations):
            score = score_segment(c, self.ids, weights, s["use_seqscore"])
            self.count(answers[i], c, "segment", passage=h.id, relevance=score.relevance, support=score.support,
                       utility=score.utility, sequence=score.sequence, score=score.final)
            if i not in best or score.final > best[i][0]:  # the first passage wins a tie, as the reference's sort
                best[i] = (score.final, c.text)
        for i, (_, text) in best.items():
            answers[i].output = postprocess(text)
            answers[i].retrievals = 1
            answers[i].passages = [{"id": h.id, "title": h.title, "score": h.score} for h in hits[i]]
        share = (time.perf_counter() - start) / max(1, len(examples))
        for answer in answers:
            answer.wall_time_s = share
        return answers

    def decide(self, prompts: list[str], answers: list[Answer]) -> list[bool]:
        """Whether each question retrieves: one token after the prompt is enough, its distribution is the
        one the reference reads off the first position of a whole no-retrieval answer."""
        s = self.settings
        if s["mode"] != "adaptive":
            return [s["mode"] == "always"] * len(prompts)
        extras = Extras(watch_ids=(self.ids[RETRIEVE], self.ids[NO_RETRIEVE]))
        decisions = []
        for answer, c in zip(answers, self.generate(prompts, extras, max_new_tokens=1)):
            score = retrieve_score(*c.watched[0], s["retrieve_rule"]) if c.watched else 0.0
            decisions.append(score > s["threshold"])
            self.count(answer, c, "decide", retrieve_score=score, retrieve=decisions[-1])
        return decisions

    def generate(self, texts: list[str], extras: Extras = NO_EXTRAS, max_new_tokens: int | None = None):
        """Greedy continuations of raw prompts, up to EOS or the token budget (the reference's vLLM calls
        have no stop strings); no call for no prompts."""
        if not texts:
            return []
        return self.ctx.lm.generate([Prompt(text=t) for t in texts], max_new_tokens or self.settings["max_new_tokens"],
                                    extras=extras)

    @staticmethod
    def count(answer: Answer, c: Continuation, phase: str, **decision) -> None:
        """One call's share of the counters (Gc, Tc, Sc; prompt tokens: the longest prompt) and its trace step."""
        answer.llm_calls += 1
        answer.generated_tokens += len(c.tokens)
        answer.sentences += count_sentences(c.text)
        answer.prompt_tokens = max(answer.prompt_tokens, c.prompt_tokens or 0)  # the longest prompt, as the loop
        answer.steps.append(step_record(phase, c, **decision))
