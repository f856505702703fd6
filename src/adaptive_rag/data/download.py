"""Fetch large remote inputs (corpora, checkpoints) once, resumably, and verified.

Why it works this way:
- urllib, not requests: requests is not a declared dependency (it is only installed as someone
  else's dependency), and resuming needs nothing but a Range header and the status code, which
  urllib exposes directly. One thing fewer to pin.
- Bytes land in `<name>.part` and are renamed only once size and sha256 check out, so a file under
  its final name is always complete and verified (the promise `io.atomic_write` makes for outputs).
  A `.part` left by a dropped connection is kept, so a rerun resumes a 13 GB transfer instead of
  restarting it; a `.part` that fails verification is deleted, since resuming it would only
  reproduce the same wrong bytes.
- Mirrors are local directories (a shared read-only data folder): a verified copy there is
  symlinked, never copied, because these files can be 13 GB.
- http.client returns a short body *silently* when a connection drops, so completeness is checked
  against Content-Length / Content-Range, never assumed from the end of the stream.
- `file://` URLs go through the same code (a local mirror of the remote layout, a test's stand-in):
  a missing or unreadable local file fails at once, since retrying cannot make it appear, and a
  left-over `.part` is rewritten from zero, since a local file has no Range support to resume with.
- A file with no pinned sha256 is hashed anyway and the digest logged and returned so that it can
  be pinned; it is reported as unverified, never as verified. With neither size nor sha256 pinned,
  any existing file (or mirror copy) of that name is accepted: there is nothing to check it against.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from ..errors import InputError
from ..io import sha256_file, storage_error

log = logging.getLogger("adaptive_rag.data")
CHUNK = 1 << 20
TIMEOUT_S = 60.0  # per socket operation, not for the whole transfer
BACKOFF_S = 2.0  # wait before retry n is n * BACKOFF_S


@dataclass(frozen=True)
class RemoteFile:
    url: str
    filename: str
    sha256: str | None = None  # hex
    size: int | None = None  # bytes

    def __post_init__(self) -> None:
        if self.filename in ("", ".", "..") or Path(self.filename).name != self.filename:
            raise InputError(f"{self.url}: filename must be a plain file name, got {self.filename!r}")


@dataclass(frozen=True)
class Fetched:
    path: Path
    sha256: str  # digest of the file at `path`, computed whether or not one was pinned
    verified: bool  # True only when a pinned sha256 was checked and matched


class _Incomplete(Exception):
    """The transfer stopped early; the next attempt resumes from what is on disk."""


def fetch(remote: RemoteFile, dest_dir: str | os.PathLike, mirrors: Iterable[str | os.PathLike] = (),
          retries: int = 3, progress: bool = True) -> Path:
    """`dest_dir/remote.filename`, checked against whatever `remote` pins (see `fetch_with_sha256`)."""
    return fetch_with_sha256(remote, dest_dir, mirrors, retries, progress).path


def fetch_with_sha256(remote: RemoteFile, dest_dir: str | os.PathLike, mirrors: Iterable[str | os.PathLike] = (),
                      retries: int = 3, progress: bool = True) -> Fetched:
    """Use the existing file, else a mirror's copy (symlinked), else download; the digest is returned."""
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / remote.filename
    if final.exists():
        digest, problem = _check(final, remote)
        if problem is None:
            return _done(final, remote, digest)
        log.warning("%s does not match %s (%s); fetching it again", final, remote.url, problem)
    if os.path.lexists(final):
        final.unlink()  # a stale file or a stale/dangling symlink; a link's target is never touched

    for mirror in mirrors:
        candidate = Path(os.path.abspath(Path(mirror) / remote.filename))
        if not candidate.is_file():
            continue
        digest, problem = _check(candidate, remote)
        if problem is not None:
            log.warning("ignoring mirror copy %s: %s", candidate, problem)
            continue
        link = final.with_name(f".{final.name}.link")
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(candidate)
        os.replace(link, final)
        return _done(final, remote, digest)

    part = final.with_name(final.name + ".part")
    _download(remote, part, retries, progress)
    digest, problem = _check(part, remote)
    if problem is not None:
        part.unlink()
        raise InputError(f"download of {remote.url} does not match: {problem} (deleted {part})")
    os.replace(part, final)
    return _done(final, remote, digest)


