"""Self-RAG short-form inference against hand-computed cases. The spec is AkariAsai/self-rag,
`retrieval_lm/run_short_form.py`, `call_model_rerank_w_scores_batch` (cited by line of its public code:
the retrieval decision lines 73-81, the per-passage prompt line 86, ISREL lines 107-109 and 134-135, ISSUP
lines 111-121 and 137-142, ISUSE lines 123-132 and 144-150, the final score lines 152-157, the best path
lines 195-199, the answer post-processing lines 36-48 and 331-332)."""

import math

import pytest

from conftest import (REPO, RecordingRetriever, copy_workflow, cont, edit_params, method_with, read_jsonl, settings_of,
                      snakemake)

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.lm.base import BLACK_BOX, NO_EXTRAS, require
from adaptive_rag.lm.capabilities import WHITE_BOX
from adaptive_rag.methods.self_rag import (CRITIQUE, NO_RETRIEVE, REFLECTION_TOKENS, RETRIEVE, SelfRAG,
                                           postprocess, retrieve_score, score_segment)

IDS = {name: 100 + i for i, name in enumerate(REFLECTION_TOKENS)}
FLOOR = math.log(0.01)  # a critique token's probability where a test does not read it


class FakeTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    def get_vocab(self):
        return dict(self.vocab)


class ReflectionLM:
    """Answers each prompt text from `script` (text -> Continuation); records every call."""

    capabilities = WHITE_BOX

    def __init__(self, script, vocab=IDS):
        self.script, self.calls, self.tokenizer = script, [], FakeTokenizer(vocab)

    def identity(self):
        return {"backend": "scripted", "model": "fake-self-rag"}

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        self.calls.append({"prompts": [p.text for p in prompts], "max_new_tokens": max_new_tokens,
                           "stop": tuple(stop), "watch": extras.watch_ids})
        return [self.script[p.text] for p in prompts]


def critique_row(**probs) -> list[float]:
    """One watched position over CRITIQUE: the given tokens' probabilities, 0.01 for the others."""
    named = {"[Relevant]": "rel", "[Irrelevant]": "irr", "[Fully supported]": "full",
             "[Partially supported]": "partial", "[No support / Contradictory]": "none",
             **{f"[Utility:{i}]": f"u{i}" for i in range(1, 6)}}
    return [math.log(probs[named[name]]) if named[name] in probs else FLOOR for name in CRITIQUE]


def segment(tokens, ids, probs, rows, finish="eos"):
    return cont(tokens, probs, finish=finish, token_ids=ids, watched=rows, prompt_tokens=20)


# Passage 1: "[Relevant]Paris[Partially supported][Utility:4]" (the special tokens write no text).
# ISREL = .3 / (.3 + .1) = .75; ISSUP over (.1, .25, .15) = (.1 + .5 * .25) / .5 = .45;
# ISUSE over (.05, .05, .1, .2, .1) = (-1 * .05 - .5 * .05 + 0 + .5 * .2 + 1 * .1) / .5 = .25;
# sequence = exp(mean log(.6, .8, .5, .4)) = .096 ** .25 = .556625.
PARIS = segment(["", "Paris", "", ""], [IDS["[Relevant]"], 7, IDS["[Partially supported]"], IDS["[Utility:4]"]],
                [0.6, 0.8, 0.5, 0.4],
                [critique_row(rel=0.3, irr=0.1), critique_row(), critique_row(full=0.1, partial=0.25, none=0.15),
                 critique_row(u1=0.05, u2=0.05, u3=0.1, u4=0.2, u5=0.1)])
# Passage 2: "[Irrelevant]Lyon", no support or utility token: ISREL = .1 / .4 = .25, ISSUP = ISUSE = 0,
# sequence = .9.
LYON = segment(["", "Lyon"], [IDS["[Irrelevant]"], 8], [0.9, 0.9], [critique_row(rel=0.1, irr=0.3), critique_row()])
PARIS_SEQUENCE = 0.096 ** 0.25


def test_segment_scores_follow_the_reference_formulas():
    score = score_segment(PARIS, IDS, (1.0, 1.0, 0.5), use_seqscore=True)
    assert (score.relevance, score.support, score.utility) == pytest.approx((0.75, 0.45, 0.25))
    assert score.sequence == pytest.approx(PARIS_SEQUENCE)
    assert score.final == pytest.approx(PARIS_SEQUENCE + 0.75 + 0.45 + 0.5 * 0.25)
    plain = score_segment(PARIS, IDS, (1.0, 1.0, 0.5), use_seqscore=False)
    assert plain.final == pytest.approx(0.75 + 0.45 + 0.125)
    weighted = score_segment(PARIS, IDS, (2.0, 0.0, 1.0), use_seqscore=False)
    assert weighted.final == pytest.approx(2 * 0.75 + 0.25)


