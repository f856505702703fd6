"""The dynamic loop (TriggeredRetrieval), driven through FLARE by a scripted LM and a recording
retriever: truncation before the firing sentence, what is kept of a regeneration, the retrieval cap,
the answer fallback, and the counters of every call."""

from __future__ import annotations

import pytest

from adaptive_rag.lm.base import NO_EXTRAS, row_limits
from adaptive_rag.methods.flare import FLARE
from adaptive_rag.prompts.fewshot import STOP_STRINGS

from conftest import ANSWER, BORN, REGEN, RecordingRetriever, ScriptedLM, cont, method_with, run_method

# look-ahead: sentence 2 has " 1722" at p .3 < .8 -> FLARE (paper) fires there, query masks it (< .4)
LOOKAHEAD_1722 = cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He", " died", " in", " 1722", "."],
                      [0.9] * 9 + [0.3, 0.9], finish="stop")


def test_flare_loop_truncates_before_the_firing_sentence_and_keeps_first_regenerated_sentence():
    script = {(False, ""): LOOKAHEAD_1722,
              (True, BORN): REGEN,
              (False, BORN + " He died in 1750."): ANSWER}
    answer, lm, retriever = run_method(FLARE, {}, script)
    # kept " Inchcombe was born in Paris." (6 tokens), regenerated from there with passages, kept
    # " He died in 1750." (5 tokens), then a look-ahead from that prefix says the answer (no fire)
    assert [(c["passages"], c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [
        (False, "", 50), (True, BORN, 44), (False, BORN + " He died in 1750.", 39)]
    assert all(c["stop"] == STOP_STRINGS and c["extras"] == NO_EXTRAS for c in lm.calls)
    assert "Context:\n[1] T1: passage 1.1\n[2] T1: passage 1.2\n[3] T1: passage 1.3\n" in lm.calls[1]["prompt"].text
    assert retriever.queries == [("He died in .", 3)]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    # tokens 11 + 11 + 6; sentences 2 + 2 + 1
    assert answer.counters() == {"retrievals": 1, "llm_calls": 3, "detections": 1, "generated_tokens": 28,
                                 "sentences": 5}
    assert [p["id"] for p in answer.passages] == ["d1.1", "d1.2", "d1.3"]
    assert [s["phase"] for s in answer.steps] == ["look-ahead", "regenerate", "look-ahead"]
    assert answer.steps[0]["kept"] == 30 and answer.steps[0]["sentence"] == 1
    assert answer.steps[0]["detection"]["flagged"] == [3]


def test_flare_loop_keep_all_keeps_the_whole_regeneration():
    script = {(False, ""): LOOKAHEAD_1722, (True, BORN): REGEN}
    answer, lm, retriever = run_method(FLARE, {"keep": "all"}, script)
    # the regeneration says the answer and ends (stop): no third call
    assert [c["prefix"] for c in lm.calls] == ["", BORN]
    assert answer.output == "Inchcombe was born in Paris. He died in 1750. So the answer is Paris."
    assert answer.counters() == {"retrievals": 1, "llm_calls": 2, "detections": 1, "generated_tokens": 22,
                                 "sentences": 4}


@pytest.mark.parametrize("cap, output, queries, calls", [
    # capped after one retrieval: the second look-ahead (Lyon at p .1) is kept without detection
    (1, "Inchcombe was born in Paris. He died in 1750. So the answer is Lyon.", ["He died in ."], 3),
    # uncapped: Lyon fires (detection 2), "So the answer is ." retrieved, the answer regenerated
    (None, "Inchcombe was born in Paris. He died in 1750. So the answer is Paris.",
     ["He died in .", "So the answer is ."], 4),
])
def test_flare_loop_max_retrievals(cap, output, queries, calls):
    lyon = cont([" So", " the", " answer", " is", " Lyon", "."], [0.9, 0.9, 0.9, 0.9, 0.1, 0.9], finish="stop")
    kept = BORN + " He died in 1750."
    script = {(False, ""): LOOKAHEAD_1722, (True, BORN): REGEN, (False, kept): lyon, (True, kept): ANSWER}
    answer, lm, retriever = run_method(FLARE, {"max_retrievals": cap}, script)
    assert answer.output == output
    assert [q for q, _ in retriever.queries] == queries
    assert (answer.retrievals, answer.detections, answer.llm_calls) == (len(queries), len(queries), calls)


def test_flare_loop_no_retrieval_budget_then_fallback():
    fallback_prefix = " Inchcombe was born in Paris. He died in 1722. So the answer is"  # raw: " " after "Answer:"
    script = {(False, ""): LOOKAHEAD_1722, (False, fallback_prefix): cont([" Paris", "."], finish="stop")}
    answer, lm, retriever = run_method(FLARE, {"max_retrievals": 0}, script)
    assert retriever.queries == []
    assert answer.output == "Inchcombe was born in Paris. He died in 1722. So the answer is Paris."
    assert (lm.calls[1]["max_new_tokens"], lm.calls[1]["stop"]) == (5, STOP_STRINGS + ("\n",))
    assert answer.counters() == {"retrievals": 0, "llm_calls": 2, "detections": 0, "generated_tokens": 13,
                                 "sentences": 3}
    assert answer.steps[-1]["phase"] == "fallback"


def test_a_step_is_one_call_with_each_questions_own_token_limit():
    """Questions that kept different lengths go on in one batched call, each with what is left of its
    budget (not one call per distinct limit, which would decode one row at a time)."""
    from adaptive_rag.data.datasets import Example
    from adaptive_rag.methods.fs_rag import FixedSentenceRetrieval

    class PerQuestionLM(ScriptedLM):
        def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
            asked = [(next(q for q in questions if q in p.text), p.prefix, n)
                     for p, n in zip(prompts, row_limits(max_new_tokens, len(prompts)))]
            self.batches.append(asked)
            return [self.script[(q, prefix)] for q, prefix, _ in asked]

    questions = ["Where was Inchcombe born?", "Where did Penhallow die?"]
    lyon = " It is Lyon."
    script = {(questions[0], ""): cont([" Inchcombe", " was", " born", " in", " Paris", ".", " He"]),
              (questions[1], ""): cont([" It", " is", " Lyon", ".", " It"]),
              (questions[0], BORN): ANSWER, (questions[1], lyon): ANSWER}
    lm = PerQuestionLM(script)
    method = method_with(FixedSentenceRetrieval, {}, lm, RecordingRetriever())
    answers = method.answer_batch([Example(f"q{i}", q, ["Paris"], "span") for i, q in enumerate(questions)])
    assert lm.batches == [[(questions[0], "", 50), (questions[1], "", 50)],
                          [(questions[0], BORN, 44), (questions[1], lyon, 46)]]
    assert [a.output for a in answers] == [f"{BORN.strip()} So the answer is Paris.",
                                           "It is Lyon. So the answer is Paris."]
    assert [a.llm_calls for a in answers] == [2, 2]
