"""sr-rag: one search per question with the question text and `top_k`, exactly those passages in the
prompt, one generate call for the batch; scripted LM and recording retriever."""

from __future__ import annotations

import pytest

from adaptive_rag.errors import ConfigError
from adaptive_rag.methods.sr_rag import SingleRoundRetrieval
from adaptive_rag.prompts.fewshot import STOP_STRINGS, build_prompt
from adaptive_rag.retrieval import Hit

from conftest import (ANSWER, BORN, SCRIPTED_EXEMPLARS, SCRIPTED_QUESTION, cont, run_batch, run_method,
                      settings_of)


def test_sr_rag_searches_once_per_question_and_prompts_with_exactly_those_passages():
    questions = ["Where was Inchcombe born?", "Who founded the rope walk?"]
    answers, lm, retriever = run_batch(SingleRoundRetrieval, {"top_k": 2}, {(True, ""): ANSWER}, questions)
    assert retriever.queries == [(questions[0], 2), (questions[1], 2)]
    assert lm.batches == [2]  # one generate call for the whole batch
    # search n returns d{n}.1 (score 1) and d{n}.2 (score .5), titled T{n}
    hits = [[Hit(f"d{n}.1", f"T{n}", f"passage {n}.1", 1.0), Hit(f"d{n}.2", f"T{n}", f"passage {n}.2", 0.5)]
            for n in (1, 2)]
    for call, question, own in zip(lm.calls, questions, hits):
        assert (call["passages"], call["prefix"], call["max_new_tokens"], call["stop"]) == (True, "", 50,
                                                                                            STOP_STRINGS)
        assert call["prompt"].text == build_prompt("raw", SCRIPTED_EXEMPLARS, question, own).text
    first, second = (c["prompt"].text for c in lm.calls)
    assert "Context:\n[1] T1: passage 1.1\n[2] T1: passage 1.2\n" in first
    assert "[3]" not in first and "T2" not in first
    assert "Context:\n[1] T2: passage 2.1\n[2] T2: passage 2.2\n" in second and "T1" not in second
    assert [a.passages for a in answers] == [
        [{"id": "d1.1", "title": "T1", "score": 1.0}, {"id": "d1.2", "title": "T1", "score": 0.5}],
        [{"id": "d2.1", "title": "T2", "score": 1.0}, {"id": "d2.2", "title": "T2", "score": 0.5}]]
    assert [a.output for a in answers] == ["So the answer is Paris."] * 2
    assert [a.counters() for a in answers] == [{"retrievals": 1, "llm_calls": 1, "detections": 0,
                                                "generated_tokens": 6, "sentences": 1}] * 2


def test_sr_rag_top_k_defaults_to_three_and_must_be_positive():
    assert settings_of(SingleRoundRetrieval, {}, "methods.sr-rag") == {"top_k": 3, "retriever": None}
    answer, lm, retriever = run_method(SingleRoundRetrieval, {}, {(True, ""): ANSWER})
    assert retriever.queries == [(SCRIPTED_QUESTION, 3)]
    assert [p["id"] for p in answer.passages] == ["d1.1", "d1.2", "d1.3"]
    with pytest.raises(ConfigError, match="methods.sr-rag.top_k: expected an integer >= 1"):
        settings_of(SingleRoundRetrieval, {"top_k": 0}, "methods.sr-rag")


def test_sr_rag_answer_fallback_neither_searches_nor_counts_a_retrieval():
    # the output lacks "So the answer is": the fallback continues it without passages
    script = {(True, ""): cont([" Inchcombe", " was", " born", " in", " Paris", "."], finish="stop"),
              (False, BORN + " So the answer is"): cont([" Paris", "."], finish="stop")}
    answer, lm, retriever = run_method(SingleRoundRetrieval, {}, script)
    assert retriever.queries == [(SCRIPTED_QUESTION, 3)]
    assert [(c["passages"], c["prefix"]) for c in lm.calls] == [(True, ""), (False, BORN + " So the answer is")]
    assert answer.output == "Inchcombe was born in Paris. So the answer is Paris."
    assert (answer.retrievals, answer.llm_calls, answer.generated_tokens) == (1, 2, 8)


def test_sr_rag_query_obeys_retrieval_query_max_words():
    """`retrieval.query_max_words` caps every method's queries, the question of SR-RAG included."""
    from adaptive_rag.data.datasets import Example
    from conftest import RecordingRetriever, ScriptedLM, method_with

    lm, retriever = ScriptedLM({(True, ""): ANSWER}), RecordingRetriever()
    method = method_with(SingleRoundRetrieval, {"top_k": 2}, lm, retriever)
    method.ctx.query_max_words = 2
    method.answer_batch([Example("q1", "Where was Inchcombe born?", ["Paris"], "span")])
    assert retriever.queries == [("Inchcombe born?", 2)]
