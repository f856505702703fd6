"""Adaptive Retrieval (Mallen et al. 2023, Section 6.1): the popularity rule on hand-computed cases, the
per-group calls, the popularity file's errors, the threshold search (the reference notebook
AlexTMallen/adaptive-retrieval adaptive-retrieval.ipynb, cell 3: `thresh_idx = argmax(...)` over
histogram bins of log(s_pop)), a calibrated run, and the workflow on the demo with the tiny Llama."""

from __future__ import annotations

import json
import math

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError, InputError
from adaptive_rag.methods.adaptive_retrieval.adaptive_retrieval import (AdaptiveRetrieval, best, cut_places, load_popularity,
                                                     retrieves, search)
from adaptive_rag.methods.base import Context
from adaptive_rag.runner import method_inputs

from conftest import (SCRIPTED_EXEMPLARS, RecordingRetriever, ScriptedLM, cont, copy_workflow, read_jsonl,
                      settings_of, snakemake)

RAG = cont([" So", " the", " answer", " is", " Lyon", "."], finish="stop")
BARE = cont([" So", " the", " answer", " is", " Paris", "."], finish="stop")
SCRIPT = {(True, ""): RAG, (False, ""): BARE}


def build(tmp_path, popularity: dict, params: dict | None = None, calibration=None, settings=None):
    """The method over a scripted model and a recording retriever, its settings read from `params` (or
    given as read), its popularity file written from `popularity`."""
    path = tmp_path / "popularity.json"
    path.write_text(json.dumps(popularity))
    inputs = {"popularity": path, **({"calibration": calibration} if calibration else {})}
    lm, retriever = ScriptedLM(SCRIPT), RecordingRetriever()
    ctx = Context(lm=lm, exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50,
                  retriever=retriever, answer_fallback_tokens=5, inputs=inputs)
    if settings is None:
        settings = settings_of(AdaptiveRetrieval, params or {"threshold": 1000}, "methods.adaptive-retrieval")
    return AdaptiveRetrieval(settings, ctx), lm, retriever


def examples(*ids):
    return [Example(i, f"Where was {i} born?", ["Lyon"], "span") for i in ids]


def test_section_6_1_retrieves_below_the_popularity_threshold_only():
    """Below the threshold: retrieval; at or above it the model's own memory (the notebook's bins from
    `thresh_idx` up are answered by the parametric run)."""
    assert retrieves(999.0, 1000.0) and retrieves(0.0, 1.0)
    assert not retrieves(1000.0, 1000.0) and not retrieves(5000.0, 1000.0)


def test_less_popular_questions_retrieve_once_with_the_question_the_others_answer_bare(tmp_path):
    method, lm, retriever = build(tmp_path, {"a": 50, "b": 5000, "c": 10}, {"threshold": 1000, "top_k": 2})
    answers = method.answer_batch(examples("a", "b", "c"))
    assert retriever.queries == [("Where was a born?", 2), ("Where was c born?", 2)]
    assert lm.batches == [2, 1]  # one generate call per group, retrieving questions first
    assert [a.output for a in answers] == ["So the answer is Lyon.", "So the answer is Paris.",
                                           "So the answer is Lyon."]
    assert [a.retrievals for a in answers] == [1, 0, 1] and [len(a.passages) for a in answers] == [2, 0, 2]
    assert [(s["popularity"], s["retrieve"], s["threshold"]) for s in (a.steps[0] for a in answers)] == [
        (50.0, True, 1000.0), (5000.0, False, 1000.0), (10.0, True, 1000.0)]
    assert answers[1].counters() == {"retrievals": 0, "llm_calls": 1, "detections": 0, "generated_tokens": 6,
                                     "sentences": 1}


