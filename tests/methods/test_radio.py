"""RaDIO (github ghh1125/RaDIO, src/generate.py): the MLP detector's input and decision rule, RIND per
token over the whole look-ahead, the sentences kept before the fired one, the TF-IDF and similarity
factors of the query, the detector's data and training on a tiny random Llama, and (slow) the detector
and a run built by the workflow."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import InputError
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.radio import detector as radio_detector
from adaptive_rag.methods.radio.detector_data import assign_splits, cut_entities
from adaptive_rag.methods.radio.query import radio_factors, similarity_factors, tfidf_factors, units
from adaptive_rag.methods.radio.radio import RaDIO
from adaptive_rag.methods.parts.text import Entity

from conftest import RecordingRetriever, ScriptedLM, cont, method_with, settings_of


# ---- the detector's decision and input (src/generate.py) ------------------------------------------------

@pytest.mark.parametrize("scores, fires", [
    ([0.1, 0.2, 0.9], False),  # mean .4: no score in (.4, .5]
    ([0.1, 0.45, 0.2], True),  # mean .25: .45 is above it and at most .5
    ([0.5, 0.1, 0.1], True),  # .5 itself counts (score <= 0.5)
    ([0.6, 0.1, 0.1], False),  # the only score above the mean is over .5
    ([0.3, 0.3], False),  # nothing above the mean
    ([], False),
])
def test_detector_flag_is_a_score_above_the_lookaheads_mean_and_at_most_half(scores, fires):
    """AttnWeightRAG.inference: `if score > mean_score and score <= 0.5: flag = 1`."""
    assert radio_detector.fires(scores) is fires


class CharTokenizer:
    """encode(text) = [1 (BOS)] + the code point of each character; the token of " " is "Ġ"."""

    def encode(self, text):
        return [1] + [ord(c) for c in text]

    def tokenize(self, text):
        return ["Ġ" if c == " " else c for c in text]


def test_detector_input_is_the_first_two_ids_of_the_token_encoded_again():
    """BasicGenerator.generate_attn: tokenizer.encode(token without the space marker)[:2], zero-padded;
    the marker is "▁" for a llama config, else the tokenizer's token for " " (BasicGenerator.__init__)."""
    tok = CharTokenizer()
    assert radio_detector.space_marker(tok, "llama") == "▁"
    assert radio_detector.space_marker(tok, "gpt2") == "Ġ"
    features = radio_detector.token_features(tok, ["▁Paris", ".", "▁"], "▁")
    assert features.tolist() == [[1, ord("P")], [1, ord(".")], [1, 0]]
    # a llama config with a byte-level tokenizer (SmolLM2) keeps the "Ġ": the reference does the same
    assert radio_detector.token_features(tok, ["ĠParis"], "▁").tolist() == [[1, ord("Ġ")]]


def test_detector_net_and_file_round_trip(tmp_path):
    """MLP(2, 64, 1) with a sigmoid; the file refuses another model and a missing file names its target."""
    import torch

    net = radio_detector.build_net()
    assert [tuple(p.shape) for p in net.state_dict().values()] == [(64, 2), (64,), (1, 64), (1,)]
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.fc2.bias.fill_(np.log(3.0))  # sigmoid(ln 3) = .75 for every input
    header = {"format": radio_detector.FORMAT, "model": "tiny"}
    path = radio_detector.RadioDetector(net, header, {"test": {}}).save(tmp_path / "radio.safetensors")
    loaded = radio_detector.load(path, model="tiny")
    assert loaded.scores(np.array([[1, 80], [1, 46]])) == pytest.approx([0.75, 0.75])
    assert json.loads((tmp_path / "radio.metrics.json").read_text())["header"]["model"] == "tiny"
    with pytest.raises(InputError, match="trained for model 'tiny', not 'other'; retrain it"):
        radio_detector.load(path, model="other")
    with pytest.raises(InputError, match="train it: snakemake --cores all train_radio_detector"):
        radio_detector.load(tmp_path / "missing.safetensors")


# ---- RIND per token over the look-ahead, and the sentences kept (AttnWeightRAG.modifier) -----------------