def test_segment_without_support_or_utility_tokens_scores_zero_for_them():
    score = score_segment(LYON, IDS, (1.0, 1.0, 0.5), use_seqscore=True)
    assert (score.relevance, score.support, score.utility, score.sequence) == pytest.approx((0.25, 0.0, 0.0, 0.9))
    assert score.final == pytest.approx(1.15)


def test_support_and_utility_are_read_where_their_token_first_appears():
    """Lines 113-116 and 126-129: the first position holding one of the group's tokens."""
    twice = segment(["", "", "x", ""], [IDS["[No support / Contradictory]"], IDS["[Utility:1]"], 9,
                                        IDS["[Fully supported]"]], [0.5] * 4,
                    [critique_row(rel=0.5, irr=0.5, full=0.2, partial=0.2, none=0.6),
                     critique_row(u1=0.2, u5=0.6, u2=0.0001, u3=0.0001, u4=0.0001),
                     critique_row(), critique_row(full=0.9, partial=0.05, none=0.05)])
    score = score_segment(twice, IDS, (1.0, 1.0, 0.5), use_seqscore=False)
    assert score.support == pytest.approx(0.2 + 0.5 * 0.2)  # position 0, not the later [Fully supported]
    assert score.utility == pytest.approx((-0.2 - 0.5 * 0.0001 + 0.5 * 0.0001 + 0.6) / 0.8003)


@pytest.mark.parametrize("p_retrieve, p_no, rule, score", [
    (0.3, 0.1, "probability", 0.75),
    (0.05, 0.9, "probability", 0.05 / 0.95),
    # the reference's arithmetic on log-probabilities: log .3 / (log .3 + log .1) = 1.20397 / 3.50656
    (0.3, 0.1, "reference-logprobs", math.log(0.3) / (math.log(0.3) + math.log(0.1))),
    # ... which retrieves when [Retrieval] is the unlikely one: 2.99573 / 3.10109 = .96602
    (0.05, 0.9, "reference-logprobs", 0.966024),
])
def test_retrieve_score(p_retrieve, p_no, rule, score):
    assert retrieve_score(math.log(p_retrieve), math.log(p_no), rule) == pytest.approx(score, abs=1e-6)


@pytest.mark.parametrize("text, answer", [
    ("[Relevant]Paris[Fully supported][Utility:5]</s>", "Paris"),
    (":Lyon\n", "Lyon"),
    ("#1 Rue<|endoftext|>", "1 Rue"),
    (" Marseille is\nin France.", "Marseille isin France."),  # newlines removed, not replaced (line 42-43)
])
def test_postprocess_strips_reflection_tokens_and_markers(text, answer):
    assert postprocess(text) == answer


PROMPT_1 = "### Instruction:\nWhere was Inchcombe born?\n\n### Response:\n"
PROMPT_2 = "### Instruction:\nWhere did Inchcombe die?\n\n### Response:\n"
DECIDE_RETRIEVE = cont([""], [0.3], token_ids=[IDS[RETRIEVE]],
                       watched=[[math.log(0.3), math.log(0.1)]], prompt_tokens=12)
DECIDE_NO = cont(["Lyon"], [0.9], token_ids=[8], watched=[[math.log(0.05), math.log(0.9)]], prompt_tokens=11)


def passage(search, rank):
    """What follows the prompt for RecordingRetriever's hit `rank` of search number `search` (line 86)."""
    return f"[Retrieval]<paragraph>T{search}\npassage {search}.{rank}</paragraph>"


SCRIPT = {PROMPT_1: DECIDE_RETRIEVE, PROMPT_2: DECIDE_NO,
          PROMPT_2 + NO_RETRIEVE: cont([":", "Lyon", "\n"], [0.9, 0.8, 0.7], finish="eos", prompt_tokens=12),
          PROMPT_1 + passage(1, 1): LYON, PROMPT_1 + passage(1, 2): PARIS}
QUESTIONS = [Example("q1", "Where was Inchcombe born?", ["Paris"], "span"),
             Example("q2", "Where did Inchcombe die?", ["Lyon"], "span")]


def run_self_rag(params, script=SCRIPT):
    lm, retriever = ReflectionLM(script), RecordingRetriever()
    method = method_with(SelfRAG, params, lm, retriever)
    return method.answer_batch(QUESTIONS), lm, retriever