def test_by_default_a_retrieving_question_reads_the_top_passage_as_the_reference_does(tmp_path):
    """run_model.py puts `retrieval_dict[query]["ctxs"][0]` before `Q: {question} A:`: one passage."""
    method, lm, retriever = build(tmp_path, {"a": 50}, {"threshold": 1000})
    [answer] = method.answer_batch(examples("a"))
    assert retriever.queries == [("Where was a born?", 1)] and len(answer.passages) == 1


def test_in_sugars_one_shot_style_the_answer_is_the_completion_of_a_q_a_prompt(tmp_path):
    """`prompt_style: qa-oneshot` (SUGAR's tables): the first exemplar as `Q: ... A: ...`, the passage above
    the question, stop at a newline or "Q:", 32 tokens, no answer fallback: the completion is the answer."""
    script = {(True, ""): cont([" Lyon"], finish="stop"), (False, ""): cont([" Paris"], finish="stop")}
    method, _, retriever = build(tmp_path, {"a": 50, "b": 5000}, {"threshold": 1000, "prompt_style": "qa-oneshot"})
    method.ctx.lm = lm = ScriptedLM(script)
    answers = method.answer_batch(examples("a", "b"))
    assert [a.output for a in answers] == ["Lyon", "Paris"] and all(a.direct for a in answers)
    assert [(c["max_new_tokens"], c["stop"]) for c in lm.calls] == [(32, ("\n", "Q:"))] * 2
    prompt = lm.calls[0]["prompt"].readable()
    assert "Q: Who wrote Hamlet?" in prompt and "A: Shakespeare" in prompt and "passage 1.1" in prompt
    assert "Hamlet was written by" not in prompt  # no chain of thought in the one-shot demonstration


def test_a_question_without_popularity_is_refused_naming_the_file_and_question(tmp_path):
    method, _, _ = build(tmp_path, {"a": 50})
    with pytest.raises(InputError, match=r"popularity\.json: no popularity for question 'b' \(and 1 more\)"):
        method.answer_batch(examples("a", "b", "c"))


def test_the_popularity_file_is_checked_when_read(tmp_path):
    path = tmp_path / "pop.json"
    with pytest.raises(InputError, match=r"pop\.json: missing; methods of type adaptive-retrieval read"):
        load_popularity(path)
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"pop\.json: expected a JSON object mapping each question id"):
        load_popularity(path)
    path.write_text('{"q1": -3}')
    with pytest.raises(InputError, match=r"question 'q1': expected a number of page views >= 0, got -3"):
        load_popularity(path)
    path.write_text('{"q1": 12, "q2": 3.5}')
    assert load_popularity(path) == {"q1": 12.0, "q2": 3.5}


def test_the_popularity_file_is_a_declared_input_and_a_missing_one_says_what_to_provide(tmp_path, monkeypatch):
    from adaptive_rag.config import parse_params

    settings = settings_of(AdaptiveRetrieval, {"threshold": 10}, "m")
    assert AdaptiveRetrieval.inputs(settings, "nq", "ar") == {"popularity": "data/popularity/nq.json"}
    calibrated = settings_of(AdaptiveRetrieval, {}, "m")
    assert calibrated["threshold"] == "calibrated" and calibrated["calibration_cuts"] == "histogram"
    assert AdaptiveRetrieval.inputs(calibrated, "nq", "ar") == {
        "calibration": "data/calibration/nq-calib/ar.json", "popularity": "data/popularity/nq.json"}

    from conftest import REPO
    import yaml

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["methods"]["ar"] = {"type": "adaptive-retrieval", "threshold": 10}
    monkeypatch.chdir(tmp_path)
    params = parse_params(data, "params.yaml")
    with pytest.raises(InputError, match=r"data/popularity/demo\.json: missing; methods\.ar reads it as its "
                                         r"popularity \(provide a JSON object mapping each question id"):
        method_inputs(params, "demo", "ar")


