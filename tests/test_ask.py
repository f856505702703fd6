"""`adaptive-rag ask`: one method on one question, on the tiny Llama in a workflow copy whose model and
BM25 index sit where the workflow builds them. One method of each family (the greedy loop, sampling,
trained detectors) is shown step by step and as its trace record; its answer is the one `generate`
writes for the same question; a missing model, index or detector names the target that builds it.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from adaptive_rag.cli import main
from adaptive_rag.evaluation.answer import predicted
from adaptive_rag.reports.steps import WIDTH, StepPrinter, cache_line, visible

from conftest import copy_workflow, edit_params, read_jsonl, tiny_detectors

QUESTION = "In which town was the founder of the Corrigall Rope Walk born?"
CACHE = "data/cache/calls.sqlite"


def make_workspace(root, tiny_model_dir):
    """A workflow copy with the tiny Llama built at data/models/tiny and short generations; methods with
    thresholds given as numbers (SeaKR's delta), so that no calibration file is needed."""
    copy_workflow(root)

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_model_dir))
        data["generation"].update(max_new_tokens=12, threads=1, batch_size=2, cache=CACHE)
        data["datasets"]["demo"]["sample"]["size"] = 3
        data["methods"]["seakr"] = {"k": 3, "delta": -1.0e9, "max_steps": 2, "max_docs": 2, "max_new_tokens": None}
        data["methods"]["dior"] = {"top_k": 2, "max_retrievals": 1, "early_threshold": 0.0, "realtime_tokens": "all",
                                   "similarity": "lm-embeddings"}

    edit_params(root, edit)
    shutil.copytree(tiny_model_dir, root / "data/models/tiny")
    return root


@pytest.fixture(scope="module")
def workspace(tiny_model_dir, tmp_path_factory):
    """The model built, no index."""
    return make_workspace(tmp_path_factory.mktemp("ask"), tiny_model_dir)


@pytest.fixture(scope="module")
def indexed(tiny_model_dir, tmp_path_factory):
    """The model built, and the demo corpus's BM25 index at data/index/demo/bm25 (Anserini runs in java)."""
    from adaptive_rag.data.corpus import convert_to_collection
    from adaptive_rag.retrieval.bm25 import build_index

    root = make_workspace(tmp_path_factory.mktemp("ask-indexed"), tiny_model_dir)
    manifest = convert_to_collection(root / "data/demo/psgs_demo.tsv", root / "data/corpus/demo")
    build_index(root / "data/corpus/demo", root / "data/index/demo/bm25", threads=1, expected=manifest["passages"])
    return root


def ask(capsys, *args) -> tuple[int, str, str]:
    code = main(["ask", *args])
    out, err = capsys.readouterr()
    return code, out, err


def flat(text: str) -> str:
    """Text as the printer shows it on one line (wrapping undone, control characters escaped)."""
    return visible(text)


def shown_and_traced(root, monkeypatch, capsys, method, question=QUESTION, *more) -> tuple[str, dict]:
    """The printed steps and the `--json` trace record of one question (the second run reads the cache)."""
    monkeypatch.chdir(root)
    code, out, err = ask(capsys, question, "--method", method, *more)
    assert code == 0, err
    code, record, err = ask(capsys, question, "--method", method, "--json", *more)
    assert code == 0, err
    assert record.count("\n") == 1  # one trace.jsonl line
    return out, json.loads(record)


