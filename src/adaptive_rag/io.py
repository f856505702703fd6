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
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import InputError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