def _check(path: Path, remote: RemoteFile) -> tuple[str | None, str | None]:
    """(sha256 if it had to be computed, why `path` is not `remote` or None)."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return None, f"expected {remote.size} bytes, got {size} bytes"
    if remote.sha256 is None:
        return None, None
    digest = sha256_file(path)
    if digest != remote.sha256.lower():
        return digest, f"expected sha256={remote.sha256}, got sha256={digest}"
    return digest, None


def _done(path: Path, remote: RemoteFile, digest: str | None) -> Fetched:
    if remote.sha256 is not None:
        return Fetched(path, digest, verified=True)
    digest = sha256_file(path)
    log.warning("no checksum pinned for %s; got sha256=%s", remote.url, digest)
    return Fetched(path, digest, verified=False)


def _is_local(url: str) -> bool:
    return urllib.parse.urlsplit(url).scheme.lower() == "file"


def _download(remote: RemoteFile, part: Path, retries: int, progress: bool) -> None:
    for attempt in range(retries + 1):
        try:
            return _transfer(remote, part, progress)
        except urllib.error.HTTPError as exc:
            if exc.code < 500:  # 404, 403...: asking again will not help
                raise InputError(f"cannot download {remote.url}: HTTP {exc.code} {exc.reason}") from None
            error: Exception = exc
        except urllib.error.URLError as exc:
            if _is_local(remote.url):  # no such file, a directory, no permission: asking again will not help
                reason = exc.reason
                why = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
                raise InputError(f"cannot download {remote.url}: {why}") from None
            error = exc
        except OSError as exc:
            if (problem := storage_error(exc, part)) is not None:  # a full disk here: retrying cannot help
                raise problem from None
            error = exc
        except (http.client.HTTPException, _Incomplete) as exc:
            error = exc
        if attempt < retries:
            log.warning("download of %s interrupted (%s); retry %d of %d", remote.url, error, attempt + 1, retries)
            time.sleep(BACKOFF_S * (attempt + 1))
    kept = part.stat().st_size if part.exists() else 0
    raise InputError(f"download of {remote.url} failed after {retries + 1} attempts ({error}); "
                     f"{kept} bytes kept in {part}, rerun to resume")


def _transfer(remote: RemoteFile, part: Path, progress: bool) -> None:
    offset = part.stat().st_size if part.exists() else 0
    if offset and _is_local(remote.url):
        log.info("%s: a local file cannot be resumed; copying it again from byte 0", remote.url)
        part.unlink()
        offset = 0
    if remote.size is not None and offset >= remote.size:
        if offset == remote.size:
            return  # finished earlier but never renamed; verification decides
        part.unlink()
        offset = 0
    request = urllib.request.Request(remote.url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code != 416 or not offset:
            raise
        match = re.fullmatch(r"bytes \*/(\d+)", exc.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == offset:
            return  # the .part already holds the whole file
        log.warning("%s: cannot resume at byte %d (HTTP 416); restarting from zero", remote.url, offset)
        part.unlink()
        return _transfer(remote, part, progress)
    with response:
        if response.status == 206:
            match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:
                raise _Incomplete(f"asked for bytes from {offset}, got Content-Range "
                                  f"{response.headers.get('Content-Range')!r}")
            total = int(match.group(2)) if match.group(2) != "*" else remote.size
        else:
            if offset:
                log.warning("%s: server ignored the Range request; restarting from zero", remote.url)
            offset = 0
            length = response.headers.get("Content-Length")
            total = int(length) if length else remote.size
        with open(part, "ab" if offset else "wb") as out, tqdm(
                total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
                desc=remote.filename, disable=not progress) as bar:
            while block := response.read(CHUNK):
                out.write(block)
                bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
    received = part.stat().st_size
    if total is not None and received < total:
        raise _Incomplete(f"connection closed at byte {received} of {total}")
