"""Small file helpers shared by every step.

Outputs are written to a temporary sibling and renamed into place, so a killed step never
leaves a half-written file that Snakemake or DVC could mistake for a finished one. The same
property makes a failed write harmless: a full disk or a read-only directory stops a step with
one line (`storage_error`) naming the file, and rerunning it once fixed resumes.

Inputs are regular files: `file_problem` says what a path is when it is not (missing, a directory,
a named pipe, a device), for every command that reads one (`require_file`) and for `check-params`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from .errors import InputError, StorageError

RESUMES = "nothing finished is lost: {fix}, then rerun the same command, which resumes where it stopped"
# errno -> (what went wrong, what to do): the failures a user fixes outside the project. Worded for a
# read as well as a write where the errno can be either (permission), since a step may meet it in both.
STORAGE_FAILURES = {
    errno.ENOSPC: ("cannot write (no space left on device)", "free some space"),
    errno.EDQUOT: ("cannot write (disk quota exceeded)", "free some space or raise the quota"),
    errno.EROFS: ("cannot write (read-only file system)", "write to a writable file system"),
    errno.EACCES: ("permission denied", "give this user access to it (for an output, write access to its directory)"),
    errno.EPERM: ("operation not permitted", "give this user access to it (for an output, write access to its "
                                             "directory)"),
}
FILE_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
NOT_FOUND = "file not found"
IS_A_DIRECTORY = "is a directory, where a file is expected: name a file instead (the directory is left as it is)"
IS_A_FILE = "is a file, where a directory is expected: name a directory instead (the file is left as it is)"


def storage_error(exc: OSError, path: str | os.PathLike | None = None) -> StorageError | None:
    """The one-line error for an OSError the user can fix outside the project (a full disk, a read-only
    or unwritable directory, a directory where a file goes, a name too long), naming `path` (default:
    the error's own file name); None for any other, which stays a bug with its traceback. Every command
    reports these through here: `atomic_write`, the progress log and downloads name the file they were
    writing, and the CLI catches the rest."""
    where = path if path is not None else exc.filename
    where = f"{where}: " if where is not None else ""
    if exc.errno in STORAGE_FAILURES:
        what, fix = STORAGE_FAILURES[exc.errno]
        return StorageError(f"{where}{what}; {RESUMES.format(fix=fix)}")
    if exc.errno == errno.EISDIR:
        return StorageError(f"{where}{IS_A_DIRECTORY}")
    blocker = file_in_the_way(path if path is not None else exc.filename) \
        if exc.errno in (errno.EEXIST, errno.ENOTDIR) else None
    if blocker is not None:  # a directory to make, or to write in, is an existing file
        where_path = Path(path if path is not None else exc.filename)
        if blocker == where_path:
            return StorageError(f"{where}{IS_A_FILE}")
        return StorageError(f"{where}{blocker} is a file, so nothing can be written inside it: name a path "
                            f"under a directory (the file is left as it is)")
    if exc.errno == errno.ENAMETOOLONG:
        return StorageError(f"{where}a name in this path is longer than the file system allows (255 bytes on most "
                            f"file systems): shorten it")
    return None


def file_in_the_way(path: str | os.PathLike | None) -> Path | None:
    """The first of `path`'s directories (from the top), or `path` itself, that exists and is no
    directory: what makes creating `path` as a directory, or anything under it, fail with EEXIST or
    ENOTDIR. None when nothing is in the way (the error then had another cause)."""
    if path is None:
        return None
    path = Path(path)
    for candidate in (*reversed(path.parents), path):
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return None


def reported(exc: OSError, path: str | os.PathLike | None = None) -> BaseException:
    """`storage_error(exc, path)` where there is one, else `exc` itself: `raise reported(exc, path)`."""
    return storage_error(exc, path) or exc

T = TypeVar("T")


def _hidden_sibling(target: Path, suffix: str, create: Callable[[Path], T]) -> tuple[Path, T]:
    """`create(name)` for a new random hidden name beside `target`, retried while the name is taken.

    Unlike tempfile.mkstemp and mkdtemp (modes 0600 and 0700), the caller creates with the modes
    open() and mkdir() use, so the umask decides who can read an output: on a shared server a
    group-readable umask (022, 027) makes the results readable by colleagues, as for any file."""
    while True:
        candidate = target.parent / f".{target.name}.{secrets.token_hex(6)}{suffix}"
        try:
            return candidate, create(candidate)
        except FileExistsError:
            continue


def staging_dir(target: str | os.PathLike, suffix: str = ".tmp") -> Path:
    """A new hidden directory beside `target` to build it in and rename into place; mode 0777 less
    the umask, as `mkdir` makes it."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return _hidden_sibling(target, suffix, os.mkdir)[0]


def give_files_open_modes(directory: str | os.PathLike) -> None:
    """Give the files directly in a `staging_dir` the mode `open(path, "w")` would (0666 less the
    umask, read off the directory's own mode): some writers, safetensors among them, make 0600 files."""
    directory = Path(directory)
    mode = stat.S_IMODE(directory.stat().st_mode) & 0o666
    for path in directory.iterdir():
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    """A file handle whose content replaces `path` only once complete: a failed write leaves `path` as it
    was, and a full disk or an unwritable directory is `storage_error`'s one line naming `path`. The file
    gets the mode `open(path, "w")` would give a new file (0666 less the umask)."""
    path = Path(path)
    if path.is_dir():  # os.replace would refuse it only after all the writing
        raise StorageError(f"{path}: {IS_A_DIRECTORY}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp, fd = _hidden_sibling(path, ".tmp", lambda name: os.open(name, flags, 0o666))
    except OSError as exc:
        raise reported(exc, path) from None
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # the caller's own reads name their file; a write() names none
            raise reported(exc, path if exc.filename in (None, tmp) else None) from None
        raise


def dumps_line(record: dict) -> str:
    """One canonical JSON line: stable key order and no platform-dependent formatting."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    count = 0
    with atomic_write(path) as handle:
        for record in records:
            handle.write(dumps_line(record))
            count += 1
    return count


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_write(path) as handle:
        json.dump(obj, handle, ensure_ascii=False, indent=2, sort_keys=True)
        handle.write("\n")


def file_problem(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be read as an input file (`file not found`, `a directory, not a file`, `not a
    regular file (a named pipe (FIFO))`, ...), or None for a regular file (or a link to one). A pipe or
    a device would block a step or feed it endless bytes, so it is refused by name, not as missing."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return NOT_FOUND
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    kind = next((name for test, name in FILE_KINDS if test(mode)), "something else")
    return f"not a regular file ({kind})"


def require_file(path: str | os.PathLike, what: str, error: type[Exception] = InputError) -> Path:
    path = Path(path)
    problem = file_problem(path)
    if problem == NOT_FOUND:
        raise error(f"{what} not found: {path}")
    if problem is not None:
        raise error(f"{what} {path}: {problem}")
    return path


def read_text(path: str | os.PathLike, what: str, error: type[Exception] = InputError) -> str:
    """The UTF-8 text of a regular file; a missing or irregular file, or a byte that is not UTF-8, is
    `error` naming the file (and the line of the byte)."""
    path = require_file(path, what, error)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}: line {line}: not UTF-8 text ({exc.reason})") from None


@functools.lru_cache(maxsize=1)
def unique_key_loader():
    """A YAML SafeLoader that refuses a key given twice: plain YAML keeps the last of two equal keys
    silently, which in a params file or a prompt template hides an edit. Built on first use, so
    importing this module does not import yaml."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    continue  # an unhashable key: SafeLoader's own error follows
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {seen[key].line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def read_yaml(path: str | os.PathLike, what: str = "YAML file", error: type[Exception] = InputError) -> Any:
    """A YAML file (unique keys), or `error` naming the file and line (params files raise ConfigError)."""
    import yaml

    path = Path(path)
    text = read_text(path, what, error)
    try:
        return yaml.load(text, Loader=unique_key_loader())  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise error(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    path = require_file(path, what)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None


def iter_jsonl(path: str | os.PathLike, what: str = "JSONL file") -> Iterator[tuple[int, Any]]:
    """(1-based line number, parsed object) for each non-blank line; errors name the file and line."""
    path = require_file(path, what)
    with open(path, "rb") as handle:
        for lineno, raw_line in enumerate(handle, 1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{path}: line {lineno}: not UTF-8 text ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: line {lineno}: invalid JSON ({exc.msg})") from None


def read_jsonl(path: str | os.PathLike, what: str = "JSONL file") -> list[Any]:
    return [record for _, record in iter_jsonl(path, what)]


def recover_log(path: str | os.PathLike, trim: bool = True) -> list[Any]:
    """The records of an append-only JSONL log whose writer may have been killed mid-line: every
    complete line up to the first one that does not parse. With `trim` (only the log's own writer
    may ask for it) the torn tail is cut off the file, so the next append starts on a clean line."""
    records, good = [], 0
    with open(path, "rb") as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except ValueError:
                break
            good += len(line)
    if trim and good != os.path.getsize(path):
        with open(path, "r+b") as handle:
            handle.truncate(good)
    return records


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
