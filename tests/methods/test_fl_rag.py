"""fl-rag (EveryStepRetrieval): retrieve before every fixed-length window of tokens, with the previous
window as the query; scripted LM and recording retriever."""

from __future__ import annotations

from adaptive_rag.methods.fl_rag import FixedLengthRetrieval

from conftest import SCRIPTED_QUESTION as Q, cont, run_method


def test_fl_rag_windows_queries_and_fallback_without_doubling_the_phrase():
    w1 = cont([" Inchcombe", " was", " born", " in"])
    w2 = cont([" Paris", ".", " So", " the"])
    w3 = cont([" answer", " is"])
    cut = " Inchcombe was born in Paris. So the answer is"
    script = {(True, ""): w1, (True, " Inchcombe was born in"): w2, (True, " Inchcombe was born in Paris. So the"): w3,
              (False, cut): cont([" Paris", "."], finish="stop")}
    answer, lm, retriever = run_method(FixedLengthRetrieval, {"window": 4}, script, max_new_tokens=10)
    # window 4, then 4, then min(4, 10 - 8) = 2; the output ends on the phrase -> continued as it is
    assert [(c["passages"], c["max_new_tokens"]) for c in lm.calls] == [(True, 4), (True, 4), (True, 2), (False, 5)]
    assert retriever.queries == [(Q, 3), ("Inchcombe was born in", 3), ("Paris. So the", 3)]
    assert lm.calls[3]["prefix"] == cut
    assert answer.output == "Inchcombe was born in Paris. So the answer is Paris."
    # tokens 4 + 4 + 2 + 2; sentences 1 + 2 + 1 + 1
    assert answer.counters() == {"retrievals": 3, "llm_calls": 4, "detections": 0, "generated_tokens": 12,
                                 "sentences": 5}
