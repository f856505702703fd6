"""A generation run's progress logs: the finished batches, bound to exactly what produced them.

Why it is built this way:
- A resumed run must be byte-identical to an uninterrupted one with the same settings. Batches made
  under other settings, another split, model, index or code would otherwise be mixed in silently
  (a batch size changed between a kill and a rerun once "finished" eight questions with four). So
  every log begins with a key line: a digest of each of those inputs. A log whose key differs is
  discarded, and the message says which inputs changed.
- Each finished batch is checked against the batch it claims to be (its question ids), so even a
  log that matched by accident can never fill the wrong slot.
- One writer per log, enforced by an exclusive `flock` held while the run is alive. An orphaned
  process (its Snakemake parent killed) that still writes makes a rerun stop with its pid instead of
  two processes appending to one file. The kernel drops the lock when the process dies, so a killed
  run never leaves a stale lock behind.
- Logs of other processes (Accelerate ranks) are read, never trimmed: their writer may be alive.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import InputError
from .io import dumps_line, recover_log, reported, sha256_file

log = logging.getLogger("adaptive_rag.progress")
DIRNAME = ".progress"


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """The package's own source: a code change between a kill and a rerun counts as a change of inputs."""
    root = Path(__file__).resolve().parent
    hasher = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        hasher.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def file_digest(path: str | os.PathLike) -> str:
    return sha256_file(path)[:16]


class ProgressLog:
    """This process's append-only log under `<run>/.progress/rank<r>.jsonl`, plus its siblings'.

    `parts` maps each input's name (settings, split, model, ...) to a digest of it."""

    def __init__(self, run_dir: Path, rank: int, parts: dict[str, str]):
        self.directory = Path(run_dir) / DIRNAME
        self.path = self.directory / f"rank{rank}.jsonl"
        self.parts = dict(sorted(parts.items()))
        self.key = digest(self.parts)
        self._handle = None
        self.discarded = 0  # batches of this process's log dropped because their inputs differ

    def __enter__(self) -> "ProgressLog":
        try:
            return self._open()
        except OSError as exc:  # a full disk or a read-only run directory: one line, the finished batches kept
            raise reported(exc, self.path if exc.filename is None else None) from None

    def _open(self) -> "ProgressLog":
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+b")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise InputError(f"{self.path}: another process ({self._owner()}) is writing this run; wait for it "
                             "to finish or stop it, then rerun") from None
        self._handle = handle
        (self.directory / f"{self.path.stem}.owner").write_text(f"{os.getpid()}\n")
        entries = recover_log(self.path)
        header = entries[0] if entries else None
        if not (isinstance(header, dict) and header.get("key") == self.key):
            if entries:
                self.discarded = sum(1 for e in entries if isinstance(e, dict) and "batch" in e)
                log.warning("%s: discarding %d finished batch(es) made with different %s", self.path,
                            self.discarded, self.changed(header))
            handle.seek(0)
            handle.truncate()
            self._write({"key": self.key, "parts": self.parts})
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.close()  # releases the lock
            self._handle = None

    def changed(self, header: Any) -> str:
        old = header.get("parts", {}) if isinstance(header, dict) else {}
        names = [name for name in self.parts if old.get(name) != self.parts[name]]
        return ", ".join(names) if old else "inputs (a log without a key, from an older version)"

    def append(self, batch: int, records: list[dict]) -> None:
        self._write({"batch": batch, "records": records})

    def _write(self, entry: dict) -> None:
        """One entry, on disk before the next batch starts. A write cut short (a full disk) leaves a torn
        last line, which the next run's `recover_log` trims: every batch before it resumes."""
        try:
            self._handle.write(dumps_line(entry).encode("utf-8"))
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:
            raise reported(exc, self.path) from None

    def _owner(self) -> str:
        try:
            return "pid " + (self.directory / f"{self.path.stem}.owner").read_text().strip()
        except OSError:
            return "pid unknown"

    def finished(self, batch_ids: list[list[str]]) -> dict[int, list[dict]]:
        """Batch index -> records, from every process's log with this key, for batches whose question
        ids are exactly those of `batch_ids[index]`."""
        done: dict[int, list[dict]] = {}
        for path in sorted(self.directory.glob("rank*.jsonl")):
            entries = recover_log(path, trim=path == self.path)
            if not entries or not isinstance(entries[0], dict) or entries[0].get("key") != self.key:
                continue
            for entry in entries[1:]:
                b = entry.get("batch") if isinstance(entry, dict) else None
                if not isinstance(b, int) or not 0 <= b < len(batch_ids):
                    continue
                records = entry.get("records")
                ids = ([r.get("prediction", {}).get("id") if isinstance(r, dict) else None for r in records]
                       if isinstance(records, list) else None)
                if ids == batch_ids[b]:
                    done[b] = records
        return done