TWO = [" Rome", " is", " old", ".", " It", " is", " big", "."]
# H: only " Rome" is uncertain. One head whose tokens each attend fully to themselves: with the diagonal every
# token receives 1, so in any span the normalised attention is 1 and RIND = H: Rome 2 > theta 1, the rest .1.
TWO_ENTROPIES = [2.0] + [0.1] * 7


class RadioLM(ScriptedLM):
    """A scripted model that also re-encodes (one head: later tokens pay 0, each token 1 to itself)."""

    def identity(self):
        return {"backend": "scripted", "model": "tiny"}

    def received_attention(self, token_ids, layer=-1):
        n = len(token_ids)
        return np.array([[np.zeros(n)], [np.ones(n)]], dtype=np.float32)


def two_sentences(finish="length"):
    rows = [np.full(2 + j + 1, 1.0 / (3 + j), dtype=np.float32) for j in range(len(TWO))]
    return cont(TWO, finish=finish, token_ids=list(range(10, 18)), prompt_tokens=2, entropies=list(TWO_ENTROPIES),
                attentions=rows, meta={"prompt_tokens": [" How old is Rome?", "\nAnswer:"]})


def radio(lm=None, **params):
    return method_with(RaDIO, {"theta": 1.0, **params}, lm or RadioLM({}), RecordingRetriever())


def test_rind_judges_the_whole_lookahead_and_fires_at_its_last_sentence():
    """modifier: unmerged tokens joined with spaces never spell "Rome is old." ("old ."), so the first
    sentence gets no tokens and the last all eight; `rind_span: sentence` judges each on its own."""
    la = LookAhead(two_sentences())
    first, last = la.sentences
    code = radio()
    assert code.detect(None, la, first).fire is False and code.detect(None, la, first).units == []
    fired = code.detect(None, la, last)
    assert [u.text for u in fired.units] == ["Rome", "is", "old", ".", "It", "is", "big", "."]
    # fires on " Rome" (RIND 2 > 1); the code's filter then reads the real words of the fired (last)
    # sentence "It is big." alone ({"big"}), which " Rome" does not hold: its flag is cleared
    assert fired.scores == pytest.approx(TWO_ENTROPIES) and fired.flagged == [] and fired.fire
    assert radio(real_word_match="overlap").detect(None, la, last).flagged == [0]  # a real word of the span
    per_sentence = radio(rind_span="sentence").detect(None, la, first)
    assert [u.text for u in per_sentence.units] == ["Rome", "is", "old", "."] and per_sentence.flagged == [0]


@pytest.mark.parametrize("real, pieces, over, kept", [
    # "Idris Inchcombe was born in 1720." parsed alone: PROPN Idris, PROPN Inchcombe, VERB born, NUM 1720;
    # `match(tokens[tl + i])` asks whether a real word is inside the piece: a word cut into pieces keeps none
    ({"Idris", "Inchcombe", "born", "1720"}, ["Id", "ris", "Inch", "combe", "was", "born", "in", "17", "20", "."],
     list(range(10)), [5]),
    # a piece longer than the real word keeps its flag ("Paris" inside "Paris,")
    ({"Paris"}, ["Paris,", "is"], [0, 1], [0]),
    # a real word only of an earlier sentence is not among the fired sentence's: the piece loses its flag
    ({"big"}, ["Rome", "big"], [0, 1], [1]),
    # Llama's newline piece "<0x0A>" holds the real word "A"
    ({"A"}, ["<0x0A>", "B"], [0, 1], [0]),
    # only the flagged units are looked at
    ({"born"}, ["born", "born"], [1], [1]),
])
def test_the_codes_real_word_filter_keeps_a_flag_where_a_real_word_is_inside_the_token_piece(real, pieces, over,
                                                                                               kept):
    from adaptive_rag.methods.radio.radio import token_piece_filter

    assert token_piece_filter(real, pieces, over) == kept


