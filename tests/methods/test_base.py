"""What every method shares (methods/base.py): the "So the answer is" fallback that completes outputs
without an answer phrase."""

from __future__ import annotations

from adaptive_rag.methods.base import Answer, Context, Method
from adaptive_rag.prompts.fewshot import STOP_STRINGS

from conftest import SCRIPTED_EXEMPLARS as EXEMPLARS, ScriptedLM, cont


def test_complete_answers():
    outputs = ["Paris is big.", "Paris is big. So the answer is", "So the answer is Lyon.", ""]
    script = {(False, " Paris is big. So the answer is"): cont([" Paris", "."], finish="stop"),
              (False, " So the answer is"): cont([" Rome", "."], finish="stop")}
    lm = ScriptedLM(script)
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=5)
    answers = [Answer(output=o, prompt="p") for o in outputs]
    Method({}, ctx).complete_answers(["Q1?", "Q2?", "Q3?", "Q4?"], answers)
    assert [a.output for a in answers] == ["Paris is big. So the answer is Paris.",
                                           "Paris is big. So the answer is Paris.",
                                           "So the answer is Lyon.",
                                           "So the answer is Rome."]
    # one batched call for the three without an answer, in order
    assert [c["prefix"] for c in lm.calls] == [" Paris is big. So the answer is", " Paris is big. So the answer is",
                                               " So the answer is"]
    assert {(c["max_new_tokens"], c["stop"]) for c in lm.calls} == {(5, STOP_STRINGS + ("\n",))}
    assert [(a.llm_calls, a.generated_tokens, a.sentences) for a in answers] == [(1, 2, 1), (1, 2, 1), (0, 0, 0),
                                                                                (1, 2, 1)]
    assert [len(a.steps) for a in answers] == [1, 1, 0, 1]


def test_complete_answers_with_no_budget_does_nothing():
    lm = ScriptedLM({})
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=0)
    answers = [Answer(output="Paris is big.", prompt="p")]
    Method({}, ctx).complete_answers(["Q?"], answers)
    assert answers[0].output == "Paris is big." and lm.calls == []


def test_complete_answers_raw_prompt_keeps_the_space_after_answer():
    lm = ScriptedLM({(False, " Paris is big. So the answer is"): cont([" Paris", "."], finish="stop")})
    ctx = Context(lm=lm, exemplars=EXEMPLARS, prompt_format="raw", max_new_tokens=50, answer_fallback_tokens=5)
    Method({}, ctx).complete_answers(["Q?"], [Answer(output="Paris is big.", prompt="p")])
    assert lm.calls[0]["prompt"].readable().endswith("Question: Q?\nAnswer: Paris is big. So the answer is")
