"""Real daemons (munged, MariaDB, slurmdbd, slurmctld, slurmd, sshd) started on localhost for a test, each
in the foreground as a child of the test so that it is stopped by its own pid, even when the test fails.

Shared by the SLURM cluster (tests/slurm_cluster.py) and the SSH DVC remote (tests/test_dvc_ssh.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


def daemon_folder(tmp_path_factory, name: str, why_not: str | None) -> Path:
    """A scratch folder for daemons, or the test skipped with `why_not`, the reason they cannot run here."""
    if why_not:
        pytest.skip(why_not)
    return tmp_path_factory.mktemp(name)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_commands(names) -> list[str]:
    """The names, of `names`, that are neither on PATH nor in /usr/sbin (where Debian puts daemons)."""
    path = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"
    return [name for name in names if shutil.which(name, path=path) is None]


def wait_until(check, seconds: float, what: str, log: Path | None = None):
    """Poll `check()` until it returns something true and return that; after `seconds` fail naming `what`
    and the end of `log`."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"{what} after {seconds} s{':' if tail else ''}\n{tail}")
        time.sleep(0.2)


class Daemons:
    """Daemons started in order and stopped in reverse order, by pid: SIGTERM, then SIGKILL after 15 s."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None):
        self.folder, self.env = folder, env or dict(os.environ)
        self.running: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, *args) -> Path:
        """Run `args` (a daemon kept in the foreground) with its output in <folder>/<name>.out; that file."""
        out = self.folder / f"{name}.out"
        with out.open("ab") as sink:
            proc = subprocess.Popen([str(a) for a in args], stdout=sink, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env, cwd=self.folder)
        self.running.append((name, proc))
        return out

    def alive(self, name: str) -> bool:
        return any(n == name and proc.poll() is None for n, proc in self.running)

    def stop(self) -> None:
        while self.running:
            _, proc = self.running.pop()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
