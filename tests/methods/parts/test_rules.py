"""Loop rules: each changes exactly what it says and nothing else. Each test runs the same scripted
question with the project's default and with one rule set, and compares every call the model saw."""

from __future__ import annotations

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.evaluation.answer import extract_answer
from adaptive_rag.methods.flare import FLARE
from adaptive_rag.methods.parts.rules import Rules
from adaptive_rag.methods.wo_rag import WithoutRetrieval
from adaptive_rag.prompts.fewshot import STOP_STRINGS

from conftest import ANSWER, BORN, REGEN, ScriptedLM, cont, method_with, run_method

# as in test_loop: sentence 2 has " 1722" at p .3 < .8, so FLARE (paper) fires there
LOOKAHEAD_1722 = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1722", "."],
                      [0.9] * 9 + [0.3, 0.9], finish="stop")

# FLARE fires on " 1722", regenerates from BORN, keeps " He died in 1750.", then a look-ahead answers.
FIRES = {(False, ""): LOOKAHEAD_1722, (True, BORN): REGEN, (False, BORN + " He died in 1750."): ANSWER}


def calls(lm, *fields):
    return [tuple(c["prompt"].key() if f == "prompt" else c[f] for f in fields) for c in lm.calls]


@pytest.mark.parametrize("stop, sent", [([], ()), (["Q:", "\n"], ("Q:", "\n")), (None, STOP_STRINGS)])
def test_stop_changes_the_stop_strings_of_every_call_and_nothing_else(stop, sent):
    default, lm_default, retriever_default = run_method(FLARE, {}, FIRES)
    answer, lm, retriever = run_method(FLARE, {"stop": stop}, FIRES)
    assert [c["stop"] for c in lm.calls] == [sent] * 3
    same = ("prompt", "passages", "prefix", "max_new_tokens", "extras")
    assert calls(lm, *same) == calls(lm_default, *same)
    assert (answer.output, retriever.queries, answer.counters()) == (
        default.output, retriever_default.queries, default.counters())


def test_stop_applies_to_the_answer_fallback_too():
    prefix = " Inchcombe was born in Paris. He died in 1722. So the answer is"
    script = {(False, ""): LOOKAHEAD_1722, (False, prefix): cont([" Paris", "."], finish="stop")}
    _, lm, _ = run_method(FLARE, {"max_retrievals": 0, "stop": []}, script)
    assert [c["stop"] for c in lm.calls] == [(), ("\n",)]  # the fallback still ends at its line


@pytest.mark.parametrize("lookahead, tokens", [("remaining", [50, 44, 39]), ("full", [50, 50, 50]), (7, [7, 7, 7])])
def test_lookahead_changes_only_how_many_tokens_each_call_may_generate(lookahead, tokens):
    default, lm_default, _ = run_method(FLARE, {}, FIRES)
    answer, lm, _ = run_method(FLARE, {"lookahead": lookahead}, FIRES)
    assert [c["max_new_tokens"] for c in lm.calls] == tokens
    same = ("prompt", "passages", "prefix", "stop", "extras")
    assert calls(lm, *same) == calls(lm_default, *same)
    assert answer.output == default.output


def test_answer_check_exact_case_does_not_stop_at_a_capitalised_the_answer_is():
    # confident (no FLARE fire), not ended by the model: only the answer check can stop the question
    says = cont([" The", " answer", " is", " Paris", "."], finish="length")
    script = {(False, ""): says, (False, " The answer is Paris."): ANSWER}
    any_case, lm_any, _ = run_method(FLARE, {}, script)
    exact, lm_exact, _ = run_method(FLARE, {"answer_check": "exact-case"}, script)
    assert [c["prefix"] for c in lm_any.calls] == [""]
    assert [c["prefix"] for c in lm_exact.calls] == ["", " The answer is Paris."]  # went on, as the reference
    assert any_case.output == "The answer is Paris."
    assert exact.output == "The answer is Paris. So the answer is Paris."
    assert Rules(answer_check="exact-case").says_answer("So the answer is X")  # lower case still counts


class EndOfTurnLM(ScriptedLM):
    end_of_turn_text = "<|im_end|>"


ENDS = cont([" Paris", " is", " big", ".", " So", " the", " answer", " is", " Paris", "."], finish="eos")


@pytest.mark.parametrize("end_of_turn, output, prediction", [
    ("strip", "Paris is big. So the answer is Paris.", "Paris"),
    # the reference decodes special tokens: its answer keeps them, and the final period is not final
    ("keep", "Paris is big. So the answer is Paris.<|im_end|>", "Paris.<|im_end|>"),
])
def test_end_of_turn_keeps_the_models_end_token_in_the_text(end_of_turn, output, prediction):
    lm = EndOfTurnLM({(False, ""): ENDS})
    method = method_with(WithoutRetrieval, {"end_of_turn": end_of_turn}, lm)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert answer.output == output and extract_answer(answer.output) == (prediction, True)
    assert [c["stop"] for c in lm.calls] == [STOP_STRINGS]  # nothing else moved


def test_end_of_turn_keep_in_the_dynamic_loop_and_without_a_token_text():
    script = {(False, ""): cont([" So", " the", " answer", " is", " Paris", "."], finish="eos")}
    lm = EndOfTurnLM(script)
    method = method_with(FLARE, {"end_of_turn": "keep"}, lm)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert answer.output == "So the answer is Paris.<|im_end|>"
    method = method_with(FLARE, {"end_of_turn": "keep"}, ScriptedLM(script))
    with pytest.raises(ConfigError, match="end_of_turn: keep needs the text of the model's end-of-sequence token"):
        method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    # a continuation that did not end on the end token is never touched
    assert Rules(end_of_turn="keep").ended(ANSWER, lm) is ANSWER
