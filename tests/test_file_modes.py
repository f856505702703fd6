"""Outputs get the permissions the user's umask gives any new file: a step's results on a shared server
are readable by the group under umask 022 or 027, and by nobody else under 077."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest

from adaptive_rag.io import atomic_write, give_files_open_modes, staging_dir, write_json


@contextlib.contextmanager
def umask(value: int):
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o077, 0o600), (0o027, 0o640)])
def test_atomic_write_gives_the_mode_a_plain_open_gives(tmp_path, mask, expected):
    with umask(mask):
        with open(tmp_path / "plain.txt", "w") as handle:
            handle.write("x")
        with atomic_write(tmp_path / "text.txt") as handle:
            handle.write("x")
        with atomic_write(tmp_path / "bytes.bin", "wb") as handle:
            handle.write(b"x")
        write_json(tmp_path / "nested" / "record.json", {"a": 1})
    assert mode(tmp_path / "plain.txt") == expected
    for name in ("text.txt", "bytes.bin", "nested/record.json"):
        assert mode(tmp_path / name) == expected, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bytes.bin", "nested", "plain.txt", "text.txt"]


def test_atomic_write_leaves_nothing_behind_when_the_block_fails(tmp_path):
    with pytest.raises(ZeroDivisionError), atomic_write(tmp_path / "out.txt") as handle:
        handle.write("half")
        1 / 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask, directory, file", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)])
def test_a_staging_directory_and_its_files_follow_the_umask(tmp_path, mask, directory, file):
    with umask(mask):
        staged = staging_dir(tmp_path / "index")
        (staged / "weights.bin").write_bytes(b"x")
        os.chmod(staged / "weights.bin", 0o600)  # as safetensors writes its files
        give_files_open_modes(staged)
    assert staged.parent == tmp_path and staged.name.startswith(".index.") and staged.name.endswith(".tmp")
    assert (mode(staged), mode(staged / "weights.bin")) == (directory, file)


def test_a_materialised_model_is_group_readable_under_umask_022(tiny_llama_dir, tmp_path):
    from adaptive_rag.lm.models import materialise

    with umask(0o022):
        materialise(str(tiny_llama_dir), tmp_path / "models" / "tiny")
    out = tmp_path / "models" / "tiny"
    assert mode(out) == 0o755
    files = {p.name: mode(p) for p in out.iterdir()}
    assert "model.safetensors" in files and "identity.json" in files
    assert set(files.values()) == {0o644}, files