@pytest.mark.parametrize("ptext, prefix", [("drop-previous", ""), ("before-fired", " Rome is old.")])
def test_a_firing_at_the_second_sentence_keeps_one_sentence_fewer(ptext, prefix):
    """modifier: `prev = " ".join(sentences[:sid - 1])`: firing at sentence 1 keeps none (`ptext:
    drop-previous`); `before-fired` keeps sentence 0. Retrieval is top-1 (BasicRAG.retrieve, SBERT)."""
    answer_text = cont([" So", " the", " answer", " is", " 753", " BC", "."], finish="stop")
    lm = RadioLM({(False, ""): two_sentences(), (True, prefix): answer_text})
    retriever = RecordingRetriever()
    method = method_with(RaDIO, {"theta": 1.0, "ptext": ptext}, lm, retriever)
    [answer] = method.answer_batch([Example("q1", "How old is Rome?", ["753 BC"], "span")])
    [(query, k)] = retriever.queries
    assert k == 1
    # the code's filter cleared " Rome"'s flag (no real word of "It is big." is inside "Rome"): no flagged
    # word is left, the ranking is 0/0 and every real word of the question and the look-ahead is kept
    # (top_n 35), in text order, " Rome" with them
    assert query == "old Rome? Rome old. big."
    assert answer.output == (prefix.strip() + " So the answer is 753 BC.").strip()
    assert answer.steps[0]["sentence"] == 1


def test_with_the_overlap_filter_the_flagged_word_stays_out_of_the_query():
    """`real_word_match: overlap` keeps " Rome"'s flag (a real word of the judged span): it is left out."""
    answer_text = cont([" So", " the", " answer", " is", " 753", " BC", "."], finish="stop")
    retriever = RecordingRetriever()
    method = method_with(RaDIO, {"theta": 1.0, "real_word_match": "overlap"},
                         RadioLM({(False, ""): two_sentences(), (True, ""): answer_text}), retriever)
    method.answer_batch([Example("q1", "How old is Rome?", ["753 BC"], "span")])
    assert retriever.queries == [("old Rome? old. big.", 1)]


def test_the_detector_alone_keeps_the_lookahead_or_stops_as_the_code_does(monkeypatch):
    """AttnWeightRAG.inference: RIND below theta, the MLP's flag set: `keep_real_words` gets
    curr_tokens None and the code stops (TypeError). `keep` goes on and records it; `error` stops."""
    monkeypatch.setattr(RaDIO, "detector_scores", lambda self, lookahead: [0.1, 0.3, 0.2])
    script = {(False, ""): two_sentences(finish="stop"),
              (False, " Rome is old. It is big. So the answer is"): cont([" 753", " BC", "."], finish="stop")}
    method = method_with(RaDIO, {"theta": 5.0}, RadioLM(script), RecordingRetriever())
    [answer] = method.answer_batch([Example("q1", "How old is Rome?", ["753 BC"], "span")])
    assert answer.retrievals == 0 and answer.output.startswith("Rome is old. It is big.")
    assert answer.steps[0]["detector"] == {"scores": [0.1, 0.3, 0.2], "fires": True}
    stopping = method_with(RaDIO, {"theta": 5.0, "detector_alone": "error"}, RadioLM(script), RecordingRetriever())
    with pytest.raises(InputError, match="question 'q1': the detector fired where RIND did not"):
        stopping.answer_batch([Example("q1", "How old is Rome?", ["753 BC"], "span")])


def test_radio_settings_default_to_the_code_and_refuse_bad_values():
    s = settings_of(RaDIO, {}, "methods.radio")
    assert {k: s[k] for k in ("rind_units", "attention_pass", "include_diagonal", "normalise", "filter_order",
                              "keep", "query_words", "query_punctuation", "query_duplicates", "top_k",
                              "rind_span", "ptext", "query_weights", "detector_alone")} == {
        "rind_units": "token", "attention_pass": "reencoded", "include_diagonal": True, "normalise": True,
        "filter_order": "after-firing", "keep": "first-sentence", "query_words": "whole-sentence",
        "query_punctuation": "keep", "query_duplicates": "keep", "top_k": 1, "rind_span": "lookahead",
        "ptext": "drop-previous", "query_weights": "attention-tfidf-similarity", "detector_alone": "keep"}
    assert (s["real_word_match"], s["token_pieces"]) == ("token-piece", "llama")
    assert "token_pieces" not in settings_of(RaDIO, {"real_word_match": "overlap"}, "methods.radio")
    with pytest.raises(Exception, match="real_word_match: token-piece filters per-token flags"):
        settings_of(RaDIO, {"filter_order": "before"}, "methods.radio")
    assert RaDIO.inputs(s, "demo", "radio") == {"detector": "data/detectors/radio.safetensors"}
    with pytest.raises(Exception, match="rind_span"):
        settings_of(RaDIO, {"rind_span": "word"}, "methods.radio")


