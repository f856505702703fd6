"""The `dior` method: its settings, capabilities and inputs; the loop with a scripted LM and scripted
detectors (spec acceptance test 9: early detection retrieves up front before the first look-ahead, a
flagged second sentence truncates before it and three stepwise searches give Rc = 3, Hc = 1, the
regeneration call; `max_retrievals` caps triggers; `early: off` never attributes); each real-time
detector mode; the config refusals of acceptance test 10; and one run on the tiny Llama with tiny
trained detectors and a real BM25 index.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from adaptive_rag.config import parse_params
from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.lm.base import ATTENTIONS, ENTROPY, GRADIENTS, HIDDEN_STATES, NO_EXTRAS, Attribution, Extras, Prompt
from adaptive_rag.lm.capabilities import WHITE_BOX
from adaptive_rag.methods import registry
from adaptive_rag.methods.base import Context
from adaptive_rag.methods.dior.dior import DioR
from adaptive_rag.methods.dior import detectors as detectors_module
from adaptive_rag.methods.dior import keywords
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.parts.text import Entity
from adaptive_rag.retrieval import Hit

from conftest import (PIOC, PIOC_ENTROPIES, REPO, SCRIPTED_EXEMPLARS, SCRIPTED_QUESTION, RecordingRetriever, cont,
                      pioc, settings_of, tiny_detectors)


def read(params: dict) -> dict:
    return settings_of(DioR, params, "methods.dior")


# ---- settings ----------------------------------------------------------------------------------------

def test_defaults_follow_the_spec():
    s = read({})
    assert {k: s[k] for k in ("early", "early_threshold", "early_features", "realtime", "realtime_tokens", "theta",
                              "prob_theta", "pre", "top_n", "tfidf", "similarity", "post", "chunk", "prompt",
                              "max_retrievals", "keep", "top_k", "candidates", "chunk_close")} == {
        "early": "on", "early_threshold": 0.5, "early_features": "attribution-sequence", "realtime": "mlp-hidden",
        "realtime_tokens": "entities", "theta": 1.0, "prob_theta": 0.5, "pre": "scored", "top_n": 35,
        "tfidf": "corpus", "similarity": "minilm", "post": "stepwise", "chunk": "sentence", "prompt": "paper",
        "max_retrievals": 5, "keep": "all", "top_k": 3, "candidates": "real-words", "chunk_close": "before-drop"}
    assert s["weights"] == {"attention": 1.0, "tfidf": 1.0, "position": 1.0, "similarity": 1.0}
    assert (s["early_detector"], s["realtime_detector"]) == ("data/detectors/early.safetensors",
                                                             "data/detectors/realtime.safetensors")
    assert (s["step_fraction"], s["new_keywords"], s["candidate_pool"], s["max_rounds"], s["relevance"]) == (
        0.5, 10, 15, 10, "tfidf")


def test_yaml_on_and_off_read_as_booleans_are_accepted():
    assert read(yaml.safe_load("early: off"))["early"] == "off"
    assert read(yaml.safe_load("early: on"))["early"] == "on"
    assert read({"early": "off"})["early"] == "off"


@pytest.mark.parametrize("params, message", [
    ({"early": "maybe"}, "methods.dior.early: must be on or off; got 'maybe'"),
    ({"realtime": "mind"}, "methods.dior.realtime: must be one of mlp-hidden, rind, rind+mlp, prob"),
    ({"weights": {"attention": 1, "recency": 2}}, "methods.dior.weights.recency: unknown key"),
    ({"weights": {"tfidf": -1}}, "methods.dior.weights.tfidf: expected a finite number >= 0.0"),
    ({"weights": {"attention": 0, "tfidf": 0, "position": 0, "similarity": 0}},
     "methods.dior.weights: every weight is 0"),
    ({"step_fraction": 1.5}, "methods.dior.step_fraction: expected a fraction in (0, 1]"),
    ({"pre": "ranked"}, "methods.dior.pre: must be one of scored, sequential"),
    ({"tfidf": "idf"}, "methods.dior.tfidf: must be one of corpus, context"),
    ({"chunk": "paragraph"}, "methods.dior.chunk: must be one of"),
    ({"top_n": 0}, "methods.dior.top_n: expected an integer >= 1"),
    ({"docs": 3}, "methods.dior.docs: unknown key"),  # the number of documents is top_k
])
def test_bad_settings_name_the_key(params, message):
    with pytest.raises(ConfigError) as err:
        read(params)
    assert message in str(err.value)


def test_capabilities_follow_the_settings():
    assert DioR.needs_for(read({})) == {GRADIENTS, HIDDEN_STATES, ATTENTIONS}
    assert DioR.needs_for(read({"early": "off"})) == {HIDDEN_STATES, ATTENTIONS}
    assert DioR.needs_for(read({"realtime": "rind", "early": False})) == {ATTENTIONS, ENTROPY}
    assert DioR.needs_for(read({"realtime": "prob", "early": False, "weights": {"attention": 0}})) == set()
    assert DioR.needs_for(read({"realtime": "prob", "early": False, "pre": "sequential"})) == set()
    assert DioR.needs_for(read({"realtime": "prob", "early": False, "weights": {"attention": 0},
                                "similarity": "lm-embeddings"})) == {HIDDEN_STATES}


def test_inputs_are_the_detector_files_the_settings_use():
    assert DioR.inputs(read({}), "demo", "dior") == {"early_detector": "data/detectors/early.safetensors",
                                                     "realtime_detector": "data/detectors/realtime.safetensors"}
    assert DioR.inputs(read({"early": "off", "realtime": "rind"}), "demo", "dior") == {}
    assert DioR.inputs(read({"realtime": "prob", "early_detector": "x/e.safetensors"}), "demo", "dior") == {
        "early_detector": "x/e.safetensors"}


# ---- acceptance test 10: check-params refusals --------------------------------------------------------

def params_with_dior(dior: dict, **model) -> dict:
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["methods"] = {"wo-rag": None, "dior": dior}
    data["experiment"]["methods"] = ["wo-rag", "dior"]
    data.pop("ablations", None)
    data.pop("complexity_classifier")  # its strategies are methods removed here
    if model.get("backend") == "api":
        data.pop("detectors", None)  # they are trained on a white-box model: refused with an API one on their own
    data["model"].update(model)
    return data


API = {"backend": "api", "api": {"base_url": "http://localhost:1/v1", "model": "m"}}


def test_dior_on_an_api_model_fails_at_check_params():
    with pytest.raises(ConfigError) as err:
        parse_params(params_with_dior({}, **API))
    assert "methods.dior: method type 'dior' needs attentions, gradients, hidden_states, which model.backend " \
           "'api' cannot provide" in str(err.value)
    with pytest.raises(ConfigError, match="needs gradients, which model.backend 'api'"):
        parse_params(params_with_dior({"realtime": "prob", "weights": {"attention": 0}}, **API))
    # no detector and no attention: DioR's black-box ablation cell runs on an API model
    black_box = {"early": "off", "realtime": "prob", "pre": "sequential"}
    assert parse_params(params_with_dior(black_box, **API)).methods["dior"].type == "dior"


def test_corpus_tfidf_is_refused_with_a_dense_index_naming_the_key():
    with pytest.raises(ConfigError) as err:
        parse_params(params_with_dior({"retriever": "dense"}))
    assert "methods.dior.tfidf: corpus takes its document frequencies from the BM25 index, but this " \
           "configuration searches the dense index" in str(err.value)
    data = params_with_dior({})
    data["retrieval"]["type"] = "dense"
    with pytest.raises(ConfigError, match="methods.dior.tfidf: corpus"):
        parse_params(data)
    assert parse_params(params_with_dior({"retriever": "dense", "tfidf": "context"})).methods["dior"]
    assert parse_params(params_with_dior({"retriever": "dense", "pre": "sequential"})).methods["dior"]


def test_the_methods_table_describes_dior():
    info = registry.describe("dior")
    assert info.needs == ("attentions", "gradients", "hidden_states") and info.retrieves
    assert info.choices["realtime"] == ("mlp-hidden", "rind", "rind+mlp", "prob")
    assert info.choices["early"] == ("on", "off")


# ---- the loop (acceptance test 9) --------------------------------------------------------------------

KNOWLEDGE = "External Knowledge After Chunk:"


def shows_passages(prompt) -> bool:
    text = prompt.text if prompt.text is not None else "".join(c for _, c in prompt.messages)
    return "External Knowledge" in text or "Context:" in text  # After Chunk, or App. F's whole documents


class DioRLM:
    """Greedy continuations from `script[(prompt shows passages, prefix)]` and the question's attribution;
    `events` records every call in order."""

    capabilities = WHITE_BOX

    def __init__(self, script, attribution=None):
        self.script, self.attribution_result, self.events = script, attribution, []

    def identity(self):
        return {"backend": "scripted", "model": "scripted"}

    def generate(self, prompts, max_new_tokens, stop=(), extras=NO_EXTRAS):
        out = []
        for p in prompts:
            key = (shows_passages(p), p.prefix)
            self.events.append(("generate", key, p, extras))
            if key not in self.script:
                raise AssertionError(f"unscripted call {key!r}")
            out.append(copy.deepcopy(self.script[key]))
        return out

    def attribution(self, prompt, settings):
        self.events.append(("attribution", prompt, settings))
        if self.attribution_result is None:
            raise AssertionError("attribution asked for with early detection off")
        return self.attribution_result


# The question's attribution: BOS, then "Where was Inchcombe born?"; mean 1/7: " Inch" and " born" are above
# it -> the question's candidates are "Inchcombe" and "born".
ATTRIBUTION = Attribution(tokens=["", "Where", " was", " Inch", "combe", " born", "?"], token_ids=list(range(7)),
                          target_id=0, target=" In", value=0.5, baseline_value=0.1,
                          l2=np.array([0.5, 1.0, 1.0, 3.0, 1.0, 3.0, 0.5]), dot=np.zeros(7))


class FakeDetector:
    """A scripted detector: early, a fixed p(hallucination); realtime, p(non-hallucination) = 1 - x[:, 0]."""

    def __init__(self, kind, p=None, features="attribution-sequence"):
        self.kind, self.p, self.calls = kind, p, []
        self.header = {"kind": kind, "architecture": {"features": features} if kind == "early" else {}}

    def predict(self, inputs):
        self.calls.append(inputs)
        if self.kind == "early":
            return np.array([self.p] * len(inputs))
        return 1.0 - np.asarray(inputs)[:, 0]


@pytest.fixture
def detectors(monkeypatch):
    """`detectors.load` answering with scripted detectors; `loaded` records (path, kind, model)."""
    made = {"early": FakeDetector("early", 0.2), "realtime": FakeDetector("realtime"), "loaded": []}

    def load(path, kind, model=None, width=None, source=None):
        made["loaded"].append((str(path), kind, model))
        return made[kind]

    monkeypatch.setattr(detectors_module, "load", load)
    return made


def fake_entities(text):
    out = []
    for name in ("Inchcombe", "Kells", "Paris"):
        at = text.find(name)
        while at >= 0:
            out.append(Entity(at, at + len(name), name, "X"))
            at = text.find(name, at + 1)
    return sorted(out, key=lambda e: e.start)


@pytest.fixture
def ner(monkeypatch):
    from adaptive_rag.methods.parts import text

    monkeypatch.setattr(keywords, "entities", fake_entities)
    monkeypatch.setattr(text, "entities", fake_entities)


# " Inchcombe was a poet from Kells. He was born in Paris." with one hidden feature per token: the real-time
# fake reads p(non-hallucination) = 1 - x, so " Paris" (x = .8, p = .2) is the one flagged token.
LOOKAHEAD_TOKENS = [" Inchcombe", " was", " a", " poet", " from", " Kells", ".", " He", " was", " born", " in",
                    " Paris", "."]
FIRST = " Inchcombe was a poet from Kells."


def lookahead(finish="stop"):
    hidden = np.zeros((len(LOOKAHEAD_TOKENS), 2), dtype=np.float32)
    hidden[11, 0] = 0.8
    return cont(LOOKAHEAD_TOKENS, finish=finish, hidden=hidden)


REGEN = cont([" He", " died", " in", " Dublin", ".", " So", " the", " answer", " is", " Dublin", "."], finish="stop")
UPFRONT = cont([" Inchcombe", " was", " born", " in", " Dublin", ".", " So", " the", " answer", " is", " Dublin",
                "."], finish="stop")
# The keyword scores of the look-ahead trigger (tfidf: context, position; attention and similarity off):
# context "Where was Inchcombe born?\n Inchcombe was a poet from Kells. He was born in Paris." (15 words);
# candidates (`candidates: real-words`): the real words Inchcombe, born (question), poet, Kells (generated;
# Paris is flagged, the second Inchcombe and born merged into the first)
# P = [3, 4, 8, 10] / 15 -> scaled [0, 1/7, 5/7, 1]; tf = [2, 2, 1, 1] -> scaled [1, 1, 0, 0];
# I = [1, 8/7, 5/7, 1] -> born first, then Inchcombe before Kells (a tie, by position): top 2 in text order
# "Inchcombe born"
SCORED = {"tfidf": "context", "weights": {"attention": 0, "similarity": 0}}
TERMS = {**SCORED, "top_n": 2, "realtime_tokens": "all"}


def run_dior(params, script, attribution=ATTRIBUTION, max_new_tokens=60, inputs=None, retriever=None):
    lm, retriever = DioRLM(script, attribution), retriever or RecordingRetriever()
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=max_new_tokens,
                  retriever=retriever, answer_fallback_tokens=5,
                  inputs=inputs if inputs is not None else {"early_detector": "e.safetensors",
                                                            "realtime_detector": "r.safetensors"})
    method = DioR(read(params), ctx)
    [answer] = method.answer_batch([Example("q1", SCRIPTED_QUESTION, ["Dublin"], "span")])
    return answer, lm, retriever


def test_early_detection_retrieves_up_front_before_the_first_look_ahead(detectors):
    detectors["early"].p = 0.9
    answer, lm, retriever = run_dior(SCORED, {(True, ""): UPFRONT})
    assert [e[0] for e in lm.events] == ["attribution", "generate"]
    assert lm.events[0][1] == Prompt(text=SCRIPTED_QUESTION) and lm.events[0][2].steps == 64  # IGSettings()
    assert lm.events[1][1] == (True, "")  # the first generation already shows the passages
    # the up-front query: pre-retrieval over the question, whose two real words are below top_n (35); three
    # stepwise searches of the candidate pool
    assert [q for q, _ in retriever.queries][0] == "Inchcombe born"
    assert [k for _, k in retriever.queries] == [15, 15, 15]
    assert answer.counters() == {"retrievals": 3, "llm_calls": 1, "detections": 1, "generated_tokens": 12,
                                 "sentences": 2}
    assert answer.output == "Inchcombe was born in Dublin. So the answer is Dublin."
    early, upfront, regenerate = answer.steps
    assert early["phase"] == "early-detection" and early["probability"] == 0.9 and early["fire"] is True
    assert early["candidates"] == ["Inchcombe", "born"]
    assert early["attribution"] == [0.05, 0.1, 0.1, 0.3, 0.1, 0.3, 0.05]
    assert upfront["phase"] == "early-retrieval" and upfront["searches"] == 3 and len(upfront["rounds"]) == 3
    assert [c["id"] for c in upfront["chunks"]] == upfront["retrieved"]
    assert regenerate["phase"] == "regenerate"
    assert detectors["loaded"] == [("e.safetensors", "early", "scripted")]
    assert detectors["early"].calls[0][0].tolist() == pytest.approx(early["attribution"])


def test_realtime_detection_truncates_before_the_flagged_sentence_and_retrieves_stepwise(detectors, ner):
    answer, lm, retriever = run_dior(TERMS, {(False, ""): lookahead(), (True, FIRST): REGEN})
    assert [e[0] for e in lm.events] == ["attribution", "generate", "generate"]
    look, regen = lm.events[1], lm.events[2]
    assert look[1] == (False, "") and look[3] == Extras(hidden_layer=-1)  # hidden states only: no attention term
    assert regen[1] == (True, FIRST) and regen[3] == NO_EXTRAS
    assert retriever.queries[0] == ("Inchcombe born", 15) and len(retriever.queries) == 3
    assert answer.counters() == {"retrievals": 3, "llm_calls": 2, "detections": 1, "generated_tokens": 24,
                                 "sentences": 4}
    assert answer.output == "Inchcombe was a poet from Kells. He died in Dublin. So the answer is Dublin."
    # the prompt of the regeneration: the dataset's instruction and exemplars, DioR's knowledge block
    text = regen[2].text
    assert text.startswith("Answer the question by reasoning step by step")
    assert ("Question: Who wrote Hamlet?\nAnswer: Hamlet was written by Shakespeare. So the answer is "
            "Shakespeare.") in text
    assert f"{KNOWLEDGE}\n[1] T1: (1).passage 1." in text and "\n[2] T2: (1).passage 2." in text
    assert text.endswith("Using the external knowledge provided above, please answer the following question:\n"
                         f"Question: {SCRIPTED_QUESTION}\nAnswer:")
    early, step, regenerate = answer.steps
    assert early["fire"] is False and early["probability"] == 0.2
    assert step["phase"] == "look-ahead" and step["sentence"] == 1 and step["kept"] == len(FIRST) + 1
    assert step["detection"]["detector"] == "mlp-hidden" and step["detection"]["flagged_text"] == ["Paris"]
    assert step["query"] == "Inchcombe born" and step["searches"] == 3 and len(step["rounds"]) == 3
    rows = step["keywords"]["candidates"]
    assert [(r["text"], r["source"], r["kept"]) for r in rows] == [
        ("Inchcombe", "question", True), ("born", "question", True), ("poet", "generated", False),
        ("Kells", "generated", False)]
    assert [r["score"] for r in rows] == pytest.approx([1.0, 1.1429, 0.7143, 1.0])
    assert rows[3]["terms"] == {"tfidf": 1.0, "position": round(10 / 15, 4)}
    assert [c["id"] for c in step["chunks"]] == step["retrieved"] == [p["id"] for p in answer.passages]
    assert {p["retrieval"] for p in answer.passages} == {0}
    assert regenerate["phase"] == "regenerate"
    assert [p for p, _, _ in detectors["loaded"]] == ["e.safetensors", "r.safetensors"]


def test_the_realtime_detector_judges_entity_tokens_only_by_default(detectors, ner):
    # sentence 1: " Inchcombe", " Kells" judged (p = 1); sentence 2: " Paris" judged and flagged
    params = {**TERMS, "realtime_tokens": "entities"}
    answer, lm, retriever = run_dior(params, {(False, ""): lookahead(), (True, FIRST): REGEN})
    assert answer.steps[1]["detection"]["units"] == ["Paris"]
    assert [x.shape[0] for x in detectors["realtime"].calls] == [2, 1]


def test_max_retrievals_caps_triggers_not_searches(detectors):
    detectors["early"].p = 0.9
    cut = cont([" Inchcombe", " was", " a", " poet", " from", " Kells", "."])  # no answer yet: the loop goes on
    rest = cont([" He", " was", " born", " in", " Paris", ".", " So", " the", " answer", " is", " Paris", "."],
                finish="stop", hidden=np.full((12, 2), 0.9, dtype=np.float32))  # would be flagged if judged
    answer, lm, retriever = run_dior({**SCORED, "max_retrievals": 1}, {(True, ""): cut, (False, FIRST): rest})
    assert answer.counters()["detections"] == 1 and answer.counters()["retrievals"] == 3
    assert detectors["realtime"].calls == []  # capped: the look-ahead is kept unjudged
    assert answer.steps[-1]["phase"] == "look-ahead" and "detection" not in answer.steps[-1]
    assert answer.output.endswith("So the answer is Paris.")
    # a cap of 0: early detection does not fire however sure the detector is
    answer, lm, retriever = run_dior({**SCORED, "max_retrievals": 0}, {(False, ""): rest})
    assert answer.steps[0]["fire"] is False and retriever.queries == []
    assert answer.counters()["retrievals"] == 0 and answer.counters()["detections"] == 0


def test_early_off_never_asks_for_an_attribution(detectors, ner):
    # DioRLM fails the test on any attribution call; the question's candidates are its real words
    answer, lm, retriever = run_dior({**TERMS, "early": "off"}, {(False, ""): lookahead(), (True, FIRST): REGEN},
                                     attribution=None, inputs={"realtime_detector": "r.safetensors"})
    assert [e[0] for e in lm.events] == ["generate", "generate"]
    assert [s["phase"] for s in answer.steps] == ["look-ahead", "regenerate"]
    assert retriever.queries[0][0] == "Inchcombe born"  # real words "Inchcombe", "born" (and Kells, third)
    assert detectors["loaded"] == [("r.safetensors", "realtime", "scripted")]


def test_single_retrieval_and_the_dragin_prompt(detectors, ner):
    params = {**TERMS, "post": "single", "prompt": "dragin", "top_k": 2}
    answer, lm, retriever = run_dior(params, {(False, ""): lookahead(), (True, FIRST): REGEN})
    assert retriever.queries == [("Inchcombe born", 2)]
    assert answer.counters()["retrievals"] == 1 and answer.counters()["detections"] == 1
    text = lm.events[2][2].text
    assert "Context:\n[1] T1: passage 1.1\n[2] T1: passage 1.2\nAnswer in the same format as before" in text
    assert KNOWLEDGE not in text


def test_sequential_keywords_take_text_order(detectors, ner):
    answer, lm, retriever = run_dior({**TERMS, "pre": "sequential", "top_n": 3},
                                     {(False, ""): lookahead(), (True, FIRST): REGEN})
    assert retriever.queries[0][0] == "Inchcombe born poet"
    assert "score" not in answer.steps[1]["keywords"]["candidates"][0]


def test_real_word_candidates_give_the_ranking_something_to_select(detectors, ner):
    """Item: pre-retrieval must select. `candidates: real-words` (the reference code's `keep_real_words`,
    src/new_generate.py: every POS-filtered real word of the question and the generated text, flagged ones
    left out) gives 4 candidates for top_n 2, so `scored` and `sequential` differ (paper Table 3: w/o Pre-R is
    below DioR). With the position term alone (§3.3.1, P = Pos/N over the 15 words): Inchcombe 3, born 4,
    poet 8, Kells 10 -> scaled [0, 1/7, 5/7, 1], top 2 = poet, Kells; sequential keeps Inchcombe, born."""
    position = {"weights": {"attention": 0, "tfidf": 0, "similarity": 0}, "top_n": 2, "realtime_tokens": "all"}
    script = {(False, ""): lookahead(), (True, FIRST): REGEN}
    answer, _, scored = run_dior(position, script)
    rows = answer.steps[1]["keywords"]["candidates"]
    assert [r["text"] for r in rows] == ["Inchcombe", "born", "poet", "Kells"]  # Paris flagged
    assert [r["score"] for r in rows] == pytest.approx([0.0, round(1 / 7, 4), round(5 / 7, 4), 1.0])
    assert scored.queries[0][0] == "poet Kells"
    _, _, sequential = run_dior({**position, "pre": "sequential"}, script)
    assert sequential.queries[0][0] == "Inchcombe born"


def test_early_detection_retrieves_with_the_pre_retrieval_query(detectors):
    """Item: the up-front retrieval runs pre-retrieval too (§3.3.1: the top-ranked keywords are the query of
    every trigger). Context: the question alone, "Where was Inchcombe born?" (4 words); candidates its real
    words Inchcombe (P = 3/4) and born (4/4); with the position term alone and top_n 1 the query is "born"."""
    detectors["early"].p = 0.9
    params = {"weights": {"attention": 0, "tfidf": 0, "similarity": 0}, "top_n": 1}
    answer, lm, retriever = run_dior(params, {(True, ""): UPFRONT})
    assert retriever.queries[0][0] == "born"
    upfront = answer.steps[1]
    assert upfront["phase"] == "early-retrieval" and upfront["query"] == "born"
    assert [(r["text"], r["kept"]) for r in upfront["keywords"]["candidates"]] == [("Inchcombe", False),
                                                                                    ("born", True)]


class TwoSentenceRetriever(RecordingRetriever):
    """Every hit's text is two sentences, so chunking would cut it."""

    def search(self, query, k):
        return [Hit(h.id, h.title, f"Inchcombe wrote {h.text}. He was born in Kells.", h.score)
                for h in super().search(query, k)]


