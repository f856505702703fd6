"""fs-rag (EveryStepRetrieval): retrieve before every sentence, first with the question, then with the
previous sentence; scripted LM and recording retriever."""

from __future__ import annotations

from adaptive_rag.methods.fs_rag import FixedSentenceRetrieval

from conftest import ANSWER, BORN, REGEN, SCRIPTED_QUESTION as Q, cont, run_method


def test_fs_rag_queries_question_then_each_previous_sentence():
    two = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."],
               finish="stop")
    script = {(True, ""): two, (True, BORN): REGEN, (True, BORN + " He died in 1750."): ANSWER}
    answer, lm, retriever = run_method(FixedSentenceRetrieval, {}, script)
    assert retriever.queries == [(Q, 3), ("Inchcombe was born in Paris.", 3), ("He died in 1750.", 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [
        ("", 50), (BORN, 44), (BORN + " He died in 1750.", 39)]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert answer.counters() == {"retrievals": 3, "llm_calls": 3, "detections": 0, "generated_tokens": 28,
                                 "sentences": 5}
    # the third prompt carries the third retrieval's passages
    assert "[1] T3: passage 3.1" in lm.calls[2]["prompt"].text


def test_fs_rag_capped_generates_the_rest_with_the_last_passages():
    two = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."],
               finish="stop")
    script = {(True, ""): two, (True, BORN): REGEN}
    answer, lm, retriever = run_method(FixedSentenceRetrieval, {"max_retrievals": 1}, script)
    assert retriever.queries == [(Q, 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [("", 50), (BORN, 44)]
    assert "[1] T1: passage 1.1" in lm.calls[1]["prompt"].text
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert (answer.retrievals, answer.llm_calls) == (1, 2)