# ---- the query's factors (AttnWeightRAG.keep_real_words) --------------------------------------------------

def test_tfidf_is_read_at_the_units_index_in_the_vectorizers_alphabetical_order():
    """`TfidfVectorizer().fit_transform([all_text]).toarray().flatten()[i]`: terms capital, france, is,
    of, paris, the with counts 1, 1, 1, 1, 2, 1 (norm 3): entry i is the i-th term's, 0 past the end."""
    text = "Paris is the capital of France. Paris"
    assert tfidf_factors(text, 8) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1 / 3, 2 / 3, 1 / 3, 0, 0])
    assert tfidf_factors("a ,", 2) == [0.0, 0.0]  # no term of two characters: nothing to weigh


def test_similarity_is_the_mean_cosine_with_every_unit_unknown_texts_taking_the_mean_vector():
    """`word_embeddings.get(tok, mean_vector)`, the mean of the cosines with every token (itself too)."""
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
    c = 1 / np.sqrt(2)  # cos(a, mean) = cos(b, mean)
    assert similarity_factors(["a", "b", "c."], vectors) == pytest.approx([(1 + 0 + c) / 3, (0 + 1 + c) / 3,
                                                                           (c + c + 1) / 3])
    # a zero vector has no cosine: it counts 0 (the code's NaN)
    assert similarity_factors(["z", "a"], {"z": np.zeros(2), "a": np.array([1.0, 0.0])}) == pytest.approx([0.0, 0.5])


def test_factor_of_a_candidate_is_its_units_tfidf_times_similarity():
    virtual = "Q: Who? Rome is old."
    regions = [(3, 7), (8, 20)]  # "Who?" and "Rome is old."
    assert [virtual[a:b] for a, b in units(virtual, regions)] == ["Who?", "Rome", "is", "old."]
    vectors = {"Rome": np.array([1.0, 0.0]), "old.": np.array([1.0, 0.0]), "Who?": np.array([0.0, 1.0]),
               "is": np.array([0.0, 1.0])}
    # all_text "Who? Rome is old.": terms is, old, rome, who (one each, norm 2) -> .5 each by index
    # Rome (unit 1): cosines with Who?, Rome, is, old. = 0, 1, 0, 1 -> .5; old. (unit 3) the same
    factors = radio_factors(virtual, regions, [(8, 12), (16, 20)], vectors=lambda text: vectors)
    assert factors == pytest.approx([0.5 * 0.5, 0.5 * 0.5])


# ---- the detector's data and training (generate_data.py, MLP_train_data.py, MLP.py) --------------------

def test_entity_cuts_widen_to_chunks_drop_parts_and_skip_the_title_and_the_start():
    """generate_data.py get_entities (find_boundaries, delete_substrings) and the main loop's skips."""
    text = "Ostend Manifesto was written in 1854 by James Buchanan at Ostend."
    names = ["Ostend Manifesto", "1854", "James Buchanan", "Ostend"]

    def extract(t):
        return [Entity(t.index(n), t.index(n) + len(n), n, "X") for n in names]

    # "Ostend" is part of "Ostend Manifesto": dropped; its second occurrence widens to "Ostend." (kept)
    assert cut_entities("Ostend Manifesto", text, extract) == [
        ("1854", text.index("1854")), ("James Buchanan", text.index("James")), ("Ostend.", text.rindex("Ostend"))]


def test_splits_are_a_seeded_shuffle():
    splits = assign_splits(20, 0.15, 0.15, seed=0)
    assert splits.count("test") == 3 and splits.count("valid") == 3 and splits.count("train") == 14
    assert splits == assign_splits(20, 0.15, 0.15, seed=0) != assign_splits(20, 0.15, 0.15, seed=1)


