"""The trace explorer: one offline HTML page per dataset that shows, for every question of every run of
it, what the method decided (`reports/trace_view.py` builds each question's record), and two runs side
by side on the same question.

Why it is built this way:
- It reads only the run directories (`predictions.jsonl`, `trace.jsonl`, `provenance.json`) and the
  corpus collection for the passages' text: no model runs, and what it shows is what the runs wrote.
- One file with its data, style and script inside, and nothing it fetches: it opens from disk, inside
  Snakemake's report or alone, without a network.
- Its size is bounded. Snakemake's self-contained report shows an HTML result as a `data:` URL in a
  frame, and Chromium opens no URL over 2 MB, so a page holds at most `PAGE_BYTES` of question data
  (base64 makes it 4/3 larger) and each run at most `RUN_BYTES` of it (less when a dataset has more than
  `PAGE_BYTES // RUN_BYTES` runs, so their shares fit the page). Questions are taken in the runs' order
  while every run's share fits; the page says which questions it holds, where the rest are (the runs'
  files) and the command that writes the page starting at the next one (`--start`).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable

from ..errors import InputError
from ..io import atomic_write, read_json, read_jsonl
from .trace_view import gold_passages, passage_ids, passage_view, question_view, threshold_settings

RUN_BYTES = 200_000  # question data per run (JSON), at most
PAGE_BYTES = 1_400_000  # question data per page, at most: under Chromium's 2 MB limit on a data: URL once base64'd


@dataclass
class Run:
    """One run directory read: its provenance and its predictions and traces, in the run's order."""

    directory: Path
    method: str
    method_type: str
    dataset: str
    settings: dict
    predictions: list[dict]
    traces: list[dict]


def read_run(directory: str | Path) -> Run:
    """A run directory of the `generate` step; refused, naming the file, when one is missing or the
    predictions and traces do not list the same questions."""
    directory = Path(directory)
    files = {name: directory / name for name in ("predictions.jsonl", "trace.jsonl", "provenance.json")}
    for path in files.values():
        if not path.is_file():
            raise InputError(f"{path}: missing; the explorer reads a run directory of the generate step "
                             f"(snakemake --cores all {files['predictions.jsonl']} makes it)")
    provenance = read_json(files["provenance.json"], "run provenance")
    predictions = read_jsonl(files["predictions.jsonl"], "predictions")
    traces = read_jsonl(files["trace.jsonl"], "trace")
    if [p.get("id") for p in predictions] != [t.get("id") for t in traces]:
        raise InputError(f"{files['trace.jsonl']}: its questions are not those of {files['predictions.jsonl']} "
                         f"in the same order; rerun the run")
    method = provenance.get("params", {}).get("method", {})
    return Run(directory=directory, method=provenance.get("method") or directory.name,
               method_type=provenance.get("method_type") or method.get("type", "?"),
               dataset=provenance.get("dataset") or directory.parent.name,
               settings=method.get("settings") or {}, predictions=predictions, traces=traces)


def corpus_passages(collection: str | Path | None, wanted: set[str]) -> dict[str, tuple[str, str]]:
    """Title and text of the `wanted` passage ids, read from the corpus step's JsonCollection in one pass
    (an empty dict without a collection: the page then shows ids and the titles the traces hold)."""
    if collection is None or not wanted:
        return {}
    from ..data.corpus import collection_documents, collection_shards

    found = {}
    for pid, title, text in collection_documents(collection_shards(Path(collection))):
        if pid in wanted:
            found[pid] = (title, text)
            if len(found) == len(wanted):
                break
    return found


