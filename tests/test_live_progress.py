"""A generation job's live progress: whole lines naming the job on the descriptor the rule opens on
Snakemake's stderr (bold, with heartbeats, on a terminal; plain, per chunk, elsewhere), while the job's
log keeps its whole output."""

from __future__ import annotations

import logging
import os
import time

import pytest

from adaptive_rag import cli
from adaptive_rag.errors import ConfigError
from adaptive_rag.live_progress import BOLD, RESET, LiveProgress, check_progress_fd, duration, progress_line

from conftest import REPO, copy_workflow, edit_params, run, snakemake


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read_all(fd: int) -> str:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):  # nothing left; a pty's reader gets EIO once the writer closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_line_says_questions_rates_cache_hits_and_eta():
    # 32 of 48 in 35 s: 0.914 q/s; 412 calls / 35 s = 11.8/s; ETA 35 s x 16 left / 32 done = 17.5 -> 18 s
    assert progress_line("generate demo/flare", 32, 48, 0, 35.0, (120, 292)) == (
        "generate demo/flare: 32/48 questions (67%) in 35 s, 0.914 q/s, 412 model calls (11.8/s), "
        "120 cache hits, ETA 18 s")
    # resumed with 32 done: rates and ETA count this process's 8 questions in 10 s; no call cache
    assert progress_line("j", 40, 48, 32, 10.0, None) == "j: 40/48 questions (83%) in 10 s, 0.8 q/s, ETA 10 s"
    assert progress_line("j", 32, 48, 32, 0.0, (0, 0)) == "j: 32/48 questions (67%) in 0 s, 0 model calls, 0 cache hits"
    assert progress_line("j", 48, 48, 0, 125.0, None) == "j: 48/48 questions (100%) in 2 min 05 s, 0.384 q/s, finished"
    # between chunks: q/s as at the last chunk (35 s), the ETA counting down from its projection (17.5 s)
    assert progress_line("j", 32, 48, 0, 45.0, None, done_at=35.0) == (
        "j: 32/48 questions (67%) in 45 s, 0.914 q/s, ETA 8 s")
    # past the projection: 16 questions left at 32 per 60 s
    assert progress_line("j", 32, 48, 0, 60.0, None, done_at=35.0) == (
        "j: 32/48 questions (67%) in 1 min 00 s, 0.914 q/s, ETA 30 s")
    assert (duration(59.6), duration(3725)) == ("1 min 00 s", "1 h 02 min")


def test_the_cache_counts_a_call_when_it_is_answered_not_when_it_is_asked(tmp_path):
    from adaptive_rag.lm.cache import CallCache

    cache = CallCache(tmp_path / "calls.sqlite")
    assert cache.get_many("score", ["a", "b"]) == {}  # two misses asked: the model now works on them
    assert cache.answered() == (0, 0) and cache.stats()["score"] == {"hits": 0, "misses": 2}
    cache.put_many("score", [("a", [0.5]), ("b", [0.25])])
    assert cache.answered() == (0, 2)
    assert cache.get_many("score", ["a"]) == {"a": [0.5]}
    assert cache.answered() == (1, 2)


def test_on_a_pipe_the_lines_are_plain_one_per_chunk():
    read, write = os.pipe()
    clock, calls = Clock(), [(0, 0)]
    try:
        with LiveProgress(write, "generate demo/wo-rag", 4, 0, lambda: calls[-1], clock, heartbeat_s=0.01) as live:
            clock.now += 30
            live.tick()  # no heartbeat off a terminal
            calls.append((1, 5))
            live.update(2)
            clock.now += 30
            live.update(2)
        assert live._thread is None
    finally:
        os.close(write)
    assert read_all(read).splitlines() == [
        "generate demo/wo-rag: 0/4 questions (0%) in 0 s, 0 model calls, 0 cache hits",
        "generate demo/wo-rag: 2/4 questions (50%) in 30 s, 0.0667 q/s, 6 model calls (0.2/s), 1 cache hits, "
        "ETA 30 s",
        "generate demo/wo-rag: 4/4 questions (100%) in 1 min 00 s, 0.0667 q/s, 6 model calls (0.1/s), "
        "1 cache hits, finished",
    ]
    os.close(read)


def test_on_a_terminal_the_name_is_bold_and_a_heartbeat_comes_between_chunks():
    controller, terminal = os.openpty()
    clock = Clock()
    try:
        live = LiveProgress(terminal, "generate demo/flare", 48, 0, None, clock, heartbeat_s=15)
        live.write()
        clock.now += 10
        live.tick()  # too early
        clock.now += 5
        live.tick()
        live.update(16)
        clock.now += 14
        live.tick()  # 14 s after the chunk's line
        clock.now += 1
        live.tick()
    finally:
        os.close(terminal)
    lines = read_all(controller).replace("\r\n", "\n").splitlines()
    os.close(controller)
    name = f"{BOLD}generate demo/flare{RESET}"
    assert lines == [f"{name}: 0/48 questions (0%) in 0 s", f"{name}: 0/48 questions (0%) in 15 s",
                     f"{name}: 16/48 questions (33%) in 15 s, 1.07 q/s, ETA 30 s",
                     f"{name}: 16/48 questions (33%) in 30 s, 1.07 q/s, ETA 15 s"]


def test_the_heartbeat_thread_writes_on_its_own_and_stops_with_the_job():
    controller, terminal = os.openpty()
    try:
        with LiveProgress(terminal, "generate demo/flare", 48, 0, heartbeat_s=0.05) as live:
            time.sleep(0.5)
        assert not live._thread.is_alive()
    finally:
        os.close(terminal)
    lines = read_all(controller).splitlines()
    os.close(controller)
    assert len(lines) >= 3 and all("0/48 questions" in line for line in lines)