def _record(i, label, split):
    words = ["river", "harbour", "glass", "rope", "mill", "kiln", "town", "fleet"]
    text = " ".join(words[(i + k) % len(words)] for k in range(4 + label * 3))
    return {"title": f"Title {i}", "original_text": text, "texts": [f"{text} @new@" if label else text],
            "label": label, "split": split}


def test_training_keeps_the_best_validation_epoch_and_reports_the_held_out_metrics(tmp_path):
    from adaptive_rag.methods.radio.detector_train import train_radio

    records = [_record(i, i % 2, "train") for i in range(24)] + [_record(i, i % 2, "valid") for i in range(6)] + \
              [_record(i, i % 2, "test") for i in range(6)]
    detector = train_radio(records, "tiny", {"top_k": 4}, seed=0, epochs=3)
    metrics = detector.metrics
    assert len(metrics["valid"]["accuracy_per_epoch"]) == 3 and 1 <= metrics["valid"]["best_epoch"] <= 3
    assert metrics["test"]["n"] == 6 and 0 <= metrics["test"]["accuracy"] <= 1 and 0 <= metrics["test"]["auc"] <= 1
    assert detector.header["features"] == {"train": "tfidf-pca2", "run": "token-ids"}
    again = train_radio(records, "tiny", {"top_k": 4}, seed=0, epochs=3)
    assert again.scores(np.array([[1.0, 2.0]])) == detector.scores(np.array([[1.0, 2.0]]))  # seeded
    with pytest.raises(InputError, match="the training passages hold 24 labelled 0 and 0 labelled 1"):
        train_radio([{**r, "label": 0} for r in records], "tiny", {}, seed=0)


def test_token_ranks_put_each_greedy_token_first_after_the_tokens_before_it(tiny_model_dir):
    """`token_ranks` row k is the distribution after the prompt and ids[:k + 1]: greedy decoding chose
    ids[k + 1] there, so its rank is 0 (the reference's top-k check reads the same distributions)."""
    from adaptive_rag.lm.base import Prompt
    from adaptive_rag.lm.hf import HFModel

    lm = HFModel(tiny_model_dir, batch_size=1)
    prompt = Prompt(text="Idris Penhallow was born in")
    [c] = lm.generate([prompt], 6)
    ids = c.token_ids
    assert [lm.token_ranks(prompt, ids, ids[k + 1])[k] for k in range(len(ids) - 1)] == [0] * (len(ids) - 1)
    ranks = lm.token_ranks(prompt, ids, 5)
    assert len(ranks) == len(ids) and all(0 <= r < len(lm.tokenizer) for r in ranks)


def test_data_from_the_tiny_llama_labels_passages_by_rewritten_entities(tiny_model_dir):
    """generate_data.py on a passage with the tiny random Llama: each entity's next token is sought in the
    top-k; top_k = the vocabulary makes every entity rewritten after one token (label 1); a passage
    without an entity gets MLP_train_data.py's fallback text and label 0."""
    from adaptive_rag.data.corpus import Passage
    from adaptive_rag.lm.hf import HFModel
    from adaptive_rag.methods.radio.detector_data import passage_records

    lm = HFModel(tiny_model_dir, batch_size=1)
    passage = Passage("7", "Carrowmere", "Idris Penhallow was born in Carrowmere in 1712. He made glass.")

    def extract(t):
        return [Entity(t.index(n), t.index(n) + len(n), n, "X") for n in ("Idris Penhallow", "1712") if n in t]

    vocab = len(lm.tokenizer)
    [every] = passage_records(lm, [passage], top_k=vocab, window=0, prompt_format="chat", extract=extract)
    assert every["label"] == 1 and every["original_entities"] == [["1712.", passage.text.index("1712")]]
    assert every["texts"][0].startswith("Idris Penhallow was born in Carrowmere in @") and len(every["new_entities"]) == 1
    [none] = passage_records(lm, [passage], top_k=1, window=0, prompt_format="raw",
                             extract=lambda t: [])  # no entity: the fallback text, label 0
    assert none["label"] == 0 and none["texts"] == [f"Please introduce the Carrowmere:{none['original_text']}"]
    assert every["original_text"] == "Idris Penhallow was born in Carrowmere in 1712. He made glass."


