"""SeaKR's small rules against the reference code (THU-KEG/SeaKR at d75fe70, `SEAKR/reasoner.py` and
`SEAKR/dataset.py`): its generation budget, its stop strings, how it renders rationales, when a step
states its answer, what an empty re-ranked step does and what counts as a retrieval."""

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.methods.seakr.seakr import SeaKR, code_answer, rendered_step, says_answer
from adaptive_rag.retrieval import Hit

from conftest import SCRIPTED_QUESTION, cont, method_with, settings_of
from test_seakr import CONFIDENT, R1, SCRIPT, SETTINGS, UncertainLM, run


def test_every_call_has_the_reference_budget_of_100_tokens_whatever_the_dataset_says():
    """reasoner.py:72 and :81 (`max_tokens: 100` for the greedy and the sampled call alike), and
    main_simpleqa.py:30/:40: SeaKR's budget is its own, not the dataset's 64 on 2Wiki/NQ."""
    [_], lm, _ = run(SCRIPT)  # the run's context says 50 tokens
    assert lm.calls and {c["max_new_tokens"] for c in lm.calls} == {100}
    assert set(lm.sample_budgets) == {100}
    [_], lm, _ = run(SCRIPT, {"max_new_tokens": 64})
    assert {c["max_new_tokens"] for c in lm.calls} == {64} and set(lm.sample_budgets) == {64}
    [_], lm, _ = run(SCRIPT, {"max_new_tokens": None})  # null: the dataset's budget
    assert {c["max_new_tokens"] for c in lm.calls} == {50} and set(lm.sample_budgets) == {50}


def test_every_call_stops_where_a_new_context_block_starts():
    """reasoner.py:349: the stops are "\\n\\n", "\\nQuestion:" and "\\nContext" (plus ". " and "\\n")."""
    [_], lm, _ = run(SCRIPT)
    assert lm.calls and all("\nContext" in c["stop"] and "\n\n" in c["stop"] for c in lm.calls)


def test_a_rationale_is_shown_without_its_inner_periods():
    """dataset.py:20: each rationale enters the prompt as `c.replace('.', '')` plus one final period,
    so "St. Andrews" cannot read as a sentence end in the next step's prompt; reasoner.py:389 reads
    the answer from the step as generated."""
    assert rendered_step(" Inchcombe studied at St. Andrews.") == " Inchcombe studied at St Andrews."
    assert rendered_step(" It cost 3.5 pounds") == " It cost 35 pounds."
    assert rendered_step(" Was it?") == " Was it?" and rendered_step(" .") == "" and rendered_step("") == ""
    step = cont([" Inchcombe", " studied", " at", " St.", " Andrews"], finish="stop")
    answer = cont([" So", " the", " answer", " is", " Lyon"], finish="stop")
    for setting, shown in (("drop", " Inchcombe studied at St Andrews."), ("keep", " Inchcombe studied at St. Andrews.")):
        script = {((), ""): (step, CONFIDENT), ((), shown): (answer, CONFIDENT)}
        [result], lm, _ = run(script, {"final": "rationale", "rationale_periods": setting})
        assert [c["prompt"].prefix for c in lm.calls] == ["", shown]
        # the output is the rationales as generated: a period in an answer ("3.5 million") is kept
        assert result.output == " Inchcombe studied at St. Andrews. So the answer is Lyon."


def test_a_step_that_says_x_is_the_answer_ends_the_loop_before_its_uncertainty_is_tested():
    """reasoner.py:340 (`[.?!]\\s*([^?!]*?)\\s+is the answer\\b`) and :401 (sentences with "is the answer"
    are answer sentences): "Lyon is the answer." ends the loop like "So the answer is Lyon." does."""
    assert says_answer("So the answer is Lyon.") and says_answer("Lyon is the answer.")
    assert says_answer("He was born there. Lyon is the answer.")
    assert not says_answer("The answer lies in Lyon.") and not says_answer("Nobody knows the answer.")
    # the reference's regexes as they are (`reference: seakr-code`): an answer before a comma or period,
    # or a sentence end before "X is the answer"
    assert code_answer("So the answer is Lyon, France.") == "lyon" and code_answer("So the answer is.") == ""
    assert code_answer("He was born there. Lyon is the answer.") == "lyon"
    assert code_answer("Lyon is the answer.") is None
    assert not says_answer("So the answer is.", code=True) and not says_answer("Lyon is the answer.", code=True)
    assert says_answer("He was born there. Lyon is the answer.", code=True)

    said = cont([" Lyon", " is", " the", " answer"], finish="stop")
    script = {((), ""): (cont([" Inchcombe", " was", " a", " painter"], finish="stop"), CONFIDENT),
              ((), R1): (said, -4.0),  # uncertain (> delta -6), but an answer sentence comes first
              ((), R1 + " Lyon is the answer. So the answer is"): (cont([" Lyon", "."]), CONFIDENT)}
    [answer], lm, retriever = run(script, {"final": "rationale"})
    assert retriever.queries == [] and answer.retrievals == 0 and answer.detections == 1
    assert answer.output == "Inchcombe was a painter. Lyon is the answer. So the answer is Lyon."


