"""The trace explorer's records and pages (reports/trace_view.py, reports/explorer.py), from hand-written
run files: shading only where a trace holds the trigger's score, units placed on the text or listed,
passages with a gold answer marked, the size cap per run and what the page says beyond it. The page in a
real browser, on the tiny-model workflow, is tests/test_explorer_browser.py."""

from __future__ import annotations

import json
import re

import pytest

from adaptive_rag.ask import Asked
from adaptive_rag.errors import InputError
from adaptive_rag.reports.explorer import (PAGE_BYTES, RUN_BYTES, explorer_data, read_run, run_cap, write_asked,
                                           write_explorer)
from adaptive_rag.reports.trace_view import question_view, step_view

FIRED = {"phase": "look-ahead", "text": "Paris is big. John Hockin was born in 1720.", "kept": 14, "sentence": 1,
         "fired": "John Hockin was born in 1720.", "finish": "eos", "tokens": [["Paris", 0.9]],
         "detection": {"units": ["John", "H", "ockin", "was", "born", "in", "1720", "."],
                       "scores": [0.471, 0.4404, 0.0512, 0.0, 0.0307, 0.0, 0.2575, 0.0], "flagged": [0, 1]},
         "query": "Hockin born Velmora", "retrieved": ["100", "7"]}


def run_dir(tmp_path, method, questions, method_type=None, settings=None):
    """A run directory as the generate step writes it, for `questions` (id, gold, prediction, steps)."""
    d = tmp_path / "runs" / "demo" / method
    d.mkdir(parents=True)
    predictions, traces = [], []
    for qid, gold, prediction, steps in questions:
        retrieved = [p for s in steps for p in s.get("retrieved", [])]
        predictions.append({"id": qid, "question": f"Where was {qid} born?", "answers": [gold], "answer_type": "span",
                            "prediction": prediction, "answer_found": True, "output": f"So the answer is {prediction}",
                            "retrievals": sum("retrieved" in s for s in steps), "counters": {},
                            "retrieved_ids": retrieved})
        traces.append({"id": qid, "prompt": "p", "passages": [{"id": p, "title": f"T{p}", "score": 1.0}
                                                               for p in retrieved], "output": prediction,
                       "steps": steps, "counters": {"retrievals": 1, "generated_tokens": 9}})
    (d / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    (d / "trace.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    (d / "provenance.json").write_text(json.dumps({
        "method": method, "method_type": method_type or method, "dataset": "demo",
        "params": {"method": {"settings": settings or {"theta": 0.3, "top_k": 3}}}}))
    return d