def test_without_post_retrieval_documents_are_whole_under_app_f_header(detectors, ner):
    """Item: w/o Post-R is "single-batch retrieval, where all documents are included in the prompt" (paper
    §4.2.3) with App. F's prompt "External Knowledge: [1] K_i1 [2] K_i2 ...": no stepwise rounds, no chunks,
    no "After Chunk" header, from `post: single` alone."""
    script = {(False, ""): lookahead(), (True, FIRST): REGEN}
    answer, lm, retriever = run_dior({**TERMS, "post": "single"}, script, retriever=TwoSentenceRetriever())
    text = lm.events[2][2].text
    assert ("External Knowledge:\n[1] T1: Inchcombe wrote passage 1.1. He was born in Kells.\n[2] T1: Inchcombe "
            "wrote passage 1.2. He was born in Kells.\n[3] T1: Inchcombe wrote passage 1.3. He was born in Kells.\n"
            "Using the external knowledge provided above") in text
    assert KNOWLEDGE not in text and "(1)." not in text
    assert answer.steps[1]["chunks"][0]["chunks"] == ["Inchcombe wrote passage 1.1. He was born in Kells."]
    # the stepwise base chunks the same documents and numbers the blocks under "After Chunk"
    answer, lm, retriever = run_dior(TERMS, script, retriever=TwoSentenceRetriever())
    assert f"{KNOWLEDGE}\n[1] T1: (1)." in lm.events[2][2].text