def test_the_corpus_frequency_proxy_is_a_file_the_workflow_makes_and_a_missing_one_names_its_target(
        tmp_path, monkeypatch):
    from adaptive_rag.config import parse_params

    settings = settings_of(AdaptiveRetrieval, {"popularity_proxy": "corpus-frequency"}, "m")
    assert settings["popularity"] == "data/popularity/corpus-frequency/{dataset}.json"
    assert AdaptiveRetrieval.inputs(settings, "nq", "ar") == {
        "calibration": "data/calibration/nq-calib/ar.json",
        "corpus_frequency": "data/popularity/corpus-frequency/nq.json"}
    assert AdaptiveRetrieval.row_note(settings) == "popularity: corpus-frequency, not page views"
    assert AdaptiveRetrieval.row_note(settings_of(AdaptiveRetrieval, {}, "m")) is None
    with pytest.raises(ConfigError, match=r"methods\.m\.popularity: a page-view file and popularity_proxy: "
                                          r"corpus-frequency exclude each other; remove one of the two"):
        settings_of(AdaptiveRetrieval, {"popularity_proxy": "corpus-frequency", "popularity": "p.json"}, "methods.m")
    with pytest.raises(ConfigError, match="popularity_proxy"):
        settings_of(AdaptiveRetrieval, {"popularity_proxy": "page-views"}, "methods.m")

    from conftest import REPO
    import yaml

    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["methods"]["ar"] = {"type": "adaptive-retrieval", "threshold": 10, "popularity_proxy": "corpus-frequency"}
    monkeypatch.chdir(tmp_path)
    params = parse_params(data, "params.yaml")
    with pytest.raises(InputError, match=r"^data/popularity/corpus-frequency/demo\.json: missing; methods\.ar reads "
                                         r"it as its corpus_frequency \(snakemake --cores all "
                                         r"data/popularity/corpus-frequency/demo\.json makes it\)$"):
        method_inputs(params, "demo", "ar")


def test_the_proxy_enters_the_run_key_and_the_calibration_only_when_set():
    from adaptive_rag.config import parse_params
    from adaptive_rag.methods.adaptive_retrieval.adaptive_retrieval import calibrated_settings
    from adaptive_rag.progress import digest

    from conftest import REPO
    import yaml

    data = yaml.safe_load((REPO / "params.yaml").read_text())

    def key(**extra):
        data["methods"]["ar"] = {"type": "adaptive-retrieval", "threshold": 10, **extra}
        return digest(parse_params(data, "params.yaml").run_settings("demo", "ar"))

    assert key() == key(popularity_proxy="none") != key(popularity_proxy="corpus-frequency")
    plain = settings_of(AdaptiveRetrieval, {}, "m")
    assert "popularity_proxy" not in calibrated_settings(plain)  # files calibrated before the setting still serve
    proxy = settings_of(AdaptiveRetrieval, {"popularity_proxy": "corpus-frequency"}, "m")
    assert calibrated_settings(proxy)["popularity_proxy"] == "corpus-frequency"  # a cut in passages, not views


def test_a_proxy_file_missing_a_question_says_to_rebuild_it(tmp_path):
    settings = settings_of(AdaptiveRetrieval, {"threshold": 3, "popularity_proxy": "corpus-frequency"}, "m")
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({"a": 2}))
    ctx = Context(lm=ScriptedLM(SCRIPT), exemplars=SCRIPTED_EXEMPLARS, prompt_format="raw", max_new_tokens=50,
                  retriever=RecordingRetriever(), answer_fallback_tokens=5, inputs={"corpus_frequency": path})
    method = AdaptiveRetrieval(settings, ctx)
    [answer] = method.answer_batch(examples("a"))
    assert answer.retrievals == 1 and answer.steps[0]["popularity"] == 2.0
    with pytest.raises(InputError, match=r"demo\.json: no popularity for question 'b'; it was computed for other "
                                         r"questions: delete it and rerun `snakemake --cores all .*demo\.json`"):
        method.answer_batch(examples("b"))