def test_an_empty_reranked_step_joins_the_rationales_and_the_loop_goes_on():
    """reasoner.py:276 and :449: the best candidate's step is appended whatever its text, and solve()
    goes on to the next step; only an answer, `max_steps`, `max_docs` or no new passage end it."""
    empty = cont([], finish="stop")
    so = cont([" So", " the", " answer", " is", " Lyon"], finish="stop")
    script = {**{k: SCRIPT[k] for k in (((), ""), ((), R1))},
              (("passage 1.1",), R1): (empty, -5.0),  # every candidate's step is empty: the lowest U wins
              (("passage 1.2",), R1): (empty, -4.0),
              (("passage 1.3",), R1): (empty, -4.5),
              (("passage 1.1", "passage 2.1"), R1): (so, -6.5),
              (("passage 1.1", "passage 2.2"), R1): (so, -5.5),
              (("passage 1.1", "passage 2.3"), R1): (so, -5.0),
              (("passage 1.1", "passage 2.1"), ""): (cont([" So", " the", " answer", " is", " Lyon", "."]), -6.0)}
    [answer], _, retriever = run(script, {"final": "knowledge"})
    # the empty step (the prompt of passage 1.1 again) retrieves with the POS-filtered question
    assert retriever.queries == [("born", 3), ("Inchcombe born", 3)] and answer.retrievals == 2
    reranks = [s for s in answer.steps if s["phase"] == "rerank"]
    assert [r["chosen"] for r in reranks] == ["d1.1", "d2.1"] and reranks[0]["text"] == ""
    assert answer.output == " So the answer is Lyon."


class SameHits:
    """Every search returns passage 1.1 (id d1.1), so a second search finds nothing new."""

    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append((query, k))
        return [Hit("d1.1", "T1", "passage 1.1", 1.0)]

    def identity(self):
        return {"retriever": "same"}


def test_a_search_that_finds_nothing_new_ends_the_question_and_is_not_a_retrieval():
    """reasoner.py:260 (`rag()` returns None when every hit is already read) and :469 ("Retrieval
    Times" is len(doc_id_list), the passages taken): Rc counts searches that gave a passage."""
    rome = R1 + " He was born in Rome."
    script = {**{k: SCRIPT[k] for k in (((), ""), ((), R1))},
              (("passage 1.1",), R1): (cont([" He", " was", " born", " in", " Rome"], finish="stop"), -4.37),
              (("passage 1.1",), rome): (cont([" He", " painted", " Lyon"], [0.95, 0.95, 0.5], finish="stop"), -4.0),
              (("passage 1.1",), ""): (cont([" So", " the", " answer", " is", " Rome", "."]), -6.0)}
    lm, retriever = UncertainLM(script), SameHits()
    method = method_with(SeaKR, {**SETTINGS, "final": "knowledge"}, lm, retriever)
    [answer] = method.answer_batch([Example("q1", SCRIPTED_QUESTION, ["Lyon"], "span")])
    assert [q for q, _ in retriever.queries] == ["born", "painted"]
    assert answer.retrievals == 1 and [p["id"] for p in answer.passages] == ["d1.1"]
    assert any(s.get("stopped") == "no new passage" for s in answer.steps)
    assert answer.detections == 2


def test_budget_and_reference_rules_are_settings():
    settings = settings_of(SeaKR, {}, "methods.seakr")
    assert settings["max_new_tokens"] == 100 and settings["rationale_periods"] == "drop"
    with pytest.raises(ConfigError, match="methods.seakr.rationale_periods"):
        settings_of(SeaKR, {"rationale_periods": "some"}, "methods.seakr")
    with pytest.raises(ConfigError, match="methods.seakr.max_new_tokens"):
        settings_of(SeaKR, {"max_new_tokens": 0}, "methods.seakr")