def size(obj) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def run_cap(runs: int) -> int:
    """Each run's share of the page: `RUN_BYTES`, or less where the page could not hold them all."""
    return min(RUN_BYTES, PAGE_BYTES // max(runs, 1))


def named_passages(runs: list[Run]) -> set[str]:
    """Every passage id the runs' traces name."""
    return set().union(*(passage_ids(t) for run in runs for t in run.traces))


def explorer_data(runs: list[Run], texts: dict[str, tuple[str, str]], start: int = 0, cap: int | None = None) -> dict:
    """What one page shows: every run's questions from the `start`-th (0-based, in the first run's
    order) for as long as each run's share stays within `cap` bytes, the passages they name (`texts`:
    id -> title, text) and, per question, which of them contain a gold answer."""
    if not runs:
        raise InputError("the explorer needs at least one run directory")
    cap = run_cap(len(runs)) if cap is None else cap
    order = [str(p.get("id")) for p in runs[0].predictions]
    if not 0 <= start < max(len(order), 1):
        raise InputError(f"--start {start + 1}: {runs[0].directory} has {len(order)} questions")
    by_id = [{str(p.get("id")): (p, t) for p, t in zip(r.predictions, r.traces)} for r in runs]
    wanted = named_passages(runs)
    titles = {str(p.get("id")): p.get("title", "") for r in runs for t in r.traces for p in t.get("passages", [])}
    passages = {pid: passage_view(*texts[pid]) if pid in texts else {"title": titles.get(pid, ""), "text": None}
                for pid in sorted(wanted)}

    used, shown = [0] * len(runs), [[] for _ in runs]
    seen: list[set[str]] = [set() for _ in runs]
    gold: dict[str, list[str]] = {}
    end = start
    for qid in order[start:]:
        views, costs, named = [], [], []
        for k, run in enumerate(runs):
            pair = by_id[k].get(qid)
            if pair is None:
                views.append(None)
                costs.append(0)
                named.append(set())
                continue
            view = question_view(*pair)
            ids = passage_ids(pair[1]) - seen[k]
            views.append(view)
            named.append(ids)
            costs.append(size(view) + sum(size(passages[p]) for p in ids))
        if end > start and any(used[k] + costs[k] > cap for k in range(len(runs))):
            break
        for k, view in enumerate(views):
            used[k] += costs[k]
            seen[k] |= named[k]
            if view is not None:
                shown[k].append(view)
        golds = next((v["gold"] for v in views if v is not None), [])
        named_here = set().union(*(passage_ids(by_id[k][qid][1]) for k in range(len(runs)) if qid in by_id[k]))
        gold[qid] = gold_passages(golds, named_here, texts)
        end += 1
    kept = set().union(*seen)
    return {
        "dataset": runs[0].dataset, "start": start + 1, "end": end, "total": len(order), "cap": cap,
        "runs": [{"method": r.method, "type": r.method_type, "directory": str(r.directory),
                  "settings": r.settings, "thresholds": threshold_settings(r.settings), "bytes": used[k],
                  "questions": shown[k]} for k, r in enumerate(runs)],
        "passages": {pid: passages[pid] for pid in sorted(kept)},
        "gold_passages": {qid: ids for qid, ids in gold.items() if ids},
    }


def asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def page(data: dict, title: str, note: str = "") -> str:
    """The self-contained page: the data as JSON in the page, the style and the script inline."""
    payload = json.dumps({**data, "title": title, "note": note}, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # never ends the script element early
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{asset('explorer.css')}</style>\n</head>\n<body>\n"
            f"<div id=\"app\"><p>Loading the trace explorer… (it needs JavaScript)</p></div>\n"
            f"<script id=\"explorer-data\" type=\"application/json\">{payload}</script>\n"
            f"<script>\n{asset('explorer.js')}</script>\n</body>\n</html>\n")


def next_page_note(data: dict, command: str) -> str:
    """What the page says when it does not hold every question: where the rest are, and how to page on."""
    if data["start"] == 1 and data["end"] == data["total"]:
        return ""
    files = ", ".join(f"{r['directory']}/trace.jsonl" for r in data["runs"])
    more = (f" The next page: {command} --start {data['end'] + 1}." if data["end"] < data["total"] else "")
    return (f"This page holds questions {data['start']}–{data['end']} of {data['total']}: each run's share is capped "
            f"at {data['cap'] // 1000} kB so that the page opens inside Snakemake's report. Every question's steps "
            f"are in {files}.{more}")


def write_explorer(run_dirs: Iterable[str | Path], out: str | Path, collection: str | Path | None = None,
                   start: int = 0, command: str = "adaptive-rag explorer ...") -> dict:
    """Read the runs, build one page of their questions and write it to `out`; returns the page's data."""
    runs = [read_run(d) for d in run_dirs]
    datasets = sorted({r.dataset for r in runs})
    if len(datasets) > 1:
        raise InputError(f"the explorer shows the runs of one dataset side by side; got runs of {', '.join(datasets)}")
    data = explorer_data(runs, corpus_passages(collection, named_passages(runs)), start)
    write_page(data, out, f"Trace explorer: {data['dataset']}", next_page_note(data, command))
    return data


def write_page(data: dict, out: str | Path, title: str, note: str = "") -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as handle:
        handle.write(page(data, title, note))


def write_asked(asked, out: Path) -> None:
    """`adaptive-rag ask ... --html FILE`: the one question as the explorer shows a run's, with the
    passages the question's searches returned."""
    run = Run(directory=Path(f"ask ({asked.params})"), method=asked.method, method_type=asked.method_type,
              dataset=asked.dataset, settings=asked.settings, predictions=[asked.prediction], traces=[asked.trace])
    texts = {pid: (p["title"], p["text"]) for pid, p in asked.passages.items()}
    data = explorer_data([run], texts)
    write_page(data, out, f"adaptive-rag ask: {asked.method} on one question")