def test_settings_refuse_a_negative_or_named_threshold():
    for bad in (-1, "median", True):
        with pytest.raises(ConfigError, match="methods.m.threshold: expected a number of monthly page views"):
            settings_of(AdaptiveRetrieval, {"threshold": bad}, "methods.m")
    with pytest.raises(ConfigError, match="calibration_cuts"):
        settings_of(AdaptiveRetrieval, {"calibration_cuts": "quantiles"}, "methods.m")


# popularity 10, 100, 1000, 10000; Acc without retrieval 0 0 1 1, with retrieval 1 1 0 1
POP = [10.0, 100.0, 1000.0, 10000.0]
ACC = [(0.0, 1.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]


def test_every_value_cut_keeps_the_best_routing():
    """Cut at 10: none retrieves, Acc (0+0+1+1)/4 = 0.5; at 100: 0.75; at 1000 (the two least popular
    retrieve): (1+1+1+1)/4 = 1.0; at 10000 and above: (1+1+0+1)/4 = 0.75."""
    places = cut_places(POP, "values")
    assert places == [10.0, 100.0, 1000.0, 10000.0, math.nextafter(10000.0, math.inf)]
    rows = search(POP, ACC, places)
    assert [row["acc"] for row in rows] == [0.5, 0.75, 1.0, 0.75, 0.75]
    assert [row["retrieved"] for row in rows] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert best(rows) == 1000.0


def test_histogram_cuts_are_the_notebooks_bin_edges_and_ties_go_to_the_first():
    """log10 popularity spans 1..4: ten bins of width 0.3, left edges 10^(1 + 0.3 k). Edges k = 4, 5, 6
    (158.5, 316.2, 631.0) all put exactly the two least popular questions below: Acc 1.0, a tie the
    notebook's argmax breaks to the first, the smallest cut (fewest retrievals first, then smaller)."""
    places = cut_places(POP, "histogram")
    assert len(places) == 11 and places[0] == 10.0 and places[-1] > 10000.0
    assert places[1:10] == pytest.approx([10 ** (1 + 0.3 * k) for k in range(1, 10)])
    assert best(search(POP, ACC, places)) == pytest.approx(10 ** 2.2)


def test_calibration_answers_both_ways_and_records_both_cut_rules(tmp_path):
    method, lm, retriever = build(tmp_path, {"a": 10, "b": 100, "c": 1000, "d": 10000},
                                  settings=AdaptiveRetrieval.calibration_settings(settings_of(AdaptiveRetrieval, {}, "m")))
    rows = method.calibrate_batch(examples("a", "b", "c", "d"))
    assert lm.batches == [4, 4] and len(retriever.queries) == 4
    # the scripted bare answer (Paris) is wrong, the one with passages (Lyon) right
    assert rows[0] == {"id": "a", "popularity": 10.0, "none": 0.0, "single": 1.0}
    record = method.calibration_record(rows)
    assert set(record["thresholds"]) == {"histogram", "values"}
    assert record["thresholds"]["values"] == math.nextafter(10000.0, math.inf)  # all retrieve: Acc 1.0
    assert "threshold" not in record["settings"] and "popularity" not in record["settings"]


def test_a_calibrated_run_reads_its_rule_and_refuses_the_calibration_questions_and_other_settings(tmp_path):
    settings = settings_of(AdaptiveRetrieval, {"calibration_cuts": "values"}, "m")
    path = tmp_path / "calibration.json"
    from adaptive_rag.methods.adaptive_retrieval.adaptive_retrieval import calibrated_settings

    path.write_text(json.dumps({"ids": ["z"], "settings": calibrated_settings(settings),
                                "thresholds": {"histogram": 158.5, "values": 1000.0}}))
    method, _, _ = build(tmp_path, {"a": 999, "z": 1}, settings=settings, calibration=path)
    assert method.threshold == 1000.0
    [answer] = method.answer_batch(examples("a"))
    assert answer.retrievals == 1
    with pytest.raises(InputError, match="questions z are in the calibration split"):
        method.answer_batch(examples("z"))
    method, _, _ = build(tmp_path, {"a": 999}, settings={**settings, "calibration_cuts": "histogram"},
                         calibration=path)
    assert method.threshold == 158.5
    with pytest.raises(InputError, match=r"calibrated with top_k 1, but this run has 5"):
        build(tmp_path, {"a": 999}, settings={**settings, "top_k": 5}, calibration=path)


@pytest.mark.slow
def test_workflow_calibrates_on_demo_calib_and_routes_each_question_by_its_popularity(tiny_llama_dir, tmp_path):
    """The calibrate step answers demo-calib both ways with the popularity file as an input; the run on
    demo-small retrieves exactly for the questions below the calibrated threshold. The same with
    `popularity_proxy: corpus-frequency`, whose files the `popularity` rule writes for the run's split and
    its calibration split from the corpus step's collection; the CLI step with its defaults writes the
    same file."""
    from adaptive_rag.methods.adaptive_retrieval.corpus_frequency import corpus_frequency
    from conftest import CLI, edit_params, run
    from test_workflow import tiny_params

    copy_workflow(tmp_path)
    demo = json.loads((tmp_path / "data/demo/hotpot_demo.json").read_text())
    (tmp_path / "data/popularity").mkdir(parents=True)
    (tmp_path / "data/popularity/demo.json").write_text(json.dumps({r["_id"]: 10 ** (i % 5) for i, r in
                                                                   enumerate(demo)}))

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["datasets"]["demo-small"]["sample"]["size"] = 3
        data["datasets"]["demo-calib"]["sample"].update(size=3, skip=3)
        data["methods"]["adaptive-retrieval"] = {"calibration_dataset": "demo-calib", "calibration_cuts": "values",
                                                 "popularity": "data/popularity/demo.json"}
        data["methods"]["ar-proxy"] = {"type": "adaptive-retrieval", "popularity_proxy": "corpus-frequency",
                                       "calibration_dataset": "demo-calib", "calibration_cuts": "values"}
    edit_params(tmp_path, edit)
    snakemake(tmp_path, *(f"data/runs/demo-small/{m}/predictions.jsonl" for m in ("adaptive-retrieval", "ar-proxy")))
    made = tmp_path / "data/popularity/corpus-frequency"
    for dataset in ("demo-small", "demo-calib"):
        split = read_jsonl(tmp_path / f"data/splits/{dataset}.jsonl")
        records, passages = corpus_frequency([(r["id"], r["question"]) for r in split], tmp_path / "data/corpus/demo")
        assert passages == 344
        assert json.loads((made / f"{dataset}.json").read_text()) == {r["id"]: r["popularity"] for r in records}
        assert read_jsonl(made / f"{dataset}.entities.jsonl") == records
    for method, path in [("adaptive-retrieval", "data/popularity/demo.json"),
                         ("ar-proxy", "data/popularity/corpus-frequency/demo-small.json")]:
        calibration = json.loads((tmp_path / f"data/calibration/demo-calib/{method}.json").read_text())
        assert len(calibration["per_question"]) == 3 and set(calibration["thresholds"]) == {"histogram", "values"}
        assert calibration["settings"].get("popularity_proxy") == ("corpus-frequency" if method == "ar-proxy" else None)
        threshold = calibration["thresholds"]["values"]
        popularity = json.loads((tmp_path / path).read_text())
        records = read_jsonl(tmp_path / f"data/runs/demo-small/{method}/predictions.jsonl")
        assert len(records) == 3
        for record in records:
            assert record["counters"]["retrievals"] == int(popularity[record["id"]] < threshold)
    (made / "demo-small.json").unlink()
    run([*CLI, "popularity", "--dataset", "demo-small"], tmp_path)
    assert json.loads((made / "demo-small.json").read_text()) == popularity