def collection(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    rows = [{"id": "100", "title": "Aldous Hockin", "text": "Born in Velmora, he founded the glassworks."},
            {"id": "7", "title": "Hennagh", "text": "A town by the river."}]
    (d / "docs00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_a_detection_is_placed_on_the_fired_sentence_with_the_recorded_scores():
    view = step_view(FIRED, "Where was the person born?", "")
    [detection] = view["detections"]
    assert detection["fired"] and detection["sentence"] is None
    text = FIRED["text"]
    assert [r["score"] for r in detection["units"]] == FIRED["detection"]["scores"]
    assert [r["flagged"] for r in detection["units"]] == [True, True] + [False] * 6
    placed = [(text[a:b], detection["units"][k]["score"]) for a, b, k in detection["marks"]]
    assert placed == list(zip(["John", "H", "ockin", "was", "born", "in", "1720", "."], FIRED["detection"]["scores"]))
    assert all(a >= text.index("John") for a, _, _ in detection["marks"])  # inside the fired sentence
    assert view["fired_span"] == [14, len(text)]
    assert view["query_words"] == [["Hockin", "g"], ["born", "qg"], ["Velmora", ""]]
    assert view["retrieved"] == ["100", "7"]


def test_units_not_found_in_the_text_are_listed_not_placed_and_no_step_is_shaded_without_a_score():
    step = {**FIRED, "detection": {**FIRED["detection"], "units": ["Jon", *FIRED["detection"]["units"][1:]]}}
    view = step_view(step, "q", "")
    assert "marks" not in view["detections"][0] and len(view["detections"][0]["units"]) == 8
    plain = step_view({"phase": "generate", "text": "Paris.", "tokens": [["Paris", 0.5], [".", 0.9]]}, "q", "")
    assert "detections" not in plain and plain["gauges"] == [] and plain["text"] == "Paris."


def test_sentences_judged_before_the_fired_one_are_shaded_from_where_they_start():
    step = {**FIRED, "judged": [{"sentence": 0, "start": 0, "units": ["Paris", "is", "big", "."],
                                 "scores": [0.2, 0.0, 0.1, 0.0], "flagged": []}]}
    passed, fired = step_view(step, "q", "")["detections"]
    assert (passed["fired"], passed["sentence"], fired["fired"]) == (False, 0, True)
    assert [m[:2] for m in passed["marks"]] == [[0, 5], [6, 8], [9, 12], [12, 13]]
    assert fired["marks"][0][:2] == [14, 18]  # "John", after them


def test_per_step_scores_are_shown_against_their_thresholds():
    seakr = step_view({"phase": "direct", "text": "x", "u": 1.2, "delta": 0.5, "kept": False}, "q", "")
    assert seakr["gauges"] == [{"name": "U (EigenScore)", "value": 1.2, "threshold": 0.5,
                                "verdict": "uncertain: retrieve"}]
    sugar = step_view({"phase": "sugar", "signal": "se", "value": 0.3, "thresholds": [0.2, None], "branch": "single",
                       "samples": ["a", "b"]}, "q", "")
    assert sugar["gauges"][0]["verdict"] == "route: single" and ["samples", '["a", "b"]'] in sugar["other"]
    dior = step_view({"phase": "question-attribution", "tokens": ["Where", " born"], "attribution": [0.25, 0.75]}, "q", "")
    assert dior["attribution"] == [["Where", 0.25], [" born", 0.75]]


def test_the_page_holds_every_run_with_gold_passages_marked(tmp_path):
    dragin = run_dir(tmp_path, "dragin", [("q1", "Velmora", "Velmora", [FIRED]), ("q2", "Paris", "Rome", [])])
    wo = run_dir(tmp_path, "wo-rag", [("q1", "Velmora", "Hennagh", [{"phase": "generate", "text": "Hennagh"}]),
                                      ("q2", "Paris", "Paris", [{"phase": "generate", "text": "Paris"}])])
    out = tmp_path / "page.html"
    data = write_explorer([dragin, wo], out, collection(tmp_path))
    assert (data["start"], data["end"], data["total"]) == (1, 2, 2)
    assert [r["method"] for r in data["runs"]] == ["dragin", "wo-rag"]
    assert data["gold_passages"] == {"q1": ["100"]}  # "Velmora" is in passage 100's text
    assert data["passages"]["100"]["title"] == "Aldous Hockin"
    assert [q["em"] for q in data["runs"][0]["questions"]] == [1.0, 0.0]
    assert data["runs"][0]["thresholds"] == {"theta": 0.3}
    page = out.read_text()
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    embedded = json.loads(re.search(r'<script id="explorer-data" type="application/json">(.*?)</script>', page,
                                    re.S).group(1).replace("<\\/", "</"))
    assert embedded["runs"][0]["questions"][0]["steps"][0]["detections"][0]["units"][0]["score"] == 0.471


def test_a_run_over_its_cap_pages_and_the_page_says_where_the_rest_is(tmp_path):
    many = [(f"q{i}", "Velmora", "x", [FIRED]) for i in range(30)]
    run = read_run(run_dir(tmp_path, "dragin", many))
    one = len(json.dumps(explorer_data([run], {}, 0, cap=10**9)["runs"][0]["questions"][0]))
    data = explorer_data([run], {}, 0, cap=5 * one + 50)
    assert data["end"] == 5 and data["runs"][0]["bytes"] <= 5 * one + 50
    rest = explorer_data([run], {}, 5, cap=5 * one + 50)
    assert (rest["start"], rest["end"]) == (6, 10)
    out = tmp_path / "p.html"
    write_explorer([run.directory], out)  # the real cap: all 30 fit
    assert "This page holds questions" not in out.read_text()
    from adaptive_rag.reports.explorer import next_page_note
    note = next_page_note(data, "adaptive-rag explorer --runs R --out F")
    assert "questions 1–5 of 30" in note and "dragin/trace.jsonl" in note and "--start 6" in note
    assert run_cap(6) == RUN_BYTES and run_cap(10) == PAGE_BYTES // 10


def test_bad_run_directories_are_refused_in_one_line(tmp_path):
    d = run_dir(tmp_path, "dragin", [("q1", "Velmora", "x", [])])
    (d / "trace.jsonl").unlink()
    with pytest.raises(InputError, match=r"trace.jsonl: missing; the explorer reads a run directory"):
        read_run(d)
    other = run_dir(tmp_path, "flare", [("q1", "Velmora", "x", [])])
    provenance = json.loads((other / "provenance.json").read_text())
    (other / "provenance.json").write_text(json.dumps({**provenance, "dataset": "hotpot"}))
    good = run_dir(tmp_path / "b", "dragin", [("q1", "Velmora", "x", [])])
    with pytest.raises(InputError, match="the explorer shows the runs of one dataset"):
        write_explorer([good, other], tmp_path / "x.html")


def test_ask_writes_the_same_view_for_its_one_question(tmp_path):
    prediction = {"id": "ask", "question": "Where was Hockin born?", "answers": [], "answer_type": "span",
                  "prediction": "Velmora", "answer_found": True, "output": "So the answer is Velmora", "retrievals": 1}
    trace = {"id": "ask", "passages": [{"id": "100", "title": "Aldous Hockin", "score": 1}], "steps": [FIRED],
             "counters": {"retrievals": 1}}
    asked = Asked(params="params.yaml", dataset="demo", method="dragin", method_type="dragin", settings={"theta": 0.3},
                  exemplars="", template="", model_dir=None, prompt_format="chat", model={}, index=None, inputs={},
                  call_cache=None, prediction=prediction, trace=trace,
                  passages={"100": {"title": "Aldous Hockin", "text": "Born in Velmora."}})
    write_asked(asked, tmp_path / "ask.html")
    page = (tmp_path / "ask.html").read_text()
    data = json.loads(re.search(r'type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["runs"][0]["questions"][0] == question_view(prediction, trace)
    assert data["passages"]["100"] == {"title": "Aldous Hockin", "text": "Born in Velmora."}