def test_a_closed_terminal_stops_the_lines_not_the_job(caplog):
    read, write = os.pipe()
    os.close(read)
    try:
        with caplog.at_level(logging.WARNING, "adaptive_rag.live_progress"):
            with LiveProgress(write, "generate demo/wo-rag", 4, 0) as live:
                live.update(2)
                live.update(2)
    finally:
        os.close(write)
    assert live.fd is None and live.done == 4
    assert [r.getMessage() for r in caplog.records] == [f"progress lines stopped (descriptor {write}: Broken pipe)"]


def test_the_descriptor_must_be_open_for_writing(tmp_path):
    read, write = os.pipe()
    os.close(write)
    with pytest.raises(ConfigError) as closed:
        check_progress_fd(write)
    assert str(closed.value) == (f"--progress-fd {write}: not an open file descriptor (open it in the shell, "
                                 f"e.g. `{write}>&2` for the shell's stderr)")
    with pytest.raises(ConfigError) as reading:
        check_progress_fd(read)
    assert str(reading.value) == f"--progress-fd {read}: open for reading only (open it for writing, e.g. `{read}>&2`)"
    os.close(read)


def test_generate_refuses_a_descriptor_the_shell_did_not_open(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert cli.main(["generate", "--dataset", "demo", "--method", "wo-rag", "--split", "s.jsonl", "--model-dir", "m",
                     "--out-dir", "o", "--progress-fd", "987"]) == 2
    assert capsys.readouterr().err == ("error: --progress-fd 987: not an open file descriptor (open it in the "
                                       "shell, e.g. `987>&2` for the shell's stderr)\n")


def test_a_run_reports_each_chunk_with_its_calls(tiny_model_dir, tmp_path, monkeypatch):
    from adaptive_rag.config import load_params
    from adaptive_rag.runner import run_generation

    copy_workflow(tmp_path)
    edit_params(tmp_path, lambda d: (
        d["generation"].update(max_new_tokens=4, threads=1, batch_size=2, chunk_size=2,
                               cache="data/cache/calls.sqlite"),
        d["datasets"]["demo"]["sample"].update(size=4)))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["split", "--dataset", "demo", "--out", "data/splits/demo.jsonl"]) == 0
    read, write = os.pipe()
    try:
        record = run_generation(load_params("params.yaml"), "demo", "wo-rag", tmp_path / "data/splits/demo.jsonl",
                                tiny_model_dir, None, tmp_path / "run", progress_fd=write)
    finally:
        os.close(write)
    lines = read_all(read).splitlines()
    os.close(read)
    calls = record["call_cache"]["generate"]["misses"]
    assert calls >= 4 and record["call_cache"]["generate"]["hits"] == 0
    assert [line.split(" in ")[0] for line in lines] == [f"generate demo/wo-rag: {n}/4 questions ({100 * n // 4}%)"
                                                          for n in (0, 2, 4)]
    assert lines[0].endswith("0 model calls, 0 cache hits")
    assert f", {calls} model calls (" in lines[-1] and lines[-1].endswith(", 0 cache hits, finished")


@pytest.mark.slow
def test_snakemake_shows_each_jobs_progress_and_the_log_keeps_the_output(tiny_llama_dir, tmp_path):
    copy_workflow(tmp_path)
    edit_params(tmp_path, lambda d: (
        d["model"].update(name="tiny", source=str(tiny_llama_dir)),
        d["generation"].update(max_new_tokens=4, threads=1, batch_size=2, chunk_size=2, cache=None),
        d["datasets"]["demo"]["sample"].update(size=4),
        d["methods"].update({"wo-rag-again": {"type": "wo-rag"}})))
    methods = ("wo-rag", "wo-rag-again")
    targets = [f"data/runs/demo/{method}/predictions.jsonl" for method in methods]
    result = snakemake(tmp_path, *targets)  # two generate jobs at once (1 thread each, 2 cores)
    for method in methods:
        lines = [line for line in result.stderr.splitlines() if line.startswith(f"generate demo/{method}: ")]
        assert [line.split(" in ")[0] for line in lines] == [
            f"generate demo/{method}: {n}/4 questions ({100 * n // 4}%)" for n in (0, 2, 4)], result.stderr
        assert lines[-1].endswith(", finished")
        log = (tmp_path / f"logs/generate/demo/{method}.log").read_text()
        assert f"demo/{method}: 100%" in log  # the tqdm bar
        assert f"generate demo/{method}: 4 questions in " in log  # the step's last line
        assert "questions (50%)" not in log
    assert "\x1b" not in result.stderr  # Snakemake's stderr is a pipe here: no escape codes

    # A job of a cluster executor runs in Snakemake's remote mode: no terminal, no descriptor 3.
    local = snakemake(tmp_path, "-n", "-p", "-f", targets[0])
    remote = snakemake(tmp_path, "-n", "-p", "-f", "--mode", "remote", targets[0])
    assert "--progress-fd 3 3>&2 > logs/generate/demo/wo-rag.log 2>&1" in local.stdout + local.stderr
    assert "--progress-fd" not in remote.stdout + remote.stderr
    assert "generate --dataset demo --method wo-rag" in remote.stdout + remote.stderr


def test_generate_help_documents_the_descriptor(capsys):
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--progress-fd N also write the run's progress" in text and "(3>&2)" in text
