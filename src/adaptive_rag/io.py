"""Small file helpers shared by every step.

Outputs are written to a temporary sibling and renamed into place, so a killed step never
leaves a half-written file that Snakemake or DVC could mistake for a finished one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from .errors import InputError

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
    """Write `path` through a hidden temporary sibling renamed into place when the block ends; the
    file gets the mode `open(path, "w")` would give a new file (0666 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    tmp, fd = _hidden_sibling(path, ".tmp", lambda name: os.open(name, flags, 0o666))
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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


def require_file(path: str | os.PathLike, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} not found: {path}")
    return path


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

    path = require_file(path, what)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=unique_key_loader())  # noqa: S506 - a SafeLoader
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason})") from None
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
