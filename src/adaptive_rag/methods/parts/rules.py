"""Loop rules: the set-up around the model that decides where a generation stops and what text is kept.

Two implementations of one method that give the same model the same prompt still diverge when they
stop generations differently, look ahead further, check for the answer differently or keep the
model's end-of-turn token, so each of these is a setting rather than code. The defaults are the
project's own (they end an answer where it ends; docs/methods.md#loop-rules says why they are
better), and another implementation's rules are reachable from params alone:

- `stop`: the stop strings of every generation (null: the project's "\\n\\n" and "Question:"; [] for
  none, as the DRAGIN reference code, which runs each call to its token budget);
- `end_of_turn`: `strip` the model's end-of-sequence token from the text (the default), or `keep` its
  text at the end of every continuation that ended on it, as a decoder that keeps special tokens does,
  or `continue`: keep it and do not take it as the end of the answer, so the dynamic loop goes on
  generating after it (the DRAGIN reference code, src/generate.py `TokenRAG.inference` and
  `AttnWeightRAG.inference`, stops a question only on "the answer is", no growth or its budget);
- `answer_extraction`: how the answer is read from the output and how the answer fallback completes
  an output without one: `project` (evaluation/answer.py) or `dragin-code` (the reference's
  src/eval.py `regenerate_answer` and src/data.py `get_real_prediction`: the output cut at
  "Question:", " So the answer is " with its trailing space appended, no stop string, the answer
  after the first "the answer is");
- `template`: a prompt template for this method's chain-of-thought calls instead of the dataset's
  (`builtin:<name>` or a file), where one dataset needs two layouts (the reference's FLARE prompt ends
  "Answer: " with a space, its DRAGIN prompt "Answer:"); the answer fallback keeps the dataset's, as
  the reference's evaluation builds it from the dataset's case for every method;
- `lookahead` (the dynamic loop): how many tokens each call may generate: `remaining` (what is left
  of the budget), `full` (the whole budget every call, as the reference code), or a number;
- `answer_check` (the dynamic loop): a question stops once its text says "the answer is" in `any-case`,
  or only in `exact-case` (the reference code's check);
- `joining` (the triggered loop: FLARE, DRAGIN and their kin): `exact` keeps the generated text as it
  was generated and feeds it back as the prefix; `dragin-code` keeps and feeds back what the DRAGIN
  reference code's loops put together (`joining.py`: stripped pieces joined with spaces), stops a
  question when its text has more than `max_new_tokens` tokens or did not grow in length, as they do;
- `empty_query` (the triggered loop): a trigger whose query comes out empty (every word of the fired
  sentence masked) retrieves with the `question` (the default), or `search`es with the empty query as
  the DRAGIN reference code does: no passage comes back, the retrieval counts, and the regeneration
  is prompted with an empty context block (`TokenRAG.inference`, `AttnWeightRAG.inference`).

Methods that answer in one call (wo-rag, sr-rag, adaptive-retrieval, and SUGAR's own branches, which
are built from them) also take `prompt_style` (`read_answer_style`): `cot`, the dataset's chain of
thought (the default), or `qa-oneshot`, SUGAR's one `Q: ... A:` demonstration, whose whole completion
is the answer (no answer fallback; stop strings "\n" and "Q:" unless `stop` says otherwise), with its own
budget `max_new_tokens` (32 for `qa-oneshot`, SUGAR's; the dataset's otherwise). A table of SUGAR's
compares its rows under SUGAR's prompt this way.

Every key defaults to what the code did before it was a setting. A method's settings hold only the
rules params give, and `Method.settings_key` leaves one given at its default out of a run's key, so
runs built before the rules existed keep their key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...evaluation.answer import EXTRACTIONS
from ...prompts.fewshot import COT, PROMPT_STYLES, QA_ONESHOT, QA_STOP_STRINGS, STOP_STRINGS
from .joining import JOINING

if TYPE_CHECKING:
    from ...lm.base import Continuation
    from ...settings import Section

END_OF_TURN = ("strip", "keep", "continue")
LOOKAHEAD = ("remaining", "full")
ANSWER_CHECKS = ("any-case", "exact-case")
EMPTY_QUERY = ("question", "search")
ANSWER_PHRASE = "the answer is"
# every method of the loop family
GENERATION_DEFAULTS: dict[str, Any] = {"stop": None, "end_of_turn": "strip", "answer_extraction": "project",
                                       "template": None, "prompt_style": COT}
QA_ANSWER_TOKENS = 32  # SUGAR's budget for its one-shot answers and samples ("max_sample_tokens")
LOOP_DEFAULTS: dict[str, Any] = {"lookahead": "remaining", "answer_check": "any-case",  # the dynamic loop
                                 "joining": "exact", "empty_query": "question"}


def read_generation_rules(section: "Section") -> dict[str, Any]:
    """`stop` and `end_of_turn`, the rules of any method that generates with the chain-of-thought
    prompt; only the keys params give (an absent key is its default, and settings read without these
    keys are exactly what they were before the keys existed)."""
    rules = {}
    if "stop" in section.data:
        stop = section.raw("stop")
        if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
            raise section.fail("stop", f"expected a list of non-empty strings ([] for none) or null (the "
                                       f"project's: {list(STOP_STRINGS)!r}), got {stop!r}")
        rules["stop"] = stop
    if "end_of_turn" in section.data:
        rules["end_of_turn"] = section.str("end_of_turn", choices=END_OF_TURN)
    if "answer_extraction" in section.data:
        rules["answer_extraction"] = section.str("answer_extraction", choices=EXTRACTIONS)
    if "template" in section.data:
        rules["template"] = read_template(section)
    return rules


def read_answer_style(section: "Section") -> dict[str, Any]:
    """`prompt_style` and its budget `max_new_tokens` (only the keys params give, or the budget that
    `qa-oneshot` implies), for the methods that answer in one call."""
    rules: dict[str, Any] = {}
    if "prompt_style" in section.data:
        rules["prompt_style"] = section.str("prompt_style", choices=PROMPT_STYLES)
    style = rules.get("prompt_style", COT)
    if style == QA_ONESHOT or "max_new_tokens" in section.data:
        default = QA_ANSWER_TOKENS if style == QA_ONESHOT else None
        rules["max_new_tokens"] = section.int("max_new_tokens", default, minimum=1, allow_none=True)
    if style == QA_ONESHOT and "answer_extraction" in section.data:
        raise section.fail("answer_extraction", "a qa-oneshot answer is its whole completion; it extracts nothing")
    return rules


def read_template(section: "Section") -> str | None:
    """`template:` of a method: a prompt template spec, checked to exist (null: the dataset's)."""
    from ...errors import InputError
    from ...prompts.template import resolve_template

    spec = section.raw("template")
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise section.fail("template", f"expected `builtin:<name>`, a file path or null (the dataset's), got {spec!r}")
    try:
        path = resolve_template(spec)
    except InputError as exc:
        raise section.fail("template", str(exc)) from None
    if not path.is_file():
        raise section.fail("template", f"{spec}: no such file (give a template file, schema in "
                                       f"docs/configuration.md#prompt-templates)")
    return spec


def read_loop_rules(section: "Section") -> dict[str, Any]:
    """The generation rules, `lookahead` and `answer_check`: the rules of the dynamic loop (only the
    keys params give, as `read_generation_rules`)."""
    rules = read_generation_rules(section)
    if "lookahead" in section.data:
        lookahead = section.raw("lookahead")
        if lookahead not in LOOKAHEAD and (isinstance(lookahead, bool) or not isinstance(lookahead, int)
                                           or lookahead < 1):
            raise section.fail("lookahead", f"must be {', '.join(LOOKAHEAD)} or an integer >= 1; got {lookahead!r}")
        rules["lookahead"] = lookahead
    if "answer_check" in section.data:
        rules["answer_check"] = section.str("answer_check", choices=ANSWER_CHECKS)
    if "joining" in section.data:
        rules["joining"] = section.str("joining", choices=JOINING)
    if "empty_query" in section.data:
        rules["empty_query"] = section.str("empty_query", choices=EMPTY_QUERY)
    return rules


@dataclass(frozen=True)
class Rules:
    """A method's rules, read from its settings (a method without the keys gets the defaults)."""

    stop: tuple[str, ...] = STOP_STRINGS
    end_of_turn: str = "strip"
    lookahead: str | int = "remaining"
    answer_check: str = "any-case"
    answer_extraction: str = "project"
    joining: str = "exact"
    empty_query: str = "question"

    @classmethod
    def of(cls, settings: dict[str, Any]) -> "Rules":
        stop = settings.get("stop")
        default_stop = QA_STOP_STRINGS if settings.get("prompt_style") == QA_ONESHOT else STOP_STRINGS
        return cls(default_stop if stop is None else tuple(stop), settings.get("end_of_turn", "strip"),
                   settings.get("lookahead", "remaining"), settings.get("answer_check", "any-case"),
                   settings.get("answer_extraction", "project"), settings.get("joining", "exact"),
                   settings.get("empty_query", "question"))

    @property
    def fallback_stop(self) -> tuple[str, ...]:
        """The answer fallback writes one short phrase: the stop strings and the end of its line; with
        `answer_extraction: dragin-code`, none (src/eval.py `regenerate_answer` stops only at the model's
        end of sequence or its 20 tokens)."""
        return () if self.answer_extraction == "dragin-code" else self.stop + ("\n",)

    def finished(self, c: "Continuation") -> bool:
        """Whether a continuation ended the answer: a stop string, or the end-of-sequence token unless
        `end_of_turn: continue`."""
        return c.finish_reason == "stop" or (c.finish_reason == "eos" and self.end_of_turn != "continue")

    def says_answer(self, text: str) -> bool:
        return ANSWER_PHRASE in (text if self.answer_check == "exact-case" else text.lower())

    def call_tokens(self, budget: int, kept: int) -> int:
        """Tokens one call of the dynamic loop may generate, `kept` of the `budget` already used."""
        if self.lookahead == "remaining":
            return max(1, budget - kept)
        return budget if self.lookahead == "full" else self.lookahead

    def ended(self, c: "Continuation", lm) -> "Continuation":
        """The continuation as the text keeps it: with `end_of_turn: keep`, one that ended on the model's
        end-of-sequence token gets that token's text appended (it has no token of its own: token-level
        judgements never see it, the kept text and the output do)."""
        if self.end_of_turn == "strip" or c.finish_reason != "eos":
            return c
        end = end_of_turn_text(lm)
        if c.tokens and c.tokens[-1] == end:  # `model.special_tokens: keep`: the end token is already a token
            return c
        import dataclasses

        return dataclasses.replace(c, text=c.text + end)


def end_of_turn_text(lm) -> str:
    text = getattr(lm, "end_of_turn_text", None)
    if not isinstance(text, str) or not text:
        from ...errors import ConfigError

        raise ConfigError("end_of_turn: keep needs the text of the model's end-of-sequence token, which this "
                          "backend does not give (the hf backend does); use end_of_turn: strip")
    return text