# " Inch" alone is above the mean attribution (9/7): the question's Eq. 3 words are "Inchcombe" only, where
# its real words are "Inchcombe" and "born".
INCH_ONLY = Attribution(tokens=ATTRIBUTION.tokens, token_ids=ATTRIBUTION.token_ids, target_id=0, target=" In",
                        value=0.5, baseline_value=0.1, l2=np.array([0.5, 1.0, 1.0, 4.0, 1.0, 1.0, 0.5]),
                        dot=np.zeros(7))


def test_eq3_candidates_do_not_change_with_early_detection(detectors, ner):
    """Item: an ablation changes one thing. Under `candidates: eq3-entities` (§3.2 Eq. 3: IG_i > IG_mean) the
    question's candidates are its Eq. 3 words with or without early detection (w/o ED removes the detector,
    §4.2.3, not the attribution the candidates come from): Inchcombe, then the entity Kells (Paris flagged)."""
    params = {**TERMS, "candidates": "eq3-entities", "top_n": 3}
    script = {(False, ""): lookahead(), (True, FIRST): REGEN}
    queries = {}
    for early in ("on", "off"):
        answer, lm, retriever = run_dior({**params, "early": early}, script, attribution=INCH_ONLY)
        assert [e[0] for e in lm.events] == ["attribution", "generate", "generate"]
        rows = answer.steps[1]["keywords"]["candidates"]
        assert [r["text"] for r in rows] == ["Inchcombe", "Kells"]
        queries[early] = retriever.queries[0][0]
    assert queries == {"on": "Inchcombe Kells", "off": "Inchcombe Kells"}
    assert answer.steps[0]["phase"] == "question-attribution" and answer.steps[0]["candidates"] == ["Inchcombe"]
    assert detectors["early"].calls == [detectors["early"].calls[0]]  # applied with early: on only
    settings = read({"early": "off", "candidates": "eq3-entities"})
    assert GRADIENTS in DioR.needs_for(settings) and "early_detector" in DioR.inputs(settings, None, None)


