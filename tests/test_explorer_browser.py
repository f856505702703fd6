"""The HTML report in a real browser: the tiny-model workflow built, `snakemake --report` written, and the
page opened in Debian's headless Chromium through Playwright with every request that is not a file (or
the report's own data: URLs) aborted and recorded. It checks the front page starts with the quality table,
opens a DRAGIN and a FLARE question in the trace explorer (shaded units with the scores of trace.jsonl,
the fired sentence, the query, the passages) and the side-by-side view, and writes a screenshot of each
view to the test's temporary folder (printed; never committed)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from adaptive_rag.reports.trace_view import decision
from conftest import copy_workflow, edit_params, read_jsonl, snakemake, tiny_params

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
INSTALL = ("apt-get install -y chromium (as root; .ci/run does it) and "
           "pip install -c constraints.txt -e '.[dev]' (Playwright)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser_context():
    """A fresh Chromium profile whose every request other than file: and data: is aborted and listed."""
    playwright = pytest.importorskip("playwright.sync_api", reason=f"Playwright is not installed: {INSTALL}")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} not found: {INSTALL}")
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    with playwright.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True,
                                                       viewport={"width": 1400, "height": 900})
        context.refused = []

        def guard(route):
            url = route.request.url
            if url.startswith(("file:", "data:", "about:")):
                route.continue_()
            else:
                context.refused.append(url)
                route.abort()
        context.route("**/*", guard)
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def built_report(tiny_llama_dir, tmp_path_factory):
    """The tiny demo built (`snakemake --cores all`) with DRAGIN's theta low enough for the random model's
    RIND to fire, and its HTML report (`report_all`)."""
    root = copy_workflow(tmp_path_factory.mktemp("report"))

    def edit(data):
        tiny_params(tiny_llama_dir)(data)
        data["methods"]["dragin"]["theta"] = 0.0001
    edit_params(root, edit)
    snakemake(root)
    snakemake(root, "--report", "reports/report.html", "report_all")
    return root


def first_retrieving(root, method):
    """The first question of the demo run of `method` whose trace holds a fired detection, with that step."""
    for record in read_jsonl(root / f"data/runs/demo/{method}/trace.jsonl"):
        for i, step in enumerate(record["steps"]):
            if "detection" in step and step.get("retrieved"):
                return record, i, step
    raise AssertionError(f"no {method} question retrieved on the tiny demo")


def explorer_frame(page, path):
    """The report's view of one HTML result (`app.setView`, as its menu does): a frame on its data: URL."""
    page.evaluate("path => app.setView({content: 'html', contentPath: results[path].data_uri, resultPath: path})", path)
    page.wait_for_function("() => [...document.querySelectorAll('iframe')].some(f => f.src.startsWith('data:text/html'))")
    frame = next(f for f in page.frames if f.url.startswith("data:text/html"))
    frame.wait_for_selector("#questions")
    return frame


def open_question(frame, method, qid):
    frame.select_option("#run", label=next(o for o in frame.eval_on_selector_all(
        "#run option", "els => els.map(e => e.textContent)") if o.startswith(f"{method} (")))
    frame.fill("#search", qid)
    frame.click(f"tr.row[data-qid='{qid}']")
    frame.wait_for_selector("#detail")


def check_step(frame, record, index, step):
    """The step's shaded units carry exactly the trace's scores and flags; its fired sentence, query and
    passages are shown."""
    box = frame.locator(f"#detail .step[data-step='{index}']").first
    units = box.locator(".text span.unit")
    recorded = [*step.get("judged", []), step["detection"]]  # the sentences passed, then the one that fired
    shaded = {}
    for k in range(units.count()):
        unit = units.nth(k)
        d, u = int(unit.get_attribute("data-detection")), int(unit.get_attribute("data-unit"))
        shaded[d, u] = (float(unit.get_attribute("data-score")), unit.get_attribute("data-flagged"))
    fired = len(recorded) - 1
    assert any(d == fired for d, _ in shaded), "the fired sentence is not shaded"
    for (d, u), (score, flagged) in shaded.items():
        assert score == recorded[d]["scores"][u] and flagged == ("1" if u in recorded[d]["flagged"] else "0")
    assert box.locator(".text .fired .unit").count() >= 1  # the fired sentence is marked in the text
    assert box.locator(".fired-sentence").inner_text() == step["fired"].strip()
    assert box.locator(".query").inner_text() == step["query"].strip()
    assert [box.locator(".passage").nth(k).get_attribute("data-pid") for k in range(box.locator(".passage").count())
            ] == step["retrieved"]


def test_the_report_starts_with_results_and_its_explorer_shows_the_traces_offline(built_report, browser_context,
                                                                                    tmp_path):
    root = built_report
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = browser_context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((root / "reports/report.html").as_uri())

    # the first screen: the main quality table, as a table, with intervals and the paired difference
    table = page.wait_for_selector("#main-results table")
    headers = table.eval_on_selector_all("th", "els => els.map(e => e.textContent)")
    assert headers[:6] == ["dataset", "method", "questions", "EM", "F1", "Acc"] and "ΔEM vs wo-rag" in headers
    assert "[" in table.eval_on_selector("tbody td:nth-child(4)", "e => e.textContent")  # an interval
    box = table.bounding_box()
    assert 0 <= box["y"] < 900 - 100, box
    assert page.locator(".front-figure svg").count() == 1
    page.screenshot(path=shots / "front.png")

    # a DRAGIN question and a FLARE question in the explorer of demo (the report's frame on its data: URL)
    frame = explorer_frame(page, "reports/explorer/demo.html")
    for method in ("dragin", "flare"):
        record, index, step = first_retrieving(root, method)
        open_question(frame, method, record["id"])
        check_step(frame, record, index, step)
        page.screenshot(path=shots / f"{method}.png", full_page=True)
        frame.click("#back")

    # side by side: DRAGIN against FLARE on the DRAGIN question, the first differing step marked
    record, _, _ = first_retrieving(root, "dragin")
    flare = next(r for r in read_jsonl(root / "data/runs/demo/flare/trace.jsonl") if r["id"] == record["id"])
    open_question(frame, "dragin", record["id"])
    frame.select_option("#other", label="flare (flare)")
    frame.wait_for_selector("#compare")
    pairs = list(zip(record["steps"], flare["steps"]))
    expected = next((i for i, (a, b) in enumerate(pairs) if decision(a) != decision(b)),
                    -1 if len(record["steps"]) == len(flare["steps"]) else len(pairs))
    assert int(frame.get_attribute("#first-difference", "data-step")) == expected
    if expected >= 0:
        assert frame.locator(".step.first-diff").count() == 2
    page.screenshot(path=shots / "side-by-side.png", full_page=True)

    # the list filters and searches
    frame.click("#back")
    frame.fill("#search", "")
    frame.select_option("#other", label="none")
    frame.select_option("#correct", "wrong")
    dragin = read_jsonl(root / "data/runs/demo/dragin/predictions.jsonl")
    assert frame.locator("tr.row").count() == len(dragin)  # the random model answers none right
    frame.select_option("#retrieved", "no")
    assert frame.locator("tr.row").count() == sum(p["retrievals"] == 0 for p in dragin)

    assert browser_context.refused == [] and errors == []
    sizes = {p.name: p.stat().st_size for p in (root / "reports/explorer").glob("*.html")}
    print(f"screenshots in {shots}; explorer pages {sizes}; report {(root / 'reports/report.html').stat().st_size} bytes")
    assert json.loads(json.dumps(sizes)) and max(sizes.values()) < 1_500_000
