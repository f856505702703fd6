"""wo-rag: one greedy generate call per batch, no passages, no search; scripted LM and recording retriever."""

from __future__ import annotations

import pytest

from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.base import NO_EXTRAS
from adaptive_rag.methods.wo_rag import WithoutRetrieval
from adaptive_rag.prompts.fewshot import STOP_STRINGS, build_prompt

from conftest import ANSWER, SCRIPTED_EXEMPLARS, SCRIPTED_QUESTION, run_batch, run_method, settings_of


def test_wo_rag_generates_once_without_passages_and_never_searches():
    answer, lm, retriever = run_method(WithoutRetrieval, {}, {(False, ""): ANSWER})
    assert lm.batches == [1]
    [call] = lm.calls
    assert (call["passages"], call["prefix"], call["max_new_tokens"], call["stop"], call["extras"]) == (
        False, "", 50, STOP_STRINGS, NO_EXTRAS)
    expected = build_prompt("raw", SCRIPTED_EXEMPLARS, SCRIPTED_QUESTION)
    assert call["prompt"].text == expected.text and "Context:" not in call["prompt"].text
    assert retriever.queries == []
    assert answer.output == "So the answer is Paris."
    assert answer.prompt == expected.readable() and answer.passages == []
    # 6 tokens, 1 sentence; the output has its answer phrase, so no fallback call
    assert answer.counters() == {"retrievals": 0, "llm_calls": 1, "detections": 0, "generated_tokens": 6,
                                 "sentences": 1}
    assert [s["phase"] for s in answer.steps] == ["generate"]


def test_wo_rag_answers_a_batch_in_one_call_in_order():
    questions = ["Q one?", "Q two?", "Q three?"]
    answers, lm, retriever = run_batch(WithoutRetrieval, {}, {(False, ""): ANSWER}, questions)
    assert lm.batches == [3]
    assert [c["prompt"].text for c in lm.calls] == [build_prompt("raw", SCRIPTED_EXEMPLARS, q).text
                                                    for q in questions]
    assert retriever.queries == []
    assert [(a.retrievals, a.llm_calls, a.passages) for a in answers] == [(0, 1, [])] * 3


def test_wo_rag_takes_no_settings():
    assert settings_of(WithoutRetrieval, {}, "methods.wo-rag") == {}
    with pytest.raises(ConfigError, match="methods.wo-rag.top_k: unknown key"):
        settings_of(WithoutRetrieval, {"top_k": 3}, "methods.wo-rag")
