"""What every method shares: settings, the prompt, the answer fallback, and the per-question record.

Methods answer a batch of questions at once so the backend can advance them in lockstep (one
batched forward per step) instead of one question at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..evaluation.answer import dragin_code_cut, extract_answer, has_answer
from ..prompts.fewshot import ANSWER_PREFIX, COT, QA_ONESHOT, Exemplar, build_prompt
from ..retrieval import KINDS, NAMED_DENSE, encoder_name
from ..settings import check_name
from .parts.calibrated import calibration_path, resolve_calibration_dataset
from .parts.rules import GENERATION_DEFAULTS, LOOP_DEFAULTS, Rules
from .parts.setup import basic_setup

if TYPE_CHECKING:
    from ..prompts.template import Template
    from ..settings import Section
    from ..data.datasets import Example
    from ..lm.base import Continuation, LanguageModel
    from ..retrieval import Hit, Retriever


@dataclass
class Answer:
    """One question's outcome: the generated text plus the counters the efficiency tables need.

    The counters are DioR's: retrievals (Rc, also SCAAR's N_R), LLM generate calls (Gc), hallucination
    detections (Hc), generated tokens over all calls (Tc) and sentences over all calls (Sc).
    """

    output: str
    prompt: Any  # the prompt as traces record it (text, or chat messages)
    passages: list[dict] = field(default_factory=list)
    retrievals: int = 0
    llm_calls: int = 0
    sampled_sequences: int = 0  # sampled continuations (SeaKR's k per judged context), apart from Gc
    detections: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    sentences: int = 0
    wall_time_s: float = 0.0
    steps: list[dict] = field(default_factory=list)  # what each call produced and decided (trace only)
    # The output is the answer itself (a direct-answer prompt such as `qa-oneshot`): the runner takes it
    # whole instead of looking for "So the answer is", and the answer fallback leaves it alone.
    direct: bool = False
    extraction: str = "project"  # how the answer is read from the output (`answer_extraction`)

    def counters(self) -> dict:
        counters = {"retrievals": self.retrievals, "llm_calls": self.llm_calls, "detections": self.detections,
                    "generated_tokens": self.generated_tokens, "sentences": self.sentences}
        if self.sampled_sequences:  # only sampling methods have it, so other methods' records stay as they were
            counters["sampled_sequences"] = self.sampled_sequences
        return counters


@dataclass
class Context:
    """Everything a method may use; built once per run by the runner."""

    lm: "LanguageModel"
    exemplars: Sequence[Exemplar]
    prompt_format: str
    max_new_tokens: int
    retriever: "Retriever | None" = None
    answer_fallback_tokens: int = 20
    query_max_words: int | None = None
    query_max_tokens: int | None = None  # keep a query's last N tokens of the model's tokenizer instead
    inputs: dict = field(default_factory=dict)  # name -> Path of the files the method declared (`Method.inputs`)
    template: "Template | None" = None  # the dataset's prompt template (None: the project's own)
    typed: dict = field(default_factory=dict)  # `Method.typed_question`'s answer, for a question typed to `ask`


class Method:
    type_name = "?"
    needs_retriever = False
    needs: frozenset[str] = frozenset()  # model capabilities beyond token log-probabilities
    # Settings added after runs were built, with the value that reproduces what the code did before:
    # at that value a setting is left out of a run's key (`settings_key`), so those runs keep theirs.
    later_settings: dict[str, Any] = {**GENERATION_DEFAULTS, **LOOP_DEFAULTS}

    def __init__(self, settings: dict[str, Any], context: Context):
        self.settings, self.ctx = settings, context
        self.rules = Rules.of(settings)

    @property
    def template(self) -> "Template | None":
        """The method's own prompt layout (`template:`), else the dataset's (None: the project's)."""
        spec = self.settings.get("template")
        if spec is None:
            return self.ctx.template
        from ..prompts.template import load_template

        return load_template(spec)

    @classmethod
    def settings_key(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings as a run's key records them: `later_settings` at their defaults left out."""
        later = cls.later_settings
        return {k: v for k, v in settings.items() if not (k in later and v == later[k])}

    def cot_prompt(self, question: str, passages: Sequence["Hit"] = (), dataset_template: bool = False,
                   searched: bool = False):
        """The chain-of-thought prompt of a question in the method's template (`template:`), else the
        dataset's (always the dataset's with `dataset_template`), in the model's format; `searched`
        writes the context block even when the search found nothing."""
        return build_prompt(self.ctx.prompt_format, self.ctx.exemplars, question, passages,
                            template=self.ctx.template if dataset_template else self.template, searched=searched)

    @classmethod
    def read_settings(cls, section: "Section") -> dict[str, Any]:
        return {}

    @classmethod
    def row_note(cls, settings: dict[str, Any]) -> str | None:
        """What a table row of a run with these settings must say beside its configuration's name (e.g.
        a judge other than the method's own); None: nothing."""
        return None

    @classmethod
    def inputs(cls, settings: dict[str, Any], dataset: str, method: str) -> dict[str, str]:
        """Files a run of this configuration reads besides the split, exemplars, model and index (name ->
        repo-relative path): the workflow makes them inputs of the generate rule, the runner hands them
        over in `Context.inputs` and keys resumable progress on their contents. A threshold calibrated
        on data is one: `calibration_dataset` names the split its file is made from."""
        calibration = cls.calibration_dataset(settings, dataset)
        return {"calibration": calibration_path(calibration, method)} if calibration else {}

    # Declared inputs that no rule makes (name -> what the user must provide), so a missing one is
    # refused saying what to write instead of which Snakemake target to build.
    provided_inputs: dict[str, str] = {}
    # Declared inputs that a rule makes from files the run already reads (a split, the corpus behind its
    # index): the run's own Snakemake target makes them, so a DVC stage lists those files, not these.
    derived_inputs: frozenset[str] = frozenset()
    # Declared inputs a rule of the workflow trains (name -> (the path it writes, the params section whose
    # presence defines the rule)): check-params accepts that path before it is built, while the section
    # is configured; any other declared input that no rule makes must exist.
    trained_inputs: dict[str, tuple[str, str]] = {}
    # Declared inputs keyed by the ids of a split's questions (Adaptive Retrieval's popularity): a question
    # typed to `adaptive-rag ask` is in no split, so `ask` leaves them out and asks `typed_question`.
    per_question_inputs: frozenset[str] = frozenset()

    @classmethod
    def typed_question(cls, settings: dict[str, Any], question: str, params, method: str) -> dict[str, Any]:
        """What stands in for `per_question_inputs` when `adaptive-rag ask` answers `question`, typed by a
        user and in no split (handed to the method as `Context.typed`); a type that cannot answer such a
        question as its runs would refuses, saying why. Asked before the model loads."""
        return {}

    @classmethod
    def calibration_dataset(cls, settings: dict[str, Any], dataset: str) -> str | None:
        """The split a run on `dataset` takes its threshold from (None: a threshold given in params)."""
        name = settings.get("calibration_dataset")
        return resolve_calibration_dataset(name, dataset) if name else None

    # ---- calibration: `adaptive-rag calibrate` asks a method type these, so one step and one rule
    # serve every type whose threshold is read from data ----------------------------------------

    calibration_retrieves = False  # the calibration answers with retrieval too: the step needs the index
    uncalibrated = "the threshold as a number"  # what to set instead of a calibration split (for errors)

    @classmethod
    def calibration_settings(cls, settings: dict[str, Any]) -> dict[str, Any] | None:
        """The settings a calibration run is built with (the threshold it searches set to a placeholder,
        so building the method reads no calibration file); None: the type has nothing to calibrate."""
        return None

    def calibrate_batch(self, examples: Sequence["Example"]) -> list[dict]:
        """What the calibration file keeps of each question of one batch of the calibration split."""
        raise NotImplementedError

    def calibration_record(self, rows: list[dict]) -> dict:
        """The calibration file's own fields from every question's row: the thresholds and how they were
        found (the step adds dataset, method, model, questions and ids)."""
        raise NotImplementedError

    @classmethod
    def retriever_problem(cls, settings: dict[str, Any], kind: str) -> tuple[str, str] | None:
        """A setting this configuration cannot have when it searches the `kind` index (bm25, dense or
        dense:<name>), as (key, why): check-params refuses it naming the key, before any work. None:
        nothing conflicts (every type but those that read more of an index than its search results)."""
        return None

    checks_tokens = False  # whether the type has a `tokens_problem` (so the tokenizer's files are read for it)

    @classmethod
    def tokens_problem(cls, settings: dict[str, Any], tokens: set[str], model: str) -> str | None:
        """Why a model whose tokenizer holds `tokens` cannot run this configuration (tokens the method
        writes or reads that it lacks), naming `model`; None: nothing is missing. Asked by check-params and
        before a run loads the weights, from the saved tokenizer's files (`lm.models.tokenizer_tokens`)."""
        return None

    @classmethod
    def needs_for(cls, settings: dict[str, Any]) -> set[str]:
        """Capabilities a configuration needs (some depend on settings, e.g. an attention-ranked query)."""
        return set(cls.needs)

    def answer_batch(self, examples: Sequence["Example"]) -> list[Answer]:
        raise NotImplementedError

    @staticmethod
    def read_retriever(section: "Section") -> str | None:
        """`retriever: bm25 | dense | dense:<name>` searches that index instead of `retrieval.type` (BM25
        vs dense ablations; `dense:<name>`, one of several named encoders). Whether the name is one that
        retrieval.dense defines is checked by `config`, which holds the retrieval settings."""
        value = section.raw("retriever", None)
        name = encoder_name(value)
        if value is not None and value not in KINDS and not name:
            raise section.fail("retriever", f"must be {', '.join(KINDS)}, {NAMED_DENSE}<name> or null "
                                            f"(retrieval.type); got {value!r}")
        if name:
            check_name(section, "retriever", "dense encoder", name)
        return value

    def search(self, query: str, k: int) -> list["Hit"]:
        """Retrieve with the query's last `retrieval.query_max_words` words, or its last
        `retrieval.query_max_tokens` tokens (all when unset)."""
        if self.ctx.query_max_words:
            query = " ".join(query.split()[-self.ctx.query_max_words:])
        if self.ctx.query_max_tokens:
            query = last_tokens(query, self.ctx.query_max_tokens, self.ctx.lm)
        return self.ctx.retriever.search(query, k)

    role = "multi"  # how a table row of this type answers: none, single or multi (parts/setup.py)

    @classmethod
    def setups(cls, settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Each role a configuration answers in, with its set-up (parts/setup.py): what a paper's table
        holds equal across its rows (`row_setups.py`)."""
        return basic_setup(cls, settings)

    # wo-rag, sr-rag and adaptive-retrieval read `prompt_style` and its budget `max_new_tokens`
    # (parts/rules.py `read_answer_style`); other types' settings of those names mean something else
    reads_answer_style = False

    @property
    def direct(self) -> bool:
        """Whether the configuration answers in SUGAR's one-shot `Q: ... A:` style (`prompt_style`): the
        completion is the answer, so the answer fallback never runs."""
        return self.reads_answer_style and self.settings.get("prompt_style", COT) == QA_ONESHOT

    @property
    def answer_budget(self) -> int:
        """Tokens of a one-call answer: the configuration's `max_new_tokens` where it reads one, else the
        dataset's budget."""
        own = self.settings.get("max_new_tokens") if self.reads_answer_style else None
        return own or self.ctx.max_new_tokens

    def opening_call(self, question: str) -> tuple[Any, int]:
        """The prompt and token budget of the method's first call on `question`, before any passage:
        `adaptive-rag ask` measures them against the model's context before the model runs. A type whose
        first call is another prompt says so (Self-RAG's instruction format)."""
        return self.answer_prompt(question), self.answer_budget

    def answer_prompt(self, question: str, passages: Sequence["Hit"] = ()):
        """A one-call answer's prompt: the one-shot `Q: ... A:` demonstration in the `qa-oneshot` style,
        else the chain-of-thought prompt."""
        if self.direct:
            return build_prompt(self.ctx.prompt_format, self.ctx.exemplars, question, passages, QA_ONESHOT,
                                self.template)
        return self.cot_prompt(question, passages)

    def generate_answers(self, questions: Sequence[str], passages: Sequence[Sequence["Hit"]],
                         retrievals: int = 0) -> list[Answer]:
        """One greedy call for the whole batch; each question's wall time is its share of the call. In the
        `qa-oneshot` style the prompt is the one-shot `Q: ... A:` demonstration and the answer its budget's
        whole completion."""
        start = time.perf_counter()
        prompts = [self.answer_prompt(q, p) for q, p in zip(questions, passages)]
        continuations = [self.rules.ended(c, self.ctx.lm)
                         for c in self.ctx.lm.generate(prompts, self.answer_budget, self.rules.stop)]
        share = (time.perf_counter() - start) / max(1, len(questions))
        answers = [
            Answer(output=c.text.strip(), prompt=prompt.readable(),
                   passages=[{"id": h.id, "title": h.title, "score": h.score} for h in hits],
                   retrievals=retrievals, llm_calls=1, prompt_tokens=c.prompt_tokens or 0,
                   generated_tokens=len(c.tokens), sentences=count_sentences(c.text), wall_time_s=share,
                   steps=[step_record("generate", c)], direct=self.direct)
            for prompt, c, hits in zip(prompts, continuations, passages)
        ]
        self.complete_answers(questions, answers)
        return answers

    def complete_answers(self, questions: Sequence[str], answers: Sequence[Answer]) -> None:
        """The reference evaluation's fallback: an output without "So the answer is" gets the phrase
        appended and a few more tokens generated, without passages, so every method is scored on an
        answer phrase rather than on its reasoning."""
        for answer in answers:
            answer.extraction = self.rules.answer_extraction
        if self.rules.answer_extraction == "dragin-code":
            self.complete_answers_dragin_code(questions, answers)
            return
        budget = self.ctx.answer_fallback_tokens
        todo = [i for i, a in enumerate(answers) if budget and not a.direct and not has_answer(a.output)]
        if not todo:
            return
        start = time.perf_counter()
        # An output cut off right after the phrase is continued as it is, not given the phrase twice.
        # Raw prompts end with "Answer:" and the model writes " <text>"; chat answers start bare.
        lead = " " if self.ctx.prompt_format == "raw" else ""
        prefixes = [lead + (answers[i].output if extract_answer(answers[i].output)[1]
                            else f"{answers[i].output} {ANSWER_PREFIX}".lstrip()) for i in todo]
        prompts = [self.cot_prompt(questions[i], dataset_template=True).with_prefix(prefix)
                   for i, prefix in zip(todo, prefixes)]
        self.fallback_calls(answers, todo, prompts, budget, start,
                            lambda k, c: (prefixes[k] + c.text).strip())

    def complete_answers_dragin_code(self, questions: Sequence[str], answers: Sequence[Answer]) -> None:
        """`answer_extraction: dragin-code`, the DRAGIN reference's src/eval.py `regenerate_answer`:
        every output is cut at its first "Question:" (or "#10000000", "Note:") past its start; one still
        without "the answer is" (exact case) gets " So the answer is " appended, trailing space
        included, and the model continues it with the dataset's prompt and no passages, with no stop
        string, for `answer_fallback_tokens` tokens; the continuation is stripped, appended, and the
        whole cut at the split words again."""
        budget = self.ctx.answer_fallback_tokens
        todo = []
        for i, answer in enumerate(answers):
            if answer.direct:
                continue
            answer.output = dragin_code_cut(answer.output)
            if budget and "the answer is" not in answer.output:
                todo.append(i)
        if not todo:
            return
        start = time.perf_counter()
        cots = [answers[i].output + " So the answer is " for i in todo]
        lead = " " if self.ctx.prompt_format == "raw" else ""  # the reference's `case + " " + cot`
        prompts = [self.cot_prompt(questions[i], dataset_template=True).with_prefix(lead + cot)
                   for i, cot in zip(todo, cots)]
        self.fallback_calls(answers, todo, prompts, budget, start,
                            lambda k, c: dragin_code_cut(cots[k] + c.text.strip(), at_start=True))

    def fallback_calls(self, answers: Sequence[Answer], todo: list[int], prompts: list, budget: int, start: float,
                       output) -> None:
        """One batched fallback call for the answers `todo`; `output(k, continuation)` is the k-th's new output."""
        continuations = [self.rules.ended(c, self.ctx.lm)
                         for c in self.ctx.lm.generate(prompts, budget, self.rules.fallback_stop)]
        share = (time.perf_counter() - start) / len(todo)
        for k, (i, c) in enumerate(zip(todo, continuations)):
            answer = answers[i]
            answer.output = output(k, c)
            answer.llm_calls += 1
            answer.generated_tokens += len(c.tokens)
            answer.sentences += count_sentences(c.text)
            answer.wall_time_s += share
            answer.steps.append(step_record("fallback", c))


def last_tokens(query: str, count: int, lm) -> str:
    """The query's last `count` tokens of the model's tokenizer, decoded without special tokens: the
    DRAGIN reference's src/retriever.py `BM25.retrieve` (truncation on the left, `max_query_length` 64)."""
    tokenizer = getattr(lm, "tokenizer", None)
    if tokenizer is None:
        from ..errors import ConfigError

        raise ConfigError("retrieval.query_max_tokens needs the model's tokenizer, which this backend does not "
                          "give (the hf backend does); use retrieval.query_max_words")
    ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[-count:], skip_special_tokens=True)


def count_sentences(text: str) -> int:
    from .parts.text import sentences

    return len(sentences(text)) if text.strip() else 0


def step_record(phase: str, c: "Continuation", **decision) -> dict:
    """One call as the trace records it: the text, each token with its probability, and what was decided."""
    import math

    return {"phase": phase, "text": c.text, "finish": c.finish_reason,
            "tokens": [[t, round(math.exp(lp), 4)] for t, lp in zip(c.tokens, c.logprobs)], **decision}