def test_a_detector_for_other_features_is_refused(detectors):
    detectors["early"].header["architecture"]["features"] = "attribution-entropy"
    with pytest.raises(InputError, match="e.safetensors: this early detector reads 'attribution-entropy', but the "
                                         "method's early_features is 'attribution-sequence'"):
        run_dior({}, {(False, ""): lookahead()})


# ---- each real-time mode on hand-built look-aheads ------------------------------------------------------

class ReencodingLM:
    """`received_attention` of the five tokens of " Paris is one city." (test_dragin's LATER/OWN)."""

    def __init__(self):
        self.asked = []

    def received_attention(self, token_ids, layer=-1):
        self.asked.append(list(token_ids))
        later = [[0.4, 0.1, 0.2, 0.1, 0.0], [0.2, 0.3, 0.0, 0.3, 0.0]]
        own = [[1.0, 0.5, 0.3, 0.2, 0.6], [1.0, 0.4, 0.5, 0.2, 0.2]]
        return np.array([later, own], dtype=np.float32)

    def identity(self):
        return {"model": "scripted"}


def judged(params, hidden=None):
    ctx = Context(lm=ReencodingLM(), exemplars=[], prompt_format="raw", max_new_tokens=50,
                  inputs={"realtime_detector": "r.safetensors"})
    method = DioR(read({"early": "off", **params}), ctx)
    la = LookAhead(cont(PIOC, [0.8, 0.6, 0.5, 0.4, 0.9], token_ids=[10, 11, 12, 13, 14], prompt_tokens=2,
                        entropies=list(PIOC_ENTROPIES), attentions=pioc().attentions, hidden=hidden))
    return method.detect(None, la, la.sentences[0])


