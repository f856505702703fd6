"""Loop rules: the set-up around the model that decides where a generation stops and what text is kept.

Two implementations of one method that give the same model the same prompt still diverge when they
stop generations differently, look ahead further, check for the answer differently or keep the
model's end-of-turn token, so each of these is a setting rather than code. The defaults are the
project's own (they end an answer where it ends; docs/methods.md#loop-rules says why they are
better), and another implementation's rules are reachable from params alone:

- `stop`: the stop strings of every generation (null: the project's "\\n\\n" and "Question:"; [] for
  none, as the DRAGIN reference code, which runs each call to its token budget);
- `end_of_turn`: `strip` the model's end-of-sequence token from the text (the default), or `keep` its
  text at the end of every continuation that ended on it, as a decoder that keeps special tokens does;
- `lookahead` (the dynamic loop): how many tokens each call may generate: `remaining` (what is left
  of the budget), `full` (the whole budget every call, as the reference code), or a number;
- `answer_check` (the dynamic loop): a question stops once its text says "the answer is" in `any-case`,
  or only in `exact-case` (the reference code's check).

Every key defaults to what the code did before it was a setting. A method's settings hold only the
rules params give, and `Method.settings_key` leaves one given at its default out of a run's key, so
runs built before the rules existed keep their key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...prompts.fewshot import STOP_STRINGS

if TYPE_CHECKING:
    from ...lm.base import Continuation
    from ...settings import Section

END_OF_TURN = ("strip", "keep")
LOOKAHEAD = ("remaining", "full")
ANSWER_CHECKS = ("any-case", "exact-case")
ANSWER_PHRASE = "the answer is"
GENERATION_DEFAULTS: dict[str, Any] = {"stop": None, "end_of_turn": "strip"}  # every method of the loop family
LOOP_DEFAULTS: dict[str, Any] = {"lookahead": "remaining", "answer_check": "any-case"}  # the dynamic loop


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
    return rules


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
    return rules


@dataclass(frozen=True)
class Rules:
    """A method's rules, read from its settings (a method without the keys gets the defaults)."""

    stop: tuple[str, ...] = STOP_STRINGS
    end_of_turn: str = "strip"
    lookahead: str | int = "remaining"
    answer_check: str = "any-case"

    @classmethod
    def of(cls, settings: dict[str, Any]) -> "Rules":
        stop = settings.get("stop")
        return cls(STOP_STRINGS if stop is None else tuple(stop), settings.get("end_of_turn", "strip"),
                   settings.get("lookahead", "remaining"), settings.get("answer_check", "any-case"))

    @property
    def fallback_stop(self) -> tuple[str, ...]:
        """The answer fallback writes one short phrase: the stop strings and the end of its line."""
        return self.stop + ("\n",)

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
        import dataclasses

        return dataclasses.replace(c, text=c.text + end_of_turn_text(lm))


def end_of_turn_text(lm) -> str:
    text = getattr(lm, "end_of_turn_text", None)
    if not isinstance(text, str) or not text:
        from ...errors import ConfigError

        raise ConfigError("end_of_turn: keep needs the text of the model's end-of-sequence token, which this "
                          "backend does not give (the hf backend does); use end_of_turn: strip")
    return text
