"""The params profiles (demo, shared, paper): each is valid and plans the DAG it promises."""

import hashlib
import http.server
import io
import shutil
import sys
import threading
import zipfile

import pytest

from adaptive_rag.config import load_params
from conftest import REPO, SHARED_DATA, copy_workflow, edit_params, planned_jobs, run, snakemake


@pytest.mark.parametrize("name", ["demo", "shared", "paper", "scaar"])
def test_profiles_are_valid(name):
    load_params(REPO / "params" / f"{name}.yaml")


def test_params_yaml_is_the_demo_profile():
    assert (REPO / "params.yaml").read_text() == (REPO / "params" / "demo.yaml").read_text()


@pytest.mark.slow  # runs the `adaptive_rag profile` CLI
def test_profile_command_installs_a_profile_and_rejects_unknown_ones(tmp_path):
    copy_workflow(tmp_path)
    shutil.copytree(REPO / "params", tmp_path / "params")
    cli = [sys.executable, "-m", "adaptive_rag"]
    run([*cli, "profile", "paper"], tmp_path)
    assert (tmp_path / "params.yaml").read_text() == (REPO / "params" / "paper.yaml").read_text()
    result = run([*cli, "profile", "laptop"], tmp_path, check=False)
    assert result.returncode == 2 and "no profile 'laptop' in params/; available: demo, paper, scaar, shared" in result.stderr


@pytest.mark.slow  # a Snakemake dry run
def test_paper_profile_plans_downloads_for_every_input(tmp_path):
    copy_workflow(tmp_path)
    shutil.copy(REPO / "params" / "paper.yaml", tmp_path / "params.yaml")
    jobs = planned_jobs(tmp_path)
    downloads = {rule: n for rule, n in jobs.items() if rule.startswith("download_")}
    assert len(downloads) == 8 and set(downloads.values()) == {1}
    assert jobs["split"] == 7 and jobs["generate"] == 42 and jobs["index"] == 1


@pytest.mark.slow  # a Snakemake dry run
def test_shared_profile_plans_four_datasets(tmp_path):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    dest = tmp_path / "repo"
    copy_workflow(dest)
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)  # the profile reads ../shared/data
    shutil.copy(REPO / "params" / "shared.yaml", dest / "params.yaml")
    assert planned_jobs(dest) == {"model": 1, "corpus": 1, "index": 1, "split": 4, "generate": 24, "score": 24,
                                  "report": 1, "all": 1}


class _ArchiveHandler(http.server.BaseHTTPRequestHandler):
    payload = b""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.mark.slow  # runs Snakemake
def test_download_rule_fetches_verifies_and_extracts(tmp_path):
    """A `downloads:` entry becomes a Snakemake rule whose outputs feed the split step."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("bundle/dev.json", (REPO / "data/demo/hotpot_demo.json").read_text())
    _ArchiveHandler.payload = buffer.getvalue()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ArchiveHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        copy_workflow(tmp_path)
        url = f"http://127.0.0.1:{server.server_port}/bundle.zip"

        def edit(data):
            data["downloads"] = {"demo-archive": {"url": url, "sha256": hashlib.sha256(_ArchiveHandler.payload).hexdigest(),
                                                  "extract": ["bundle/dev.json"]}}
            data["datasets"]["demo"]["path"] = "data/raw/demo-archive/dev.json"

        edit_params(tmp_path, edit)
        snakemake(tmp_path, "splits")
        log = (tmp_path / "logs/download/demo-archive.log").read_text()
        assert "verified" in log and "NOT verified" not in log
        assert (tmp_path / "data/raw/demo-archive/dev.json").read_text() == (REPO / "data/demo/hotpot_demo.json").read_text()
        assert len((tmp_path / "data/splits/demo.jsonl").read_text().splitlines()) == 48

        edit_params(tmp_path, lambda d: d["downloads"]["demo-archive"].update(sha256="0" * 64))
        shutil.rmtree(tmp_path / "data/raw")
        result = snakemake(tmp_path, "splits", check=False)
        assert result.returncode != 0
        log = (tmp_path / "logs/download/demo-archive.log").read_text()
        assert "error:" in log and url in log and "0" * 64 in log
    finally:
        server.shutdown()