def test_adaptive_retrieval_keeps_the_best_passage_and_answers_without_passages_below_the_threshold():
    (retrieved, plain), lm, retriever = run_self_rag({"top_k": 2, "retrieve_rule": "probability"})
    assert [c["max_new_tokens"] for c in lm.calls] == [1, 100, 100]
    assert lm.calls[0] == {"prompts": [PROMPT_1, PROMPT_2], "max_new_tokens": 1, "stop": (),
                           "watch": (IDS[RETRIEVE], IDS[NO_RETRIEVE])}
    assert lm.calls[1]["prompts"] == [PROMPT_2 + "[No Retrieval]"] and lm.calls[1]["watch"] == ()
    assert lm.calls[2]["prompts"] == [PROMPT_1 + passage(1, 1), PROMPT_1 + passage(1, 2)]
    assert lm.calls[2]["watch"] == tuple(IDS[name] for name in CRITIQUE) and lm.calls[2]["stop"] == ()
    assert retriever.queries == [("Where was Inchcombe born?", 2)]  # only the question above the threshold
    # passage 2 (Paris, 1.8816) beats passage 1 (Lyon, 1.15)
    assert (retrieved.output, retrieved.direct, plain.output, plain.direct) == ("Paris", True, "Lyon", True)
    assert retrieved.counters() == {"retrievals": 1, "llm_calls": 3, "detections": 0, "generated_tokens": 1 + 2 + 4,
                                    "sentences": 2}
    assert plain.counters() == {"retrievals": 0, "llm_calls": 2, "detections": 0, "generated_tokens": 4,
                                "sentences": 2}
    assert [p["id"] for p in retrieved.passages] == ["d1.1", "d1.2"] and plain.passages == []
    assert (retrieved.prompt_tokens, plain.prompt_tokens) == (20, 12)
    decide, first, second = retrieved.steps
    assert (decide["phase"], decide["retrieve"], decide["retrieve_score"]) == ("decide", True, pytest.approx(0.75))
    assert (first["passage"], first["score"]) == ("d1.1", pytest.approx(1.15))
    assert (second["passage"], second["score"]) == ("d1.2", pytest.approx(PARIS_SEQUENCE + 1.325))
    assert plain.steps[0]["retrieve"] is False and plain.steps[1]["phase"] == "generate"


def test_without_the_sequence_score_and_with_the_reference_rule():
    """`reference-logprobs` retrieves for both questions (.343 and .966 > .2); the final score has no
    exp(mean log p) term."""
    script = {**SCRIPT, PROMPT_2 + passage(2, 1): PARIS, PROMPT_2 + passage(2, 2): LYON}
    answers, lm, retriever = run_self_rag({"top_k": 2, "retrieve_rule": "reference-logprobs",
                                           "use_seqscore": False}, script)
    assert [a.retrievals for a in answers] == [1, 1] and len(retriever.queries) == 2
    assert [a.output for a in answers] == ["Paris", "Paris"]
    assert answers[1].steps[0]["retrieve_score"] == pytest.approx(0.966024, abs=1e-6)
    assert answers[0].steps[2]["score"] == pytest.approx(1.325)


def test_a_tie_keeps_the_first_passage():
    """Line 197: a stable sort, so of two equal scores the first passage's generation is kept."""
    same = segment(["", "Pari", "", ""], PARIS.token_ids, [0.6, 0.8, 0.5, 0.4], PARIS.watched)
    script = {**SCRIPT, PROMPT_1 + passage(1, 1): PARIS, PROMPT_1 + passage(1, 2): same}
    (retrieved, _), _, _ = run_self_rag({"top_k": 2, "retrieve_rule": "probability"}, script)
    assert retrieved.output == "Paris"


@pytest.mark.parametrize("mode, retrievals, calls", [("always", [1, 1], [100]), ("never", [0, 0], [100])])
def test_modes_skip_the_decision(mode, retrievals, calls):
    script = {PROMPT_1 + NO_RETRIEVE: PARIS, PROMPT_2 + NO_RETRIEVE: LYON,
              PROMPT_1 + passage(1, 1): PARIS, PROMPT_2 + passage(2, 1): LYON}
    answers, lm, _ = run_self_rag({"top_k": 1, "mode": mode, "retrieve_rule": "probability"}, script)
    assert [a.retrievals for a in answers] == retrievals and [a.output for a in answers] == ["Paris", "Lyon"]
    assert [c["max_new_tokens"] for c in lm.calls] == calls
    assert all(a.steps[0]["phase"] != "decide" for a in answers)


def test_defaults_are_the_references():
    """README's QA command (threshold 0.2, seqscore, 100 tokens); the paper's weights 1, 1, 0.5."""
    assert settings_of(SelfRAG, {}, "methods.self-rag") == {
        "mode": "adaptive", "threshold": 0.2, "retrieve_rule": "reference-logprobs", "top_k": 3, "w_rel": 1.0,
        "w_sup": 1.0, "w_use": 0.5, "use_seqscore": True, "max_new_tokens": 100, "retriever": None}