def test_prob_flags_tokens_below_prob_theta():
    detection = judged({"realtime": "prob"})  # p = [.8, .6, .5, .4, .9]: only " city" is below .5
    assert detection.fire and detection.flagged == [3] and detection.extra["flagged_text"] == ["city"]
    assert not judged({"realtime": "prob", "prob_theta": 0.4}).fire


def test_rind_scores_as_the_dragin_reference_code():
    # test_dragin's reference-code case: words scored [1.6, 2.16, 1.92, 3.64]; over 2, real words: "city."
    detection = judged({"realtime": "rind", "theta": 2.0})
    assert detection.scores == pytest.approx([1.6, 2.16, 1.92, 3.64]) and detection.flagged == [3]


def test_rind_plus_mlp_fires_when_either_does(detectors):
    hidden = np.zeros((5, 2), dtype=np.float32)
    hidden[0, 0] = 0.7  # " Paris": p(non-hallucination) .3
    detection = judged({"realtime": "rind+mlp", "theta": 5.0, "realtime_tokens": "all"}, hidden)
    assert detection.fire and detection.extra["rind_units"] == 4  # RIND alone does not fire at theta 5
    assert [u.text for u in detection.units] == ["Paris", "is", "one", "city.", "Paris", "is", "one", "city", "."]
    assert detection.flagged == [4] and detection.extra["flagged_text"] == ["Paris"]
    both = judged({"realtime": "rind+mlp", "theta": 2.0, "realtime_tokens": "all"}, hidden)
    assert both.flagged == [3, 4]