# ---- the workflow ------------------------------------------------------------------------------------------

@pytest.mark.slow  # Snakemake in a scratch copy of the workflow
def test_workflow_trains_the_detector_and_runs_radio_on_the_tiny_llama(tiny_llama_dir, tmp_path):
    from conftest import copy_workflow, edit_params, read_jsonl, snakemake, tiny_params

    copy_workflow(tmp_path)

    def edit(data):
        detectors = data["detectors"]
        tiny_params(tiny_llama_dir)(data)
        # an entity's next token in the top 150 of 602 after one step: passages get both labels
        data["detectors"] = {"radio": {**detectors["radio"], "max_passages": 24, "top_k": 150, "window": 0,
                                       "epochs": 2}}
        # RIND never fires, so every look-ahead asks the trained detector (read from the run's inputs)
        data["methods"]["radio"].update(retriever=None, theta=1.0e6)
        data["datasets"]["demo"]["sample"]["size"] = 2
    edit_params(tmp_path, edit)
    snakemake(tmp_path, "data/scores/demo/radio.json")
    metrics = json.loads((tmp_path / "data" / "detectors" / "radio.metrics.json").read_text())
    assert metrics["header"]["model"] == "tiny" and metrics["metrics"]["data"]["records"] == 24
    assert 1 <= metrics["metrics"]["valid"]["best_epoch"] <= 2 and metrics["metrics"]["test"]["n"] == 4
    records = read_jsonl(tmp_path / "data" / "detectors" / "radio-data.jsonl")
    assert [sum(r["split"] == s for r in records) for s in ("train", "valid", "test")] == [16, 4, 4]
    traces = read_jsonl(tmp_path / "data" / "runs" / "demo" / "radio" / "trace.jsonl")
    steps = [step for trace in traces for step in trace["steps"] if step["phase"] == "look-ahead" and step["text"].strip()]
    assert len(traces) == 2 and steps and all(len(step["detector"]["scores"]) == len(step["tokens"]) for step in steps)


# ---- settings in params.yaml ------------------------------------------------------------------------------

def _params_without_white_box_methods():
    import yaml

    from conftest import REPO

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["model"].update(backend="api", api={"base_url": "http://127.0.0.1:9/v1", "model": "x"})
    data["methods"] = {name: data["methods"][name] for name in ("wo-rag", "sr-rag")}
    for key in ("ablations", "detectors", "complexity_classifier"):
        data.pop(key)
    data["experiment"]["methods"] = ["wo-rag", "sr-rag"]
    return data


def test_check_params_refuses_radio_on_a_model_without_attentions_and_entropies():
    from adaptive_rag.config import parse_params
    from adaptive_rag.errors import ConfigError

    data = _params_without_white_box_methods()
    parse_params(data)
    data["methods"]["radio"] = {"theta": 1.0}
    with pytest.raises(ConfigError, match="methods.radio: method type 'radio' needs attentions, entropy, which "
                                          "model.backend 'api' cannot provide"):
        parse_params(data)


@pytest.mark.parametrize("change, message", [
    ({"valid_fraction": 0.5, "test_fraction": 0.5},
     "detectors.radio.test_fraction: valid_fraction \\+ test_fraction is 1; it must stay below 1"),
    ({"test_fraction": 0}, "detectors.radio.test_fraction: expected a fraction between 0 and 1"),
    ({"top_k": 0}, "detectors.radio.top_k"),
    ({"epochs": "ten"}, "detectors.radio.epochs"),
])
def test_detector_settings_name_the_key(change, message):
    import yaml

    from adaptive_rag.config import parse_params
    from adaptive_rag.errors import ConfigError
    from conftest import REPO

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    parsed = parse_params(data).detectors.radio
    assert (parsed.top_k, parsed.window, parsed.epochs, parsed.lr, parsed.batch_size) == (4, 16, 10, 0.001, 32)
    data["detectors"]["radio"].update(change)
    with pytest.raises(ConfigError, match=message):
        parse_params(data)
