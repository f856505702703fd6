"""SeaKR with a scripted model whose samples carry Gram matrices of chosen EigenScores: the loop
(retrieve when U > delta, re-rank by lowest U, stop rules), self-aware reasoning, the query, the simple-QA
variant and the settings (Yao et al. 2024; values of the paper's Tables 5 and 9)."""

import math
import re

import numpy as np
import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.lm.base import NO_EXTRAS, WHITE_BOX, SampleSet
from adaptive_rag.methods.seakr.seakr import SeaKR, choose, pos_filter, sure_words, threshold_for_rate

from conftest import REPO, SCRIPTED_QUESTION, RecordingRetriever, cont, method_with, settings_of

ALPHA = 1e-3
CONFIDENT = math.log(ALPHA)  # -6.9078: every sample's final state the same (the EigenScore floor)


def gram_for(u: float, k: int) -> np.ndarray:
    """A k x k Gram whose EigenScore is u: c * I has U = ln(c + alpha); all-zero is the floor ln(alpha)."""
    if u <= CONFIDENT + 1e-12:
        return np.zeros((k, k))
    return (math.exp(u) - ALPHA) * np.eye(k)


class UncertainLM:
    """Greedy continuations and EigenScores scripted by (the passages a prompt shows, its answer prefix)."""

    capabilities = WHITE_BOX
    num_layers = 4

    def __init__(self, script: dict):
        self.script, self.calls, self.sampled, self.sample_budgets = script, [], [], []

    def identity(self):
        return {"backend": "scripted"}

    def _entry(self, prompt):
        key = (tuple(re.findall(r"passage \d+\.\d+", prompt.text)), prompt.prefix)
        if key not in self.script:
            raise AssertionError(f"unscripted call {key!r}")
        return self.script[key]

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        self.calls.extend({"prompt": p, "stop": tuple(stop), "max_new_tokens": max_new_tokens} for p in prompts)
        return [self._entry(p)[0] for p in prompts]

    def sample_batch(self, prompts, params, max_new_tokens, stop=(), extras=NO_EXTRAS):
        assert extras.final_layers == (2,) and extras.final_source == "mlp"  # L/2 of 4 layers
        self.sampled.extend(prompts)
        self.sample_budgets.append(max_new_tokens)
        return [SampleSet([cont([" a", " sample"])] * params.n, {"2": gram_for(self._entry(p)[1], params.n)})
                for p in prompts]


R1 = " Inchcombe was a painter."
PROBABLE = cont([" He", " was", " born", " in", " Lyon"], [0.95, 0.95, 0.5, 0.95, 0.5], finish="stop")
R2 = R1 + " He was born in Lyon."
SCRIPT = {
    ((), ""): (cont([" Inchcombe", " was", " a", " painter"], finish="stop"), CONFIDENT),
    ((), R1): (PROBABLE, -4.4),  # Table 5: U = -4.4 > delta, retrieve
    (("passage 1.1",), R1): (cont([" He", " was", " born", " in", " Rome"], finish="stop"), -4.37),
    (("passage 1.2",), R1): (cont([" He", " was", " born", " in", " Lyon"], finish="stop"), -4.91),
    (("passage 1.3",), R1): (cont([" He", " was", " born", " in", " Nice"], finish="stop"), -4.88),
    (("passage 1.2",), R2): (cont([" So", " the", " answer", " is", " Lyon"], finish="stop"), -6.5),
    (("passage 1.2",), ""): (cont([" Lyon", " it", " is.", " So", " the", " answer", " is", " Lyon", "."]), -5.0),
}
SETTINGS = {"k": 3, "delta": -6.0}


def run(script, settings=None, questions=(SCRIPTED_QUESTION,)):
    lm, retriever = UncertainLM(script), RecordingRetriever()
    method = method_with(SeaKR, {**SETTINGS, **(settings or {})}, lm, retriever)
    answers = method.answer_batch([Example(f"q{i}", q, ["Lyon"], "span") for i, q in enumerate(questions, 1)])
    return answers, lm, retriever