def test_a_model_without_reflection_tokens_is_refused_before_any_call():
    lm = ReflectionLM({}, vocab={k: v for k, v in IDS.items() if not k.startswith("[Utility")})
    with pytest.raises(ConfigError) as refused:
        method_with(SelfRAG, {}, lm, RecordingRetriever())
    assert str(refused.value) == (
        "method self-rag: model 'fake-self-rag' has no Self-RAG reflection tokens ([Utility:1], [Utility:2], "
        "[Utility:3], [Utility:4], [Utility:5]); set model.source: selfrag/selfrag_llama2_7b (params/self-rag.yaml)")
    assert lm.calls == []


def test_an_api_model_is_refused():
    with pytest.raises(ConfigError, match="needs logits, which the api backend cannot provide"):
        require(BLACK_BOX, SelfRAG.needs_for(settings_of(SelfRAG, {}, "m")), "method 'self-rag'", "api")


def test_the_refusal_names_every_missing_token_of_a_real_model(tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    with pytest.raises(ConfigError) as refused:
        method_with(SelfRAG, {}, HFModel(tiny_model_dir, batch_size=1), RecordingRetriever())
    assert str(refused.value) == (
        "method self-rag: model 'tiny' has no Self-RAG reflection tokens ([Retrieval], [No Retrieval], [Relevant], "
        "[Irrelevant], [Fully supported], [Partially supported], [No support / Contradictory], [Utility:1], "
        "[Utility:2], [Utility:3], [Utility:4], [Utility:5], <paragraph>, </paragraph>); set model.source: "
        "selfrag/selfrag_llama2_7b (params/self-rag.yaml)")


@pytest.mark.slow  # Snakemake in a subprocess
def test_self_rag_runs_through_the_workflow_on_a_tiny_model_with_reflection_tokens(tiny_self_rag_dir, tmp_path):
    """The real path: the model step, the index, the split and the generate rule, on a random Llama whose
    tokenizer has the reflection tokens; threshold 0 retrieves for every question (p > 0)."""
    copy_workflow(tmp_path)

    def edit(data):
        data.pop("detectors")
        data["model"].update(name="tiny-self-rag", source=str(tiny_self_rag_dir))
        data["generation"].update(threads=1, cache=None)
        data["datasets"]["demo"]["sample"]["size"] = 2
        data["methods"]["self-rag"] = {"type": "self-rag", "threshold": 0.0, "top_k": 2, "max_new_tokens": 4}
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "data/runs/demo/self-rag/predictions.jsonl")
    predictions = read_jsonl(tmp_path / "data/runs/demo/self-rag/predictions.jsonl")
    traces = read_jsonl(tmp_path / "data/runs/demo/self-rag/trace.jsonl")
    assert len(predictions) == 2 and all(p["direct"] and p["retrievals"] == 1 for p in predictions)
    assert all(p["counters"]["llm_calls"] == 3 and len(p["retrieved_ids"]) == 2 for p in predictions)
    for trace in traces:
        decide, *segments = trace["steps"]
        assert decide["phase"] == "decide" and decide["retrieve"] and 0 < decide["retrieve_score"] <= 1
        assert [s["phase"] for s in segments] == ["segment", "segment"]
        best = max(segments, key=lambda s: s["score"])
        assert trace["output"] == postprocess(best["text"])
        assert all(0 <= s["relevance"] <= 1 and len(s["tokens"]) <= 4 for s in segments)


def test_check_params_reads_the_tokenizer_files_without_the_weights(tiny_llama_dir, tiny_self_rag_dir, tmp_path,
                                                                    monkeypatch):
    """Before, a model without the reflection tokens was refused only once its weights had loaded. Now
    check-params reads the saved tokenizer's JSON files: the weights of the refused model are removed
    here to show they are not read; the tiny model with the tokens passes."""
    import shutil

    import yaml

    from adaptive_rag.config import parse_params

    source = tmp_path / "plain"
    shutil.copytree(tiny_llama_dir, source)
    (source / "model.safetensors").unlink()
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(name="plain", source=str(source))
    data["experiment"]["methods"] = ["wo-rag", "self-rag"]
    data["methods"]["self-rag"] = {"type": "self-rag"}
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as refused:
        parse_params(data, "params.yaml").check_runs()
    assert str(refused.value) == (
        f"params.yaml: methods.self-rag: {source / 'tokenizer.json'}: model 'plain' has no Self-RAG reflection "
        "tokens ([Retrieval], [No Retrieval], [Relevant], [Irrelevant], [Fully supported], [Partially supported], "
        "[No support / Contradictory], [Utility:1], [Utility:2], [Utility:3], [Utility:4], [Utility:5], "
        "<paragraph>, </paragraph>); set model.source: selfrag/selfrag_llama2_7b (params/self-rag.yaml)")
    data["model"].update(name="tiny-self-rag", source=str(tiny_self_rag_dir))
    parse_params(data, "params.yaml").check_runs()
    data["model"].update(source="selfrag/selfrag_llama2_7b")  # a hub id not materialised: nothing to read yet
    parse_params(data, "params.yaml").check_runs()
