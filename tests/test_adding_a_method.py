"""docs/adding-a-method.md, followed literally: its files written into a scratch copy of the package,
then `check-params`, `methods`, the guide's own unit test and one generate step through Snakemake."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from conftest import copy_workflow, edit_params, read_jsonl, run, snakemake

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "adding-a-method.md"


def guide() -> tuple[dict[str, str], dict]:
    """The files the guide tells a reader to create, and the params entry it tells them to add."""
    text = GUIDE.read_text(encoding="utf-8")
    files = {m[1]: m[2] for m in re.finditer(r"<!-- guide-file: (\S+) -->\n```\w*\n(.*?)```", text, re.S)}
    entry = re.search(r"<!-- guide-params: methods -->\n```yaml\n(.*?)```", text, re.S)
    return files, yaml.safe_load(entry[1]) if entry else {}


def test_the_guide_adds_one_method_file_and_its_test():
    files, entry = guide()
    assert sorted(files) == ["src/adaptive_rag/methods/draft_query.py", "tests/methods/test_draft_query.py"]
    assert list(entry) == ["draft-query"]
    assert not (REPO / "src/adaptive_rag/methods/draft_query.py").exists()  # the example ships nowhere


@pytest.mark.slow  # Snakemake, the CLI and pytest in subprocesses over a scratch copy
def test_following_the_guide_adds_a_working_method(tmp_path, tiny_model_dir, monkeypatch):
    files, entry = guide()
    root = copy_workflow(tmp_path / "scratch")
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests").mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", root / "tests" / "conftest.py")
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content, encoding="utf-8")

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_model_dir))
        data["generation"].update(max_new_tokens=16, threads=1, batch_size=4, cache=None)
        data["datasets"]["demo"]["sample"]["size"] = 4
        data["methods"].update(entry)

    edit_params(root, edit)
    monkeypatch.setenv("PYTHONPATH", str(root / "src"))  # the scratch package, with the new file
    cli = [sys.executable, "-m", "adaptive_rag"]

    assert "params.yaml: ok" in run([*cli, "check-params"], root).stdout
    assert "\ndraft-query\n  when:     once, after a draft answer written without passages" in run([*cli, "methods"], root).stdout
    table = run([*cli, "methods", "--markdown"], root).stdout
    assert "| `draft-query` | once, after a draft answer written without passages |" in table
    tested = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/methods/test_draft_query.py"],
                 root)
    assert "1 passed" in tested.stdout

    snakemake(root, "data/scores/demo/draft-query.json")
    run_dir = root / "data/runs/demo/draft-query"
    predictions = read_jsonl(run_dir / "predictions.jsonl")
    assert len(predictions) == 4 and all(p["retrievals"] == 1 for p in predictions)
    traces = read_jsonl(run_dir / "trace.jsonl")
    assert all(t["steps"][0]["phase"] == "draft" and t["steps"][0]["query"] for t in traces)
    provenance = yaml.safe_load((run_dir / "provenance.json").read_text())
    assert provenance["method_type"] == "draft-query"
    assert provenance["params"]["method"]["settings"] == {"top_k": 3, "draft_tokens": 32, "retriever": None}