def test_loop_retrieves_when_uncertain_and_keeps_the_least_uncertain_passage():
    """§3.1: retrieve when U(c_r) > delta; §3.2: "the knowledge piece with the least uncertainty ... is
    selected"; §3.3: stop on the answer phrase."""
    [answer], lm, retriever = run(SCRIPT)
    assert retriever.queries == [("born", 3)]  # "born" is in the question; "Lyon" (p 0.5) is not sure
    direct, rerank = [s for s in answer.steps if s["phase"] in ("direct", "rerank")][1:3]
    assert direct["u"] == pytest.approx(-4.4) and not direct["kept"]
    assert [c["u"] for c in rerank["candidates"]] == pytest.approx([-4.37, -4.91, -4.88])
    assert rerank["chosen"] == "d1.2"  # Table 5: the search engine's second passage wins
    assert answer.retrievals == 1 and answer.detections == 1
    # 3 direct steps + 3 candidates + the knowledge chain (the rationale already says its answer)
    assert answer.llm_calls == 7 and answer.sampled_sequences == 7 * 3
    select = answer.steps[-1]
    assert select["chosen"] == "rationale" and select["rationale"]["u"] == pytest.approx(-6.5)
    assert answer.output == R2 + " So the answer is Lyon."
    # the knowledge strategy sees every chosen passage and nothing of R
    knowledge_prompt = [c for c in lm.calls if c["prompt"].prefix == "" and "passage 1.2" in c["prompt"].text]
    assert knowledge_prompt and "\n" in knowledge_prompt[0]["stop"]


def test_final_selection_lower_u_wins_and_unknown_loses():
    """§3.3: "the strategy that promotes the lowest level of uncertainty"; Table 9's U values."""
    a = {"answer": "Lyon", "u": -4.73}
    b = {"answer": "Paris", "u": -6.20}
    assert choose(a, b) == "knowledge"  # Table 9
    assert choose({**a, "u": -6.2}, b) == "knowledge"  # a tie goes to the knowledge strategy
    assert choose({**a, "u": -7.0}, b) == "rationale"
    assert choose({**a, "answer": "unknown"}, {**b, "u": 0.0}) == "knowledge"
    assert choose({**a, "u": 0.0}, {**b, "answer": None}) == "rationale"
    assert choose(None, b) == "knowledge" and choose(a, None) == "rationale"


def test_answer_check_after_retrieves_even_on_an_answer_sentence():
    script = dict(SCRIPT)
    script[(("passage 1.2",), R2)] = (cont([" So", " the", " answer", " is", " Lyon"], finish="stop"), -5.5)
    [before], _, retriever = run(script)
    assert len(retriever.queries) == 1
    script[(("passage 1.2", "passage 2.1"), R2)] = (cont([" So", " the", " answer", " is", " Lyon"]), -5.9)
    script[(("passage 1.2", "passage 2.2"), R2)] = (cont([" So", " the", " answer", " is", " Nice"]), -5.0)
    script[(("passage 1.2", "passage 2.3"), R2)] = (cont([" So", " the", " answer", " is", " Rome"]), -5.0)
    script[(("passage 1.2", "passage 2.1"), "")] = script[(("passage 1.2",), "")]
    [after], _, retriever = run(script, {"answer_check": "after"})
    assert len(retriever.queries) == 2 and after.retrievals == 2 and after.detections == 2


