"""fs-rag (EveryStepRetrieval): retrieve before every sentence, first with the question, then with the
previous sentence; with `accumulate: true` (IRCoT) the prompt keeps every passage so far, up to
`max_passages`. Scripted LM and recording retrievers."""

from __future__ import annotations

import re

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.methods.fs_rag import FixedSentenceRetrieval
from adaptive_rag.retrieval import Hit

from conftest import (ANSWER, BORN, REGEN, SCRIPTED_QUESTION as Q, RecordingRetriever, ScriptedLM, cont, method_with,
                      run_method, settings_of)

# two sentences in one continuation: FS-RAG keeps the first, then retrieves with it
TWO = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1750", "."], finish="stop")
THREE_STEPS = {(True, ""): TWO, (True, BORN): REGEN, (True, BORN + " He died in 1750."): ANSWER}


def test_fs_rag_queries_question_then_each_previous_sentence():
    answer, lm, retriever = run_method(FixedSentenceRetrieval, {}, THREE_STEPS)
    assert retriever.queries == [(Q, 3), ("Inchcombe was born in Paris.", 3), ("He died in 1750.", 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [
        ("", 50), (BORN, 44), (BORN + " He died in 1750.", 39)]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert answer.counters() == {"retrievals": 3, "llm_calls": 3, "detections": 0, "generated_tokens": 28,
                                 "sentences": 5}
    # the third prompt carries the third retrieval's passages
    assert "[1] T3: passage 3.1" in lm.calls[2]["prompt"].text


def test_fs_rag_capped_generates_the_rest_with_the_last_passages():
    script = {(True, ""): TWO, (True, BORN): REGEN}
    answer, lm, retriever = run_method(FixedSentenceRetrieval, {"max_retrievals": 1}, script)
    assert retriever.queries == [(Q, 3)]
    assert [(c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [("", 50), (BORN, 44)]
    assert "[1] T1: passage 1.1" in lm.calls[1]["prompt"].text
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert (answer.retrievals, answer.llm_calls) == (1, 2)


# ---- accumulate: true (IRCoT) ----

class OverlappingRetriever(RecordingRetriever):
    """Search n returns the passages named in `ids[n - 1]`, so consecutive searches can share ids."""

    def __init__(self, ids):
        super().__init__()
        self.ids = ids

    def search(self, query, k):
        self.queries.append((query, k))
        return [Hit(i, f"T{i}", f"passage {i}", 1.0) for i in self.ids[len(self.queries) - 1]]


def run_overlapping(params, ids):
    lm, retriever = ScriptedLM(THREE_STEPS), OverlappingRetriever(ids)
    method = method_with(FixedSentenceRetrieval, params, lm, retriever)
    [answer] = method.answer_batch([Example("q1", Q, ["Paris"], "span")])
    return answer, lm


def shown(call) -> list[str]:
    """The passage ids a prompt shows, in order (titles are T<id>)."""
    return re.findall(r"^\[\d+\] T(\S+):", call["prompt"].text, re.MULTILINE)


OVERLAPPING = [["a", "b", "c"], ["b", "d", "a"], ["e", "c", "f"]]


def test_fs_rag_accumulate_appends_new_ids_in_retrieval_order():
    answer, lm = run_overlapping({"accumulate": True}, OVERLAPPING)
    assert [shown(c) for c in lm.calls] == [["a", "b", "c"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e", "f"]]
    assert "Context:\n[1] Ta: passage a\n[2] Tb: passage b\n[3] Tc: passage c\n[4] Td: passage d\n" in (
        lm.calls[1]["prompt"].text)
    assert [s["retrieved"] for s in answer.steps] == [shown(c) for c in lm.calls]
    # the answer still records what each search returned, duplicates included
    assert [(p["id"], p["retrieval"]) for p in answer.passages] == [
        (i, n) for n, ids in enumerate(OVERLAPPING) for i in ids]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."


def test_fs_rag_accumulate_keeps_the_earliest_max_passages():
    _, lm = run_overlapping({"accumulate": True, "max_passages": 5}, OVERLAPPING)
    assert [shown(c) for c in lm.calls] == [["a", "b", "c"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]]
    # a cap below top_k cuts the first retrieval too, and nothing later gets in
    _, lm = run_overlapping({"accumulate": True, "max_passages": 2}, OVERLAPPING)
    assert [shown(c) for c in lm.calls] == [["a", "b"]] * 3


def test_fs_rag_without_accumulate_replaces_the_passages():
    answer, lm = run_overlapping({}, OVERLAPPING)
    assert [shown(c) for c in lm.calls] == OVERLAPPING
    assert [s["retrieved"] for s in answer.steps] == OVERLAPPING


def test_fs_rag_accumulate_settings():
    path = "methods.ircot"
    assert settings_of(FixedSentenceRetrieval, {}, path) == {
        "top_k": 3, "max_retrievals": None, "keep": "all", "retriever": None, "accumulate": False}
    assert settings_of(FixedSentenceRetrieval, {"accumulate": True}, path)["max_passages"] == 15
    for bad in (0, -1, "15", 2.5, None):
        with pytest.raises(ConfigError, match=r"methods\.ircot\.max_passages: expected an integer >= 1"):
            settings_of(FixedSentenceRetrieval, {"accumulate": True, "max_passages": bad}, path)
    with pytest.raises(ConfigError, match=r"methods\.ircot\.accumulate: expected true or false"):
        settings_of(FixedSentenceRetrieval, {"accumulate": "yes"}, path)
    # a cap without accumulation would do nothing: it is a mistake, named as such
    with pytest.raises(ConfigError, match=r"methods\.ircot\.max_passages: unknown key"):
        settings_of(FixedSentenceRetrieval, {"max_passages": 15}, path)
