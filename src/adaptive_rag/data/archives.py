"""Unpack named members of downloaded zip/tar archives (several benchmarks ship only as archives).

Only the members params asks for are extracted, each next to the archive under its base name,
through a temporary file and a rename, so a killed extraction never leaves a truncated dataset.
Writing a member's content to `<directory>/<base name>` as a new regular file is also what keeps
extraction inside the directory whatever the archive holds: a member path with `..` or a leading `/`
loses both with its directories, and a tar link is read through to the member it points at inside
the archive (one pointing outside it is no regular file, and refused), never created as a link.
Two members with one base name would overwrite each other: `member_problem` refuses them when
params is read, before anything is fetched.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from ..errors import InputError
from ..io import atomic_write


def member_file_name(member: str) -> str:
    """The file a member is extracted to, in the download's directory: its base name."""
    return PurePosixPath(member).name


def member_problem(members: list[str] | tuple[str, ...], archive: Path, dest_dir: Path) -> str | None:
    """Why `members` of `archive` cannot all be extracted into `dest_dir`, or None."""
    written: dict[str, str] = {}
    for member in members:
        name = member_file_name(member)
        if name in ("", ".", ".."):
            return f"member {member!r} names no file (its base name is {name!r})"
        if dest_dir / name == archive:
            return (f"member {member!r} would be extracted over the downloaded file {archive} itself (members land "
                    f"under their base name): if it is an archive, give the download another `filename:`; if not, "
                    f"leave `extract` out to keep it as downloaded")
        if name in written:
            return (f"members {written[name]!r} and {member!r} would both be extracted to {dest_dir / name} "
                    f"(members land under their base name, so the second would overwrite the first); extract one "
                    f"of them here and the other under a second `downloads:` entry with the same url")
        written[name] = member
    return None


def extract_members(archive: Path, members: list[str] | tuple[str, ...], dest_dir: Path) -> list[Path]:
    """Unpack `members` of the zip/tar `archive` into `dest_dir`; with no members, the file is not even opened."""
    if not members:
        return []
    problem = member_problem(members, archive, dest_dir)
    if problem:
        raise InputError(problem)
    written = []
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
            for member in members:
                if member not in names:
                    raise InputError(f"{archive} has no member {member!r}; it has: {_preview(sorted(names))}")
                with zf.open(member) as src, atomic_write(dest_dir / member_file_name(member), "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                written.append(dest_dir / member_file_name(member))
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
                with src, atomic_write(dest_dir / member_file_name(member), "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                written.append(dest_dir / member_file_name(member))
    except tarfile.ReadError:
        raise InputError(f"{archive} is neither a zip nor a tar archive, so it has no members to extract "
                         f"(leave `extract` out to keep the file as it was downloaded)") from None
    return written


def _preview(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} entries)" if len(names) > limit else "")