def passages_of(root) -> dict[str, tuple[str, str]]:
    """id -> (title, text) of the demo corpus."""
    rows = (root / "data/demo/psgs_demo.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return {pid: (title, text) for pid, text, title in (row.split("\t") for row in rows)}


def assert_header(out: str, method: str, method_type: str, index: bool = True) -> None:
    lines = out.splitlines()
    assert lines[0].split() == ["params", "params.yaml"]
    assert lines[1].startswith("  dataset     demo: exemplars data/demo/exemplars.json (8), template builtin:default")
    assert lines[2].startswith("  model       tiny at data/models/tiny (hf, ")
    assert ("  index       data/index/demo/bm25 (bm25, 344 passages, k1 0.9, b 0.4)" in lines) == index
    assert f"  method      {method} (type {method_type}): " in out
    assert f"  question    {QUESTION}" in out


def assert_retrievals_shown(out: str, record: dict, root) -> None:
    """Every query of the trace is printed, and every retrieved id with its title and first words."""
    corpus = passages_of(root)
    searched = [s for s in record["steps"] if s.get("retrieved")]
    assert searched
    for step in searched:
        assert flat(f"query {step['query']}") in flat(out)
        for pid in step["retrieved"]:
            title, text = corpus[pid]
            assert f"{pid} {title}: {' '.join(text.split()[:3])}" in flat(out)


def assert_answer_and_counters(out: str, record: dict) -> None:
    """The output, the answer the score step would read off it, and the counters."""
    lines = out.splitlines()
    assert flat(f"output {json.dumps(record['output'], ensure_ascii=False)}") in flat(out)
    answer = [line for line in lines if line.startswith("  answer      ")]
    assert len(answer) == 1 and flat(answer[0]).startswith(flat(f"answer {predicted(record['output'], False)[0]}"))
    counters = [line for line in lines if line.startswith("  counters")]
    assert counters
    assert f"retrievals {record['counters']['retrievals']}, llm_calls {record['counters']['llm_calls']}" in counters[0]


def test_the_printer_marks_flagged_units_and_prints_unknown_keys():
    printer = StepPrinter({"7": {"title": "Rope Walk", "text": "The Rope Walk was founded in 1712 by Idris."}})
    lines = printer.step(2, {"phase": "look-ahead", "text": "Idris founded it.", "finish": "stop", "kept": 0,
                             "tokens": [["Idris", 0.2], [" founded", 0.9]], "sentence": 0,
                             "detection": {"units": ["Idris", "founded"], "scores": [0.2, 0.9], "flagged": [0]},
                             "query": "founded it", "retrieved": ["7"], "novel": {"a": 1}})
    assert lines[0] == "step 2: look-ahead (2 tokens, finish stop, kept 0 chars, judged sentence 0)"
    assert "[Idris=0.2] founded=0.9" in flat("\n".join(lines))
    assert "  retrieved   7 Rope Walk: The Rope Walk was founded in 1712 by Idris." in lines
    assert '  novel       {"a": 1}' in lines  # a key no printer knows is shown as it is
    assert all(len(line) <= WIDTH for line in lines)
    u = printer.step(1, {"phase": "direct", "text": "x", "u": 2.5, "delta": 1.0, "kept": False})
    assert "  trigger     U=2.5 vs delta 1: [uncertain]; step not kept: retrieve" in u
    assert cache_line(None) == "off (generation.cache: null): every call ran on the model"
    assert cache_line({"path": CACHE, "generate": {"hits": 2, "misses": 1}, "sample": {"hits": 0, "misses": 0}}) == \
        f"{CACHE}: 2 of 3 calls answered from the cache (generate 2 of 3)"


def test_a_method_without_retrieval_needs_no_index(workspace, monkeypatch, capsys):
    out, record = shown_and_traced(workspace, monkeypatch, capsys, "wo-rag")
    assert_header(out, "wo-rag", "wo-rag", index=False)
    assert "  index       none (the method does not retrieve)" in out
    assert [s["phase"] for s in record["steps"]][0] == "generate"
    assert flat(f"text {json.dumps(record['steps'][0]['text'], ensure_ascii=False)}") in flat(out)
    assert record["id"] == "ask" and record["passages"] == []
    assert_answer_and_counters(out, record)
    # the same question again: every call comes from the cache, and says so
    monkeypatch.chdir(workspace)
    _, again, _ = ask(capsys, QUESTION, "--method", "wo-rag")
    calls = record["counters"]["llm_calls"]
    assert f"call cache  {CACHE}: {calls} of {calls} calls answered from the cache (generate {calls} of {calls})" \
        in again


def test_a_missing_model_or_index_names_its_target(workspace, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(workspace)
    code, _, err = ask(capsys, QUESTION, "--method", "sr-rag")
    assert code == 2
    assert err == ("error: data/index/demo/bm25: missing; methods.sr-rag searches the bm25 index "
                   "(snakemake --cores all data/index/demo/bm25 makes it)\n")
    code, _, err = ask(capsys, " ", "--method", "wo-rag")
    assert (code, err) == (2, "error: the question is empty: pass it as the first argument, quoted\n")
    shutil.copy(workspace / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)  # nothing built here
    code, _, err = ask(capsys, QUESTION, "--method", "wo-rag", "--params", "params.yaml")  # --params after `ask`
    assert err == ("error: data/models/tiny: missing; model.name 'tiny' is built there "
                   "(snakemake --cores all data/models/tiny makes it)\n")


@pytest.mark.slow  # the BM25 index is built by Anserini in a java process
def test_greedy_loop_flare_shows_the_trigger_query_and_passages(indexed, monkeypatch, capsys):
    out, record = shown_and_traced(indexed, monkeypatch, capsys, "flare", QUESTION, "--dataset", "demo")
    assert_header(out, "flare", "flare")
    assert '"variant": "paper"' not in out and 'variant "paper"' in out  # the settings, as key value
    phases = [s["phase"] for s in record["steps"]]
    assert phases[0] == "look-ahead" and "regenerate" in phases  # the tiny model is unsure of every token
    headings = [line for line in out.splitlines() if line.startswith("step ")]
    assert [h.split()[2] for h in headings] == phases
    fired = [s for s in record["steps"] if "detection" in s]
    assert fired
    for step in fired:
        d = step["detection"]
        assert d["flagged"]
        units = [f"{unit}={score:.4g}" for unit, score in zip(d["units"], d["scores"])]
        shown = [f"[{unit}]" if k in d["flagged"] else unit for k, unit in enumerate(units)]
        assert flat(f"trigger score per unit, {len(d['flagged'])} flagged in [ ]: {' '.join(shown)}") in flat(out)
    assert_retrievals_shown(out, record, indexed)
    assert_answer_and_counters(out, record)

    # --html: the trace explorer's view of the same question, its passages' text from the search itself
    code, _, err = ask(capsys, QUESTION, "--method", "flare", "--dataset", "demo", "--html", "ask.html")
    assert code == 0 and "wrote ask.html" in err
    page = (indexed / "ask.html").read_text()
    data = json.loads(re.search(r'type="application/json">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    [question] = data["runs"][0]["questions"]
    assert question["question"] == QUESTION and len(question["steps"]) == len(record["steps"])
    shown_fired = [d for s in question["steps"] for d in s.get("detections", []) if d["fired"]]
    assert [[u["score"] for u in d["units"]] for d in shown_fired] == [s["detection"]["scores"] for s in fired]
    assert set(data["passages"]) == {str(p["id"]) for p in record["passages"]} | {
        pid for s in record["steps"] for pid in s.get("retrieved", [])}
    assert all(p["text"] for p in data["passages"].values())


@pytest.mark.slow  # the BM25 index is built by Anserini in a java process
def test_sampling_seakr_shows_u_against_delta_and_its_samples(indexed, monkeypatch, capsys):
    out, record = shown_and_traced(indexed, monkeypatch, capsys, "seakr")
    assert_header(out, "seakr", "seakr")
    assert "delta -1000000000.0" in out
    judged = [s for s in record["steps"] if "delta" in s]
    assert judged and all(not s["kept"] for s in judged if s["text"].strip())  # U > delta: always retrieves
    for step in judged:
        assert flat(f"U={step['u']:.4g} vs delta -1e+09: [uncertain]") in flat(out)
    samples = [s for s in record["steps"] if "samples" in s]
    first = json.dumps(samples[0]["samples"][0], ensure_ascii=False)
    assert flat(f"samples ({len(samples[0]['samples'])}) 1. {first}")[:40] in flat(out)
    reranked = [s for s in record["steps"] if s["phase"] == "rerank"]
    assert reranked and f"[chosen] {reranked[0]['chosen']} " in out
    assert_retrievals_shown(out, record, indexed)
    assert_answer_and_counters(out, record)
    assert record["counters"]["sampled_sequences"] > 0


@pytest.mark.slow  # the BM25 index is built by Anserini in a java process
def test_detectors_dior_shows_early_detection_with_trained_detectors(indexed, monkeypatch, capsys):
    monkeypatch.chdir(indexed)
    code, _, err = ask(capsys, QUESTION, "--method", "dior")
    assert (code, err) == (2, "error: data/detectors/early.safetensors: missing; methods.dior reads it as its "
                              "early_detector (snakemake --cores all data/detectors/early.safetensors makes it)\n")
    tiny_detectors(indexed / "data/detectors", "tiny", 32)  # the tiny Llama's name and hidden size
    out, record = shown_and_traced(indexed, monkeypatch, capsys, "dior")
    assert_header(out, "dior", "dior")
    assert "  early_detector data/detectors/early.safetensors" in out
    early = record["steps"][0]
    assert early["phase"] == "early-detection" and early["fire"]  # early_threshold 0: it always fires
    assert flat(f"trigger p(hallucination)={early['probability']:.4g} vs threshold 0: [fires]") in flat(out)
    assert flat(f"attribution {early['tokens'][0].strip()}={early['attribution'][0]:.4g}") in flat(out)
    assert [s["phase"] for s in record["steps"]][1:3] == ["early-retrieval", "regenerate"]
    assert_retrievals_shown(out, record, indexed)
    assert_answer_and_counters(out, record)


@pytest.mark.slow  # the BM25 index is built by Anserini in a java process
def test_the_answer_is_the_one_generate_writes(indexed, monkeypatch, capsys):
    """Each question of a 3-question split, with the call cache off: ask's record is generate's."""
    monkeypatch.chdir(indexed)
    edit_params(indexed, lambda data: data["generation"].update(cache=None))
    try:
        assert main(["split", "--dataset", "demo", "--out", "data/splits/demo.jsonl"]) == 0
        assert main(["generate", "--dataset", "demo", "--method", "dragin", "--split", "data/splits/demo.jsonl",
                     "--model-dir", "data/models/tiny", "--index", "data/index/demo/bm25",
                     "--out-dir", "data/runs/demo/dragin"]) == 0
        predictions = read_jsonl(indexed / "data/runs/demo/dragin/predictions.jsonl")
        traces = read_jsonl(indexed / "data/runs/demo/dragin/trace.jsonl")
        capsys.readouterr()
        for prediction, trace in zip(predictions, traces):
            code, out, err = ask(capsys, prediction["question"], "--method", "dragin")
            assert code == 0, err
            assert "call cache  off (generation.cache: null)" in out
            assert flat(f"answer {prediction['prediction']}") in flat(out)
            code, line, err = ask(capsys, prediction["question"], "--method", "dragin", "--json")
            record = json.loads(line)
            for other in (record, trace):
                other.pop("id")
                other["counters"].pop("wall_time_s")
            assert record == trace
    finally:
        edit_params(indexed, lambda data: data["generation"].update(cache=CACHE))


def test_a_question_longer_than_the_context_is_refused_before_the_model_runs(workspace, monkeypatch, capsys):
    """The tiny Llama reads 8,192 positions. Before, a 16,200-token question ran (and was cached) past
    them; now the method's first prompt, exemplars included, and its budget are measured first."""
    monkeypatch.chdir(workspace)
    cache = workspace / CACHE
    before = cache.stat().st_size if cache.exists() else None
    code, _, err = ask(capsys, "word " * 8100, "--method", "wo-rag")
    assert code == 2
    line = err.splitlines()[-1]
    found = re.fullmatch(r"error: the question is 16,200 tokens; the first prompt of methods.wo-rag on demo is "
                         r"(\d\d,\d{3}) tokens with it \(exemplars and template included\), which with the answer "
                         r"budget of 12 new tokens is more than the model's context of 8,192 tokens: shorten the "
                         r"question to at most (\d,\d{3}) tokens", line)
    assert found, line
    total, room = (int(n.replace(",", "")) for n in found.groups())
    assert room == 8192 - 12 - (total - 16200)
    assert (cache.stat().st_size if cache.exists() else None) == before  # no call reached the model
    code, out, err = ask(capsys, "word " * (room // 2), "--method", "wo-rag")  # 2 tokens a word: fits
    assert code == 0, err.splitlines()[-1]


def test_a_question_that_is_not_utf8_is_one_line(workspace, monkeypatch, capsys):
    """Bytes that are not UTF-8 reach argv as lone surrogates; before, the call cache's key failed with
    UnicodeEncodeError."""
    import os

    monkeypatch.chdir(workspace)
    code, _, err = ask(capsys, os.fsdecode(b"Who ran the caf\xe9 in Velmora?"), "--method", "wo-rag")
    assert (code, err) == (2, "error: the question is not UTF-8 text: byte 0xe9 after 'Who ran the caf' (invalid "
                              "continuation byte); pass it in UTF-8 (set the terminal's encoding to UTF-8, or "
                              "convert it with iconv)\n")


def test_adaptive_retrieval_on_page_views_says_why_a_typed_question_cannot_run(workspace, monkeypatch, capsys):
    """Page views are keyed by a split's question ids: a typed question has none, and none can be looked
    up offline. Before, it failed only after the model loaded, asking to add the question's id to the file."""
    import yaml

    monkeypatch.chdir(workspace)
    data = yaml.safe_load((workspace / "params.yaml").read_text())
    data["methods"]["adaptive-retrieval"] = {"threshold": 5}
    (workspace / "page-views.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (workspace / "data/popularity").mkdir(parents=True, exist_ok=True)
    (workspace / "data/popularity/demo.json").write_text('{"demo-000": 12}')
    code, _, err = ask(capsys, QUESTION, "--method", "adaptive-retrieval", "--params", "page-views.yaml")
    assert (code, err) == (2, "error: methods.adaptive-retrieval reads each question's popularity (its entity's "
                              "page views) by the question's id from data/popularity/{dataset}.json, which a typed "
                              "question has no entry in and whose page views cannot be looked up offline: ask a "
                              "method with popularity_proxy: corpus-frequency (counted in the corpus for the typed "
                              "question), or run the question in a split\n")


@pytest.mark.slow  # the BM25 index is built by Anserini in a java process
def test_adaptive_retrieval_counts_a_typed_questions_popularity_in_the_corpus(indexed, monkeypatch, capsys):
    """With the corpus-frequency proxy the popularity depends on the question and the corpus alone: `ask`
    counts it for the typed question as the `popularity` step counts a split's question. Before, `ask`
    needed a split's popularity file and then found no entry for its question."""
    import yaml

    monkeypatch.chdir(indexed)
    data = yaml.safe_load((indexed / "params.yaml").read_text())
    data["methods"]["adaptive-retrieval"] = {"popularity_proxy": "corpus-frequency", "threshold": 1.0e9}
    (indexed / "proxy.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    code, line, err = ask(capsys, QUESTION, "--method", "adaptive-retrieval", "--params", "proxy.yaml", "--json")
    assert code == 0, err
    step = json.loads(line)["steps"][0]
    (indexed / "typed.jsonl").write_text(json.dumps({"id": "q", "question": QUESTION}) + "\n")
    assert main(["--params", "proxy.yaml", "popularity", "--dataset", "demo", "--split", "typed.jsonl",
                 "--out", "typed-popularity.json"]) == 0
    [counted] = read_jsonl(indexed / "typed-popularity.entities.jsonl")
    assert (step["entity"], step["popularity"]) == (counted["entity"], counted["popularity"])
    assert step["retrieve"] and json.loads(line)["counters"]["retrievals"] == 1  # below 1e9: it retrieves