# ---- the similarity and TF-IDF sources ------------------------------------------------------------------

def method_over(lm, retriever=None, **params):
    ctx = Context(lm=lm, exemplars=[], prompt_format="raw", max_new_tokens=10, retriever=retriever)
    return DioR(read({"early": "off", **params}), ctx)


def test_minilm_similarity_ranks_related_words_higher():
    similarity = method_over(None).similarity()
    paris, banana = similarity("What is the capital of France?", ["Paris", "banana"])
    assert paris > banana


def test_lm_embedding_similarity_is_the_cosine_of_mean_input_embeddings(tiny_model_dir):
    from adaptive_rag.lm.hf import HFModel

    lm = HFModel(tiny_model_dir)
    table = lm.model.get_input_embeddings().weight.detach().numpy()
    ids = lm.tokenizer("Carrowmere harbour", add_special_tokens=False)["input_ids"]
    vectors = lm.input_embeddings(["Carrowmere harbour", ""])
    assert np.allclose(vectors[0], table[ids].mean(0), atol=1e-6) and not vectors[1].any()
    similarity = method_over(lm, similarity="lm-embeddings").similarity()
    a, b = table[lm.tokenizer("town", add_special_tokens=False)["input_ids"]].mean(0), vectors[0]
    expected = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert similarity("town", ["Carrowmere harbour"]) == pytest.approx([expected], abs=1e-5)