def test_an_empty_step_retrieves_and_a_repeated_query_ends_the_question():
    empty = cont([], finish="stop")
    script = {((), ""): (empty, CONFIDENT),
              (("passage 1.1",), ""): (cont([" Nothing", " here"], finish="stop"), -5.0),
              (("passage 1.2",), ""): (empty, -9.0),  # empty steps rank last whatever their U
              (("passage 1.3",), ""): (cont([" Still", " nothing"], finish="stop"), -4.0),
              (("passage 1.1",), " Nothing here."): (empty, CONFIDENT),
              (("passage 1.1",), " Nothing here So the answer is"): (cont([" Lyon", "."]), -5.0)}
    [answer], _, retriever = run(script, {"final": "knowledge"})
    # the empty first step retrieves with the POS-filtered question; the second empty step's query is the
    # same question, so the loop ends there ("Retrieval Duplicated")
    assert [q for q, _ in retriever.queries] == ["Inchcombe born"]
    assert any(s.get("stopped") == "repeated query" for s in answer.steps)
    rerank = next(s for s in answer.steps if s["phase"] == "rerank")
    assert rerank["chosen"] == "d1.1"


def test_max_docs_stops_the_loop():
    script = dict(SCRIPT)
    script[(("passage 1.2",), R2)] = (cont([" He", " painted"], finish="stop"), -4.0)  # uncertain again
    [answer], _, retriever = run(script, {"max_docs": 1, "final": "knowledge"})
    assert len(retriever.queries) == 1 and answer.retrievals == 1
    assert sum(1 for s in answer.steps if s["phase"] == "rerank") == 1


def test_retrieval_always_and_rerank_search_are_the_table_3_ablations():
    script = dict(SCRIPT)
    script[(("passage 1.1",), "")] = (cont([" So", " the", " answer", " is", " Rome"], finish="stop"), -5.0)
    [answer], lm, retriever = run(script, {"retrieval": "always", "rerank": "search", "max_docs": 1,
                                           "final": "knowledge"})
    # always: the confident first step retrieves too; search: the first passage, judged alone
    assert retriever.queries[0][0] == pos_filter(" ".join(["Inchcombe", "was", "a", "painter"]))
    rerank = next(s for s in answer.steps if s["phase"] == "rerank")
    assert [c["id"] for c in rerank["candidates"]] == ["d1.1"] and rerank["chosen"] == "d1.1"


def test_query_keeps_sure_words_then_content_words():
    c = cont([" Paris", " founded", " 1820"], [0.95, 0.5, 0.99])
    assert sure_words(c, "Where is it?", "", 0.1) == ["Paris", "1820"]
    assert sure_words(c, "Who founded it?", "", 0.1) == ["Paris", "founded", "1820"]
    assert pos_filter("Paris 1820") == "Paris 1820"
    assert pos_filter("thus the answer is quickly Paris so") == "quickly Paris"  # ADV kept; thus/answer/is/so not
    assert pos_filter("") == ""


def test_simple_variant_answers_directly_when_certain_else_best_single_passage():
    script = {((), ""): (cont([" So", " the", " answer", " is", " Paris", "."]), CONFIDENT)}
    [answer], _, retriever = run(script, {"variant": "simple"})
    assert answer.output == "So the answer is Paris." and retriever.queries == [] and answer.retrievals == 0
    script = {((), ""): (cont([" Rome", "."]), -4.0),
              (("passage 1.1",), ""): (cont([" So", " the", " answer", " is", " Nice", "."]), -5.0),
              (("passage 1.2",), ""): (cont([" So", " the", " answer", " is", " Lyon", "."]), -5.5),
              (("passage 1.3",), ""): (cont([" So", " the", " answer", " is", " Nice", "."]), -4.5)}
    [answer], _, retriever = run(script, {"variant": "simple"})
    assert retriever.queries == [(SCRIPTED_QUESTION, 3)] and answer.output == "So the answer is Lyon."


def test_threshold_for_a_target_retrieval_rate():
    values = [-6.5, -6.0, -5.5, -5.0]
    for rate, retrieving in ((0.5, 2), (0.25, 1), (0.0, 0), (1.0, 4)):
        delta = threshold_for_rate(values, rate)
        assert sum(v > delta for v in values) == retrieving


