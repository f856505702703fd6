"""A generation job's progress as lines on the terminal it shares with Snakemake and other jobs.

Why it is built this way:
- Snakemake starts a job's shell command with Snakemake's own stderr, and the rule sends everything
  the command prints to the job's log (`> {log} 2>&1`). The generate rule opens one more descriptor on
  Snakemake's stderr before those redirections (`3>&2`) and passes its number (`--progress-fd 3`):
  the progress reaches the terminal while the log keeps the whole output, tqdm bar included.
- Several jobs, and Snakemake itself, write to that terminal at once. So every update is one whole
  line naming its job, written with a single write(): lines of different jobs interleave but never
  mix. An in-place bar (carriage returns, cursor movement) would overwrite another job's bar or run
  into Snakemake's own messages.
- On a terminal the job's name is bold and, while a chunk is being generated, a line comes every
  `HEARTBEAT_S` seconds too (the model calls and cache hits move before the chunk's questions are
  done). Anything else (a pipe, a file, a CI log) gets plain lines, one per finished chunk.
- Best effort: a stream that goes away (a closed terminal) ends the lines, never the job.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from typing import Callable, Iterator

from .errors import ConfigError

log = logging.getLogger("adaptive_rag.live_progress")
HEARTBEAT_S = 30.0
BOLD, RESET = "\x1b[1m", "\x1b[0m"


def check_progress_fd(fd: int) -> None:
    """`fd` must be open for writing: a number the shell did not open is a mistake to report, not to
    write to (it may be some other file of this process)."""
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise ConfigError(f"--progress-fd {fd}: not an open file descriptor (open it in the shell, "
                          f"e.g. `{fd}>&2` for the shell's stderr)") from None
    if mode == os.O_RDONLY:
        raise ConfigError(f"--progress-fd {fd}: open for reading only (open it for writing, e.g. `{fd}>&2`)")


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_line(label: str, done: int, total: int, resumed: int, elapsed: float,
                  calls: tuple[int, int] | None, done_at: float | None = None) -> str:
    """`label: 32/48 questions (67%) in 35 s, 0.914 q/s, 412 model calls (11.8/s), 120 cache hits, ETA 18 s`.

    `elapsed`: seconds since generation began; `done_at`: when the last chunk finished (default: now).
    Questions per second count what this process did by then (`resumed` questions came from an earlier
    run's progress log), and the ETA, shown once it has finished a question, counts down from the
    finish they project (then, if that passes, from the pace so far). `calls` is (answered from the cache, answered by the model), or None without
    a call cache; they move within a chunk, so their rate runs to now."""
    done_at = elapsed if done_at is None else done_at
    percent = round(100 * done / total) if total else 100
    parts = [f"{label}: {done}/{total} questions ({percent}%) in {duration(elapsed)}"]
    fresh = done - resumed
    if done_at > 0 and fresh > 0:
        parts.append(f"{fresh / done_at:.3g} q/s")
    if calls is not None:
        hits, misses = calls
        rate = f" ({(hits + misses) / elapsed:.3g}/s)" if elapsed > 0 and hits + misses else ""
        parts.append(f"{hits + misses} model calls{rate}, {hits} cache hits")
    if done >= total:
        parts.append("finished")
    elif fresh > 0:
        remaining = done_at * (total - done) / fresh - (elapsed - done_at)
        if remaining <= 0:  # slower than the projection: estimate again at the pace so far, wait included
            remaining = elapsed * (total - done) / fresh
        parts.append(f"ETA {duration(remaining)}")
    return ", ".join(parts)


class LiveProgress:
    """The progress lines of one job on the descriptor `fd` (which it does not close)."""

    def __init__(self, fd: int, label: str, total: int, done: int,
                 calls: Callable[[], tuple[int, int]] | None = None, clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float | None = HEARTBEAT_S):
        self.fd: int | None = fd
        self.terminal = os.isatty(fd)
        self.label = f"{BOLD}{label}{RESET}" if self.terminal else label
        self.total, self.done, self.resumed = total, done, done
        self.calls, self.clock = calls, clock
        self.heartbeat_s = heartbeat_s if self.terminal else None
        self.started = self.last_line = clock()
        self.done_at = 0.0  # seconds from the start to the last finished chunk
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "LiveProgress":
        self.write()
        if self.heartbeat_s:
            self._thread = threading.Thread(target=self._beat, name="live-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def update(self, questions: int) -> None:
        """A chunk of `questions` is done."""
        self.done += questions
        self.done_at = self.clock() - self.started
        self.write()

    def tick(self) -> None:
        """A heartbeat: a line when none was written for `heartbeat_s` seconds."""
        if self.heartbeat_s and self.clock() - self.last_line >= self.heartbeat_s:
            self.write()

    def line(self) -> str:
        return progress_line(self.label, self.done, self.total, self.resumed, self.clock() - self.started,
                             self.calls() if self.calls else None, self.done_at)

    def write(self) -> None:
        with self._lock:
            if self.fd is None:
                return
            data = (self.line() + "\n").encode("utf-8", "replace")
            try:
                os.write(self.fd, data)
            except OSError as exc:  # the terminal went away: the job goes on, its log has the rest
                log.warning("progress lines stopped (descriptor %d: %s)", self.fd, exc.strerror or exc)
                self.fd = None
            self.last_line = self.clock()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s / 3):
            self.tick()


class JobProgress:
    """Where a generation job reports its finished chunks: its tqdm bar (on stderr, i.e. the job's log)
    and, when the rule passed a descriptor, its live lines."""

    def __init__(self, bar, live: LiveProgress | None):
        self.bar, self.live = bar, live

    def update(self, questions: int) -> None:
        self.bar.update(questions)
        if self.live is not None:
            self.live.update(questions)


@contextlib.contextmanager
def job_progress(label: str, total: int, done: int, shown: bool, progress_fd: int | None,
                 lm) -> Iterator[JobProgress]:
    """The progress of the generation job `label` (dataset/method): `total` questions, `done` of them
    already in its progress log; nothing at all unless `shown` (only the main process shows it). `lm`
    (None when nothing is left to generate) gives the call counts when it is wrapped in the call cache."""
    from tqdm import tqdm

    cache = getattr(lm, "cache", None)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=total, initial=done, desc=label, unit=" q", disable=not shown))
        live = None
        if shown and progress_fd is not None:
            live = stack.enter_context(LiveProgress(progress_fd, f"generate {label}", total, done,
                                                    cache.answered if cache is not None else None))
        yield JobProgress(bar, live)
