"""Generation jobs: resumable after a kill, and split across Accelerate processes, with equal results."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import copy_workflow, edit_params, run

# Every test here runs the `adaptive_rag` CLI (and `accelerate launch`) in subprocesses, as does the `job` fixture.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job(tiny_model_dir, tmp_path_factory):
    """A workflow copy with a split of 12 demo questions and the tiny model (resumed in chunks of 2
    questions); returns a command builder."""
    root = copy_workflow(tmp_path_factory.mktemp("runner"))

    def edit(data):
        data["model"].update(name="tiny", source=str(tiny_model_dir))
        data["generation"].update(max_new_tokens=24, threads=1, batch_size=2, chunk_size=2, cache=None)
        data["datasets"]["demo"]["sample"]["size"] = 12

    edit_params(root, edit)
    run([sys.executable, "-m", "adaptive_rag", "split", "--dataset", "demo", "--out", "data/splits/demo.jsonl"], root)

    def command(out_dir, launcher=(sys.executable, "-m", "adaptive_rag")):
        return [*launcher, "generate", "--dataset", "demo", "--method", "wo-rag", "--split",
                "data/splits/demo.jsonl", "--model-dir", str(tiny_model_dir), "--out-dir", str(out_dir)]

    return root, command


def start_and_kill(args, cwd, progress, batches):
    """Start a generate job and SIGKILL it once its progress log holds `batches` finished batches
    (after its key line); returns how many it had finished."""
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and (not progress.exists() or len(progress.read_bytes().splitlines()) < 1 + batches):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return len(progress.read_bytes().splitlines()) - 1


def test_killed_run_resumes_to_the_uninterrupted_result(job):
    root, command = job
    run(command(root / "straight"), root)
    expected = (root / "straight/predictions.jsonl").read_bytes()
    assert len(expected.splitlines()) == 12

    progress = root / "killed/.progress/rank0.jsonl"
    finished = start_and_kill(command(root / "killed"), root, progress, 1)
    assert 1 <= finished < 6, "the job was not killed mid-way"
    assert not (root / "killed/predictions.jsonl").exists()
    with open(progress, "ab") as handle:  # a kill can also cut a line short
        handle.write(b'{"batch": 5, "recor')

    result = run(command(root / "killed"), root)
    assert (root / "killed/predictions.jsonl").read_bytes() == expected
    assert not (root / "killed/.progress").exists()
    assert f'"resumed_batches": {finished}' in (root / "killed/provenance.json").read_text()
    assert "12 questions" in result.stdout


def test_provenance_says_where_the_job_time_went_and_which_cpu_kernel_ran(job):
    root, command = job
    out = root / "timed"
    run(command(out), root)
    record = json.loads((out / "provenance.json").read_text())
    timings = record["timings"]
    assert len(timings["chunks_s"]) == 6 and all(s >= 0 for s in timings["chunks_s"])  # 12 questions, chunks of 2
    assert timings["process_start_s"] > 0 and timings["model_load_s"] > 0
    assert sum(timings["chunks_s"]) + timings["model_load_s"] <= record["wall_time_s"] + 0.01
    assert record["cpu_kernels"]["kernel"] in ("packed", "modules")
    assert record["cpu_kernels"]["how"].startswith(("measured", "remembered", "not measured, the machine is busy"))
    assert (record["model"].get("cpu_kernels") == "modules") == (record["cpu_kernels"]["kernel"] == "modules")
    assert record["host"]["cpu"]["model"] and record["host"]["cpu"]["isa"]

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from job_overheads import job_row

    row = job_row(record)
    assert row["job"] == "demo/wo-rag" and row["chunks"] == 6
    assert row["total_s"] == pytest.approx(record["wall_time_s"] + timings["process_start_s"])
    # the fast path's split of answering: the shared prefix and 12 prompts prefilled, then decode steps
    engine = timings["engine"]
    assert engine["prefill_tokens"] > 12 and engine["decode_steps"] > 0
    assert engine["decode_steps"] <= engine["decode_rows"] <= 2 * engine["decode_steps"]  # batch_size 2
    assert 0 < engine["prefill_s"] + engine["decode_s"] <= sum(timings["chunks_s"]) + 0.01
    from job_overheads import engine_table

    table = engine_table([row])
    assert len(table) == 4 and table[2].startswith("| demo/wo-rag | ") and table[3].startswith("| all jobs | ")


@pytest.mark.parametrize("setting, value", [("batch_size", 4), ("chunk_size", 3), ("max_new_tokens", 12)])
def test_a_resume_after_a_settings_change_is_never_mixed(job, setting, value):
    """Killed with one setting, rerun with another: the rerun equals an uninterrupted run with the new
    setting (the old batches are discarded, and provenance says how many), never a mix of the two."""
    root, command = job
    changed = root / f"params-{setting}.yaml"
    changed.write_text((root / "params.yaml").read_text())
    data = yaml.safe_load(changed.read_text())
    data["generation"][setting] = value
    changed.write_text(yaml.safe_dump(data, sort_keys=False))

    def with_params(args, params):
        return [*args[:3], "--params", params, *args[3:]]

    run(with_params(command(root / f"{setting}-straight"), changed.name), root)
    out = root / f"{setting}-killed"
    finished = start_and_kill(command(out), root, out / ".progress/rank0.jsonl", 2)
    assert finished >= 2
    result = run(with_params(command(out), changed.name), root)
    assert (out / "predictions.jsonl").read_bytes() == (root / f"{setting}-straight/predictions.jsonl").read_bytes()
    record = json.loads((out / "provenance.json").read_text())
    assert record["discarded_batches"] == finished and record["resumed_batches"] == 0
    assert re.search(r"made with different [a-z, ]*settings", result.stderr), result.stderr[:600]


def test_a_second_process_cannot_write_a_run_in_progress(job):
    """An orphaned job (its Snakemake parent killed) still running: a rerun stops and names its pid."""
    root, command = job
    out = root / "contended"
    first = subprocess.Popen(command(out), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        progress = out / ".progress/rank0.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and not progress.exists():
            time.sleep(0.05)
        second = run(command(out), root, check=False)
        assert second.returncode == 2, second.stderr
        assert f"another process (pid {first.pid}) is writing this run" in second.stderr
    finally:
        first.kill()
        first.wait()


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