def test_corpus_tfidf_needs_an_index_with_document_frequencies():
    with pytest.raises(ConfigError, match="tfidf: corpus reads document frequencies from a BM25 index, and this "
                                          "run searches RecordingRetriever; use tfidf: context"):
        method_over(None, RecordingRetriever()).idf()
    assert method_over(None, RecordingRetriever(), tfidf="context").idf()("anything") == 1.0


# ---- real detectors, the tiny Llama, a real BM25 index ----------------------------------------------------

def test_trained_detector_files_load_for_their_model_only(tmp_path):
    files = tiny_detectors(tmp_path, "scripted", 2)
    answer, lm, retriever = run_dior({"tfidf": "context", "weights": {"attention": 0, "similarity": 0}},
                                     {(False, ""): cont([" So", " the", " answer", " is", " Dublin", "."],
                                                        finish="stop", hidden=np.zeros((6, 2), np.float32)),
                                      (True, ""): UPFRONT}, inputs=files)
    assert 0.0 < answer.steps[0]["probability"] < 1.0
    (tmp_path / "other").mkdir()
    other = tiny_detectors(tmp_path / "other", "another-model", 2)
    with pytest.raises(InputError, match="trained for model 'another-model', not 'scripted'"):
        run_dior({}, {(False, ""): lookahead(), (True, ""): UPFRONT}, inputs=other)


