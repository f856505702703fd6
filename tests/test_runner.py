"""Generation jobs: resumable after a kill, and split across Accelerate processes, with equal results."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import copy_workflow, edit_params, run

# Every test here runs the `adaptive_rag` CLI (and `accelerate launch`) in subprocesses, as does the `job` fixture.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tiny_model_dir, tmp_path_factory):
    """A workflow copy with a split of 12 demo questions and the tiny model; returns a command builder."""
    root = copy_workflow(tmp_path_factory.mktemp("runner"))

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_model_dir))
        data["generation"].update(max_new_tokens=24, threads=1, batch_size=2, cache=None)
        data["datasets"]["demo"]["sample"]["size"] = 12

    edit_params(root, edit)
    run([sys.executable, "-m", "adaptive_rag", "split", "--dataset", "demo", "--out", "data/splits/demo.jsonl"], root)

    def command(out_dir, launcher=(sys.executable, "-m", "adaptive_rag")):
        return [*launcher, "generate", "--dataset", "demo", "--method", "wo-rag", "--split",
                "data/splits/demo.jsonl", "--model-dir", str(tiny_model_dir), "--out-dir", str(out_dir)]

    return root, command


def test_killed_run_resumes_to_the_uninterrupted_result(job):
    root, command = job
    run(command(root / "straight"), root)
    expected = (root / "straight/predictions.jsonl").read_bytes()
    assert len(expected.splitlines()) == 12

    proc = subprocess.Popen(command(root / "killed"), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = root / "killed/.progress/rank0.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not progress.exists() or len(progress.read_bytes().splitlines()) < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(progress.read_bytes().splitlines())
    assert 2 <= finished < 6, "the job was not killed mid-way"
    assert not (root / "killed/predictions.jsonl").exists()
    with open(progress, "ab") as handle:  # a kill can also cut a line short
        handle.write(b'{"batch": 5, "recor')

    result = run(command(root / "killed"), root)
    assert (root / "killed/predictions.jsonl").read_bytes() == expected
    assert not (root / "killed/.progress").exists()
    assert f'"resumed_batches": {finished}' in (root / "killed/provenance.json").read_text()
    assert "12 questions" in result.stdout


def test_two_accelerate_processes_equal_one(job):
    root, command = job
    if not (root / "straight/predictions.jsonl").exists():
        run(command(root / "straight"), root)
    launcher = (sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "-m", "adaptive_rag")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command(root / "two", launcher), cwd=root, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (root / "two/predictions.jsonl").read_bytes() == (root / "straight/predictions.jsonl").read_bytes()
    assert '"processes": 2' in (root / "two/provenance.json").read_text()


def test_call_cache_is_shared_across_runs_and_reported(job):
    """Two method configurations that ask the same calls: the second one is served from the cache."""
    import json

    root, command = job
    edit_params(root, lambda d: d["generation"].update(cache="data/cache/calls.sqlite"))
    try:
        run(command(root / "cached-1"), root)
        run(command(root / "cached-2"), root)
    finally:
        edit_params(root, lambda d: d["generation"].update(cache=None))
    first = json.loads((root / "cached-1/provenance.json").read_text())["call_cache"]["generate"]
    second = json.loads((root / "cached-2/provenance.json").read_text())["call_cache"]["generate"]
    # 12 generations plus the answer fallback's calls: all misses the first time, all hits the second
    assert first["hits"] == 0 and first["misses"] >= 12 and second == {"hits": first["misses"], "misses": 0}
    assert (root / "cached-1/predictions.jsonl").read_bytes() == (root / "cached-2/predictions.jsonl").read_bytes()


def test_dynamic_method_sweep_reuses_the_cache_and_reruns_identically(job):
    """A threshold sweep of FLARE: every question's first look-ahead is the same call whatever the
    threshold, so the second setting is partly served from the cache; without the cache a rerun
    recomputes everything and writes byte-identical predictions."""
    import json

    root, _ = job
    if not (root / "data/index/demo/bm25").is_dir():
        run([sys.executable, "-m", "adaptive_rag", "corpus", "--out", "data/corpus/demo"], root)
        run([sys.executable, "-m", "adaptive_rag", "index", "--collection", "data/corpus/demo",
             "--out", "data/index/demo/bm25"], root)

    def sweep(name, theta, cache):
        def edit(data):
            data["methods"][name] = {"type": "flare", "theta": theta, "max_retrievals": 2}
            data["generation"].update(cache=cache)
        edit_params(root, edit)
        run([sys.executable, "-m", "adaptive_rag", "generate", "--dataset", "demo", "--method", name, "--split",
             "data/splits/demo.jsonl", "--model-dir", str(job_model(root)), "--index", "data/index/demo/bm25",
             "--out-dir", f"sweep/{name}"], root)
        return json.loads((root / f"sweep/{name}/provenance.json").read_text())["call_cache"]

    try:
        high = sweep("flare-high", 0.9, "data/cache/sweep.sqlite")
        low = sweep("flare-low", 1e-9, "data/cache/sweep.sqlite")
        uncached = sweep("flare-again", 0.9, None)
    finally:
        edit_params(root, lambda d: d["generation"].update(cache=None))
    assert high["generate"]["hits"] == 0 and low["generate"]["hits"] >= 12  # the 12 first look-aheads
    assert uncached is None
    assert (root / "sweep/flare-again/predictions.jsonl").read_bytes() == \
        (root / "sweep/flare-high/predictions.jsonl").read_bytes()
    retrievals = [json.loads(line)["retrievals"] for line in (root / "sweep/flare-high/predictions.jsonl").open()]
    assert max(retrievals) <= 2  # max_retrievals caps the loop


def job_model(root):
    import yaml

    return yaml.safe_load((root / "params.yaml").read_text())["model"]["source"]