def test_settings_name_bad_keys_and_needs_follow_the_estimator():
    with pytest.raises(ConfigError, match="methods.seakr.estimator"):
        settings_of(SeaKR, {"estimator": "entropy"}, "methods.seakr")
    with pytest.raises(ConfigError, match="methods.seakr.delta"):
        settings_of(SeaKR, {"delta": "high"}, "methods.seakr")
    with pytest.raises(ConfigError, match="methods.seakr.calibration_dataset"):
        settings_of(SeaKR, {"delta": "calibrated"}, "methods.seakr")
    needs = {e: SeaKR.needs_for(settings_of(SeaKR, {"estimator": e}, "m"))
             for e in ("eigenscore", "perplexity", "energy", "prompting", "ln-entropy")}
    assert needs == {"eigenscore": {"sampling", "hidden_states"}, "perplexity": set(), "energy": {"logits"},
                     "prompting": {"scoring"}, "ln-entropy": {"sampling"}}


def test_black_box_backends_are_refused_only_for_white_box_estimators():
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(backend="api", api={"base_url": "http://127.0.0.1:9/v1", "model": "x"})
    data["methods"] = {"wo-rag": {}, "seakr": {"type": "seakr"}}
    data.pop("ablations")
    data.pop("complexity_classifier")  # its strategies are methods this test removed
    data["experiment"]["methods"] = ["wo-rag"]
    with pytest.raises(ConfigError, match="methods.seakr: method type 'seakr' needs hidden_states"):
        parse_params(data)
    data["methods"]["seakr"]["estimator"] = "perplexity"
    parse_params(data)
    data["methods"]["seakr"]["estimator"] = "energy"
    with pytest.raises(ConfigError, match="needs logits"):
        parse_params(data)


def test_calibrated_delta_is_read_and_its_questions_are_refused(tmp_path):
    import json

    from adaptive_rag.methods.base import Context

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"estimator": "eigenscore", "ids": ["q9"], "u": [-6.5, -6.0, -5.5, -5.0],
                                "thresholds": {"best-f1": -5.7}}))
    settings = settings_of(SeaKR, {**SETTINGS, "delta": "calibrated", "calibration_dataset": "calib"}, "m")
    assert SeaKR.inputs(settings, "demo", "seakr") == {"calibration": "data/calibration/calib/seakr.json"}

    def method(extra=None):
        ctx = Context(lm=UncertainLM(SCRIPT), exemplars=[], prompt_format="raw", max_new_tokens=50,
                      retriever=RecordingRetriever(), inputs={"calibration": path})
        return SeaKR({**settings, **(extra or {})}, ctx)

    assert method().delta == -6.0  # rule rate (the default), rate 0.5: -5.5 and -5.0 retrieve
    assert method({"calibration_rule": "best-f1"}).delta == -5.7
    with pytest.raises(InputError, match="q9 are in the calibration split"):
        method().answer_batch([Example("q9", SCRIPTED_QUESTION, ["Lyon"], "span")])
    path.write_text("{}")
    with pytest.raises(InputError, match="not a readable SeaKR calibration"):
        method()


def test_u_bins_put_every_question_in_exactly_one_bin():
    """Figure 3(d): quantile edges are data values, so closed bins on both sides would count the
    questions on an edge twice (16 questions read as 20)."""
    from adaptive_rag.calibration import u_bins

    u = [0.89, 1.11, 1.36, 2.32, 2.48, 2.60, 2.77, 3.04, 3.36, 3.38, 3.47, 3.60, 3.61, 3.64, 3.65, 4.03]
    right = [False, True, False, True] + [False] * 12
    centres, shares, counts, width = u_bins(u, right)
    assert sum(counts) == 16 and counts == [3, 3, 3, 3, 4]
    assert shares == [1 / 3, 1 / 3, 0.0, 0.0, 0.0]
    assert centres == sorted(centres) and width > 0
    assert u_bins([2.0], [True])[:3] == ([2.0], [1.0], [1])
