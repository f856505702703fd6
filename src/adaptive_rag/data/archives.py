"""Unpack named members of downloaded zip/tar archives (several benchmarks ship only as archives).

Only the members params asks for are extracted, each next to the archive under its base name,
through a temporary file and a rename, so a killed extraction never leaves a truncated dataset.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

from ..errors import InputError
from ..io import atomic_write


def extract_members(archive: Path, members: list[str] | tuple[str, ...], dest_dir: Path) -> list[Path]:
    """Unpack `members` of the zip/tar `archive` into `dest_dir`; with no members, the file is not even opened."""
    if not members:
        return []
    written = []
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
            for member in members:
                if member not in names:
                    raise InputError(f"{archive} has no member {member!r}; it has: {_preview(sorted(names))}")
                with zf.open(member) as src, atomic_write(dest_dir / Path(member).name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                written.append(dest_dir / Path(member).name)
        return written
    try:
        with tarfile.open(archive) as tf:
            for member in members:
                try:
                    src = tf.extractfile(member)
                except KeyError:
                    src = None
                if src is None:
                    raise InputError(f"{archive} has no regular file {member!r}; it has: {_preview(tf.getnames())}")
                with src, atomic_write(dest_dir / Path(member).name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                written.append(dest_dir / Path(member).name)
    except tarfile.ReadError:
        raise InputError(f"{archive} is neither a zip nor a tar archive, so it has no members to extract "
                         f"(leave `extract` out to keep the file as it was downloaded)") from None
    return written


def _preview(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} entries)" if len(names) > limit else "")