def test_a_detector_whose_features_were_computed_otherwise_is_refused_at_load(tmp_path):
    """Item: the detectors' recorded source must match the run (the data builder's meta `source`, copied into
    the header by `train-detector`; detector_data.py): an early detector built from 32-step IG, or a real-time
    one from layer -2, is refused naming the file, the recorded value and the run's."""
    from dataclasses import asdict, replace

    from adaptive_rag.lm.base import IGSettings
    from adaptive_rag.methods.dior.detectors import (EarlyArchitecture, RealtimeArchitecture, Training,
                                                      train_early, train_realtime)

    files = tiny_detectors(tmp_path, "scripted", 2)
    rng = np.random.default_rng(0)
    sequences = [(lambda v: v / v.sum())(rng.random(4)) for _ in range(8)]
    steps32 = {"attribution": asdict(replace(IGSettings(), steps=32))}
    early = train_early(sequences, [i % 2 for i in range(8)], model="scripted", source=steps32,
                        architecture=EarlyArchitecture(hidden=4, layers=1), training=Training(epochs=1, lr=1e-3))
    path = early.save(tmp_path / "early-32.safetensors")
    script = {(False, ""): lookahead(), (True, ""): UPFRONT}
    with pytest.raises(InputError, match=r"early-32.safetensors: this early detector's features come from "
                                         r"attribution \{[^}]*'steps': 32[^}]*\}, but this run computes them "
                                         r"with attribution \{[^}]*'steps': 64[^}]*\}; rebuild its data and "
                                         r"retrain it"):
        run_dior(SCORED, script, inputs={**files, "early_detector": path})
    x = rng.normal(size=(16, 2)).astype(np.float32)
    realtime = train_realtime(x, [(i // 2) % 2 for i in range(16)], [i // 2 for i in range(16)], model="scripted",
                              source={"hidden_layer": -2}, architecture=RealtimeArchitecture(sizes=(4,)),
                              training=Training(epochs=1, lr=1e-3))
    path = realtime.save(tmp_path / "realtime-2.safetensors")
    with pytest.raises(InputError, match="realtime-2.safetensors: this realtime detector's features come from "
                                         "hidden_layer -2, but this run computes them with hidden_layer -1"):
        run_dior({**SCORED, "early": "off"}, {(False, ""): lookahead()}, inputs={"realtime_detector": path})


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_dior_runs_on_the_tiny_llama_with_trained_detectors_and_bm25(tiny_model_dir, tmp_path):
    from adaptive_rag.data.corpus import convert_to_collection
    from adaptive_rag.lm.hf import HFModel
    from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index

    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n"
                   "1\tIdris Penhallow was born in Carrowmere. He founded Velmora Glassworks in 1712."
                   "\tIdris Penhallow\n"
                   "2\tCarrowmere is a harbour town on the Lune estuary. It is known for its rope walks.\tCarrowmere\n"
                   "3\tThe Tessilan Rope Mill spun hemp for the river fleets of the Lune.\tTessilan Rope Mill\n"
                   "4\tVelmora Glassworks made blue crown glass. Its kilns burned until 1801.\tVelmora Glassworks\n",
                   encoding="utf-8")
    manifest = convert_to_collection(tsv, tmp_path / "collection")
    build_index(tmp_path / "collection", tmp_path / "index", threads=1, expected=manifest["passages"])
    lm = HFModel(tiny_model_dir, batch_size=4)
    files = tiny_detectors(tmp_path, lm.identity()["model"], lm.model.config.hidden_size)
    examples = [Example("q1", "Where was Idris Penhallow born?", ["Carrowmere"], "span"),
                Example("q2", "What did the Tessilan Rope Mill spin?", ["hemp"], "span")]
    # early_threshold 0: ED fires for every question; theta 0: RIND fires on any real word (rind+mlp runs both)
    params = {"early_threshold": 0.0, "realtime": "rind+mlp", "theta": 0.0, "realtime_tokens": "all",
              "similarity": "lm-embeddings", "max_retrievals": 2}

    def run():
        ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=16,
                      retriever=BM25Retriever(tmp_path / "index"), answer_fallback_tokens=3, inputs=files)
        return DioR(read(params), ctx).answer_batch(examples)

    first, again = run(), run()
    assert [a.output for a in first] == [a.output for a in again]
    assert [a.counters() for a in first] == [a.counters() for a in again]
    for answer in first:
        phases = [s["phase"] for s in answer.steps]
        assert phases[:3] == ["early-detection", "early-retrieval", "regenerate"]
        assert 1 <= answer.detections <= 2 and answer.retrievals >= answer.detections
        assert answer.retrievals == sum(s.get("searches", 0) for s in answer.steps)
        assert 1 <= len({p["id"] for p in answer.passages if p["retrieval"] == 0}) <= 3  # at most top_k
        for step in answer.steps:
            if step.get("keywords"):
                assert step["keywords"]["query"] == step["query"]
                scored = [c for c in step["keywords"]["candidates"] if "terms" in c]
                assert all(set(c["terms"]) == {"attention", "tfidf", "position", "similarity"} for c in scored)
