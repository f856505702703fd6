"""A content-addressed cache of model calls, shared by every process of a study.

A study asks one model the same things many times: a rerun after a crash repeats finished work,
methods share first steps, and an ablation often changes only what happens after generation.
Caching the calls makes the repeats cost nothing, and keying on *everything* that can change a
result (model identity, operation, exact prompt, every decoding parameter) makes a cached result
indistinguishable from a fresh one.

One SQLite file holds the cache because parallel Snakemake jobs and Accelerate ranks all write to
it at once: WAL mode lets readers proceed during a write, and a busy timeout makes writers queue
instead of failing. The cache is an optimisation, never a dependency: a broken file is moved aside
and rebuilt, an unreadable row is a miss, a failed write is counted and skipped. No run dies
because of the cache.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import hashlib
import io
import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .base import (NO_EXTRAS, Attribution, Continuation, Extras, IGSettings, LanguageModel, Prompt, SampleSet,
                   SamplingParams, row_limits)

try:  # POSIX only; elsewhere concurrent first opens simply are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

log = logging.getLogger("adaptive_rag.lm")

SCHEMA_VERSION = "1"  # bump when the row layout or the value encoding changes: old files are moved aside
KEY_VERSION = 1  # bump when the key recipe changes: old rows simply stop matching
BUSY_TIMEOUT_S = 60.0
OPERATIONS = ("generate", "sample", "sample_set", "score", "judge")
_COLUMNS = ["key", "op", "value", "arrays", "checksum", "created"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,   -- sha256 of the canonical request (see call_key)
    op TEXT NOT NULL,       -- generate / sample / score, for inspection and pruning
    value TEXT NOT NULL,    -- the result as JSON, numpy arrays replaced by references
    arrays BLOB,            -- the referenced arrays, concatenated .npy records (exact bytes)
    checksum TEXT NOT NULL, -- sha256 of value and arrays: a damaged row must read as a miss
    created REAL NOT NULL
);
"""
_CHUNK = 500  # keys per SELECT, well under SQLite's bound-parameter limit

# Connections inherited through fork() must not be closed by the child (closing can checkpoint or
# unlink the parent's WAL); they are parked here so garbage collection never closes them either.
_ABANDONED: list[sqlite3.Connection] = []


class _Corrupt(Exception):
    """The file is not a cache this code can read; it is moved aside."""


class _Unencodable(TypeError):
    """A result holds something the exact encoding cannot represent; it is returned but not stored."""


# ---------------------------------------------------------------------------------------------
# Keys


def _canonical(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _plain(value: Any) -> Any:
    """Dataclass parameters as dicts, so adding a field to SamplingParams changes keys (Extras says
    itself which of its fields enter a key)."""
    if isinstance(value, Extras):
        return value.key()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def call_key(identity: dict, op: str, prompt: Prompt | None, **params: Any) -> str:
    """The cache key of one call: sha256 of a canonical JSON of everything that can change its result.

    Stop strings keep their order and floats their spelling: a needless miss costs one model call,
    a wrong hit costs a wrong result.
    """
    request = {
        "v": KEY_VERSION,
        "model": identity,
        "op": op,
        "prompt": prompt.key() if prompt is not None else None,  # None: an operation on token ids
        "params": {name: _plain(value) for name, value in params.items()},
    }
    return hashlib.sha256(_canonical(request).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Values: JSON for structure, exact .npy bytes for arrays

# JSON has no arrays, numpy scalars, tuples or dataclasses: each travels as a one-key dict with a tag;
# an ordinary one-key dict whose key happens to be a tag is escaped with _T_DICT.
_T_ARRAY, _T_SCALAR, _T_TUPLE, _T_DICT = "__ndarray__", "__npscalar__", "__tuple__", "__dict__"
_RECORDS = {"__continuation__": Continuation, "__sampleset__": SampleSet,  # dataclasses stored field by field
            "__attribution__": Attribution}
_RECORD_TAGS = {cls: tag for tag, cls in _RECORDS.items()}
_TAGS = {_T_ARRAY, _T_SCALAR, _T_TUPLE, _T_DICT, *_RECORDS}


def _encode(obj: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(obj, np.generic):  # numpy scalars (np.float64 is also a float) keep their dtype as 0-d arrays
        if obj.dtype.hasobject:
            raise _Unencodable("object scalars cannot be stored exactly")
        arrays.append(np.asarray(obj))
        return {_T_SCALAR: len(arrays) - 1}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise _Unencodable("object arrays cannot be stored exactly")
        arrays.append(obj)
        return {_T_ARRAY: len(arrays) - 1}
    if type(obj) in _RECORD_TAGS:
        return {_RECORD_TAGS[type(obj)]: {f.name: _encode(getattr(obj, f.name), arrays)
                                          for f in dataclasses.fields(obj)}}
    if isinstance(obj, list):
        return [_encode(item, arrays) for item in obj]
    if isinstance(obj, tuple):
        return {_T_TUPLE: [_encode(item, arrays) for item in obj]}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise _Unencodable("dict keys must be strings to survive JSON")
        encoded = {k: _encode(v, arrays) for k, v in obj.items()}
        return {_T_DICT: encoded} if len(obj) == 1 and next(iter(obj)) in _TAGS else encoded
    raise _Unencodable(f"cannot store a {type(obj).__name__} exactly")


def _decode(obj: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(obj, list):
        return [_decode(item, arrays) for item in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, body), = obj.items()
        if tag == _T_ARRAY:
            return arrays[body]
        if tag == _T_SCALAR:
            return arrays[body][()]
        if tag == _T_TUPLE:
            return tuple(_decode(item, arrays) for item in body)
        if tag == _T_DICT:
            return {k: _decode(v, arrays) for k, v in body.items()}
        if tag in _RECORDS:
            return _RECORDS[tag](**{k: _decode(v, arrays) for k, v in body.items()})
    return {k: _decode(v, arrays) for k, v in obj.items()}


def _checksum(value: str, blob: bytes | None) -> str:
    digest = hashlib.sha256(value.encode("utf-8"))
    digest.update(b"\0")  # JSON text never holds a raw NUL, so the split is unambiguous
    digest.update(blob or b"")
    return digest.hexdigest()


def encode_value(result: Any) -> tuple[str, bytes | None, str]:
    """(JSON text, array bytes or None, checksum) for one result."""
    arrays: list[np.ndarray] = []
    value = json.dumps(_encode(result, arrays), ensure_ascii=False, allow_nan=True)
    blob = None
    if arrays:
        buffer = io.BytesIO()
        for array in arrays:
            np.save(buffer, array, allow_pickle=False)
        blob = buffer.getvalue()
    return value, blob, _checksum(value, blob)


def decode_value(value: str, blob: bytes | None, checksum: str) -> Any:
    """The stored result; raises on any damage, which the caller turns into a miss."""
    if not isinstance(value, str) or _checksum(value, blob) != checksum:
        raise ValueError("checksum mismatch")
    arrays = []
    if blob:
        buffer = io.BytesIO(blob)
        while buffer.tell() < len(blob):
            arrays.append(np.load(buffer, allow_pickle=False))
    return _decode(json.loads(value), arrays)


# ---------------------------------------------------------------------------------------------
# The file


class CallCache:
    """A shared SQLite store of encoded call results, with per-operation hit/miss counters.

    Hits and misses are counted per prompt, which is what a run's provenance needs to say how much
    of it was recomputed. The object can be pickled or inherited through fork: each process opens
    its own connection on first use.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._disabled = False
        self._warned: set[str] = set()
        self._counts = {op: {"hits": 0, "misses": 0} for op in OPERATIONS}
        self._answered = 0  # misses whose result has come back and been offered to `put_many`
        self._unreadable = 0
        self._failed_writes = 0
        self._moved_aside: list[str] = []
        with self._lock:
            self._connection()  # find a broken file at construction, not in the middle of a run

    # -- public -------------------------------------------------------------------------------

    def get_many(self, op: str, keys: Sequence[str],
                 accept: Callable[[Any], bool] | None = None) -> dict[str, Any]:
        """Stored results for those of `keys` that are present and readable, counting every key.

        `accept` rejects a row that decodes but is not the shape the operation returns (a row
        written by something else); a rejected or undecodable row is a miss and is overwritten by
        the next put.
        """
        with self._lock:
            return self._get_many(op, keys, accept)

    def get(self, op: str, key: str, accept: Callable[[Any], bool] | None = None) -> Any:
        """One stored result, or None on a miss (no operation returns None)."""
        return self.get_many(op, [key], accept).get(key)

    def put_many(self, op: str, items: Iterable[tuple[str, Any]]) -> None:
        """Store results in one transaction, so a killed run keeps each finished batch."""
        rows = []
        now = time.time()
        for key, result in items:
            self._answered += 1
            try:
                value, blob, checksum = encode_value(result)
            except (_Unencodable, TypeError, ValueError) as exc:
                self._failed_writes += 1
                self._warn("encode", f"call cache {self.path}: not storing a {op} result ({exc})")
                continue
            rows.append((key, op, value, blob, checksum, now))
        if not rows:
            return

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no deadlocking upgrade
            try:
                conn.executemany("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        with self._lock:
            if not self._run(write, "write"):
                self._failed_writes += len(rows)

    def put(self, op: str, key: str, result: Any) -> None:
        self.put_many(op, [(key, result)])

    def stats(self) -> dict:
        """Counters for a run's provenance: hits and misses per operation, plus anything that went wrong."""
        return {
            "path": str(self.path),
            **{op: dict(counts) for op, counts in self._counts.items()},
            "unreadable_rows": self._unreadable,
            "failed_writes": self._failed_writes,
            "moved_aside": list(self._moved_aside),
            "disabled": self._disabled,
        }

    def answered(self) -> tuple[int, int]:
        """Calls answered so far: (from the cache, by the model). A miss counts once its result is back,
        not when it is looked up as `stats` counts it, so a run's live progress lines (which read this
        from another thread) show calls done, not calls asked."""
        with self._lock:
            hits = sum(counts["hits"] for counts in list(self._counts.values()))
        return hits, self._answered

    def __len__(self) -> int:
        counted: list[int] = []
        self._run(lambda conn: counted.append(conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]), "count")
        return counted[0] if counted else 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "CallCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_conn"], state["_pid"], state["_lock"] = None, None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"CallCache({str(self.path)!r})"

    # -- internals ------------------------------------------------------------------------------

    def _warn(self, kind: str, message: str) -> None:
        """Warn once per kind of trouble: a read-only disk must not bury the log in identical lines."""
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        log.log(level, message)

    def _get_many(self, op: str, keys: Sequence[str], accept: Callable[[Any], bool] | None) -> dict[str, Any]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        rows = self._select(unique)
        for key in unique:
            if key not in rows:
                continue
            try:
                result = decode_value(*rows[key])
                if accept is not None and not accept(result):
                    raise ValueError(f"not a {op} result")
            except Exception as exc:  # any damage at all is a miss
                self._unreadable += 1
                self._warn("row", f"call cache {self.path}: unreadable {op} row {key[:12]}… ({exc}); recomputing")
                continue
            found[key] = result
        counts = self._counts.setdefault(op, {"hits": 0, "misses": 0})
        for key in keys:
            counts["hits" if key in found else "misses"] += 1
        return found

    def _select(self, keys: list[str]) -> dict[str, tuple]:
        rows: dict[str, tuple] = {}

        def read(conn: sqlite3.Connection) -> None:
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for key, value, blob, checksum in conn.execute(
                        f"SELECT key, value, arrays, checksum FROM calls WHERE key IN ({marks})", chunk):
                    rows[key] = (value, blob, checksum)

        if keys and not self._run(read, "read"):
            return {}
        return rows

    def _run(self, action: Callable[[sqlite3.Connection], None], what: str) -> bool:
        """Run `action` on this process's connection; False (after one warning) if the cache failed.

        A "malformed"/"not a database" error mid-run means another process found (or left) the
        file broken: reopen, which moves it aside if it still is, and try once more.
        """
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                if conn is None:
                    return False
                try:
                    action(conn)
                    return True
                except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, read-only
                    self._warn(what, f"call cache {self.path}: {what} failed ({exc}); continuing without it")
                    return False
                except sqlite3.DatabaseError as exc:
                    if attempt == 2:
                        self._warn(what, f"call cache {self.path}: {what} failed ({exc}); continuing without it")
                        return False
                    self._drop_connection()
                except Exception as exc:  # the cache is never a reason for a run to die
                    self._warn(what, f"call cache {self.path}: {what} failed ({exc!r}); continuing without it")
                    return False
        return False

    def _drop_connection(self) -> None:
        if self._conn is not None:
            if self._pid == os.getpid():
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
            else:
                _ABANDONED.append(self._conn)
        self._conn, self._pid = None, None

    def _connection(self) -> sqlite3.Connection | None:
        if self._disabled:
            return None
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:  # inherited through fork: never touch it, open our own
            _ABANDONED.append(self._conn)
            self._conn = None
        try:
            self._conn = self._open()
            self._pid = os.getpid()
        except Exception as exc:
            self._disabled = True
            log.warning("call cache %s cannot be used (%s); this process runs without it", self.path, exc)
            return None
        return self._conn

    @contextmanager
    def _open_lock(self) -> Iterator[None]:
        """Serialise check-and-rebuild across processes, so two of them never move aside each other's rebuild."""
        if fcntl is None:
            yield
            return
        with open(f"{self.path}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._open_lock():
            try:
                return self._connect_checked()
            except _Corrupt as exc:
                moved = self._move_aside()
                log.warning("call cache %s is unusable (%s); moved it to %s and started an empty cache",
                            self.path, exc, moved)
                return self._connect_checked()

    def _connect_checked(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            self._check(conn)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL survives a killed process
            conn.executescript(_SCHEMA)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _check(conn: sqlite3.Connection) -> None:
        """Raise _Corrupt unless the file is empty or exactly this schema, and passes quick_check."""
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                return  # a new (or zero-byte) file: the schema is created next
            if not {"meta", "calls"} <= tables:
                raise _Corrupt(f"not a call cache (tables: {', '.join(sorted(tables))})")
            version = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if version is None or version[0] != SCHEMA_VERSION:
                raise _Corrupt(f"schema version {version[0] if version else None!r}, expected {SCHEMA_VERSION!r}")
            columns = [row[1] for row in conn.execute("PRAGMA table_info(calls)")]
            if columns != _COLUMNS:
                raise _Corrupt(f"unexpected columns {columns}")
            problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise _Corrupt(f"quick_check: {'; '.join(problems[:3])}")
        except sqlite3.OperationalError:
            raise  # locked or unreadable is not corrupt: never move a healthy file aside
        except sqlite3.DatabaseError as exc:
            raise _Corrupt(str(exc)) from None

    def _move_aside(self) -> Path:
        stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        os.replace(self.path, target)
        for suffix in ("-wal", "-shm"):  # a stale WAL would be replayed into the new file
            sidecar = Path(f"{self.path}{suffix}")
            if sidecar.exists():
                os.replace(sidecar, f"{target}{suffix}")
        self._moved_aside.append(str(target))
        return target


# ---------------------------------------------------------------------------------------------
# The wrapper


def _is_continuation_list(result: Any) -> bool:
    return isinstance(result, list) and all(isinstance(item, Continuation) for item in result)


def _is_score(result: Any) -> bool:
    return isinstance(result, list) and all(
        isinstance(item, (int, float, np.floating)) and not isinstance(item, bool) for item in result)


class CachedModel:
    """Any LanguageModel, with its calls answered from a CallCache where possible.

    It is itself a LanguageModel with the wrapped model's capabilities and identity, so methods
    never know whether they talk to a cache. Attributes outside the protocol (a tokenizer, a
    token counter) pass through to the wrapped model uncached.
    """

    def __init__(self, model: LanguageModel, cache: CallCache | str | os.PathLike):
        self.model = model
        self.cache = cache if isinstance(cache, CallCache) else CallCache(cache)
        self.capabilities = model.capabilities
        self._identity = model.identity()  # hashing weights once, not per call

    def identity(self) -> dict:
        return copy.deepcopy(self._identity)  # exactly what the keys were built from

    def stats(self) -> dict:
        return self.cache.stats()

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int | Sequence[int], stop: Sequence[str] = (),
                 extras: Extras = NO_EXTRAS) -> list[Continuation]:
        """One key per prompt and its own token limit (a call with one limit for all keys the same)."""
        prompts, limits = list(prompts), row_limits(max_new_tokens, len(prompts))
        keys = [call_key(self._identity, "generate", p, max_new_tokens=n, stop=list(stop), extras=extras)
                for p, n in zip(prompts, limits)]
        same = isinstance(max_new_tokens, int)
        return self._batched("generate", keys, Continuation, lambda todo: self.model.generate(
            [prompts[i] for i in todo], max_new_tokens if same else [limits[i] for i in todo], stop, extras))

    def sample(self, prompt: Prompt, params: SamplingParams, max_new_tokens: int,
               stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[Continuation]:
        key = call_key(self._identity, "sample", prompt, params=params, max_new_tokens=max_new_tokens,
                       stop=list(stop), **({"extras": extras} if extras != NO_EXTRAS else {}))
        cached = self.cache.get("sample", key, accept=_is_continuation_list)
        if cached is not None:
            return cached
        result = self.model.sample(prompt, params, max_new_tokens, stop, extras)
        self.cache.put("sample", key, result)
        return result

    def sample_batch(self, prompts: Sequence[Prompt], params: SamplingParams, max_new_tokens: int,
                     stop: Sequence[str] = (), extras: Extras = NO_EXTRAS) -> list[SampleSet]:
        """One key per prompt: a prompt's sample set does not depend on the others it was asked with."""
        keys = [call_key(self._identity, "sample_set", p, params=params, max_new_tokens=max_new_tokens,
                         stop=list(stop), extras=extras) for p in prompts]
        prompts = list(prompts)
        return self._batched("sample_set", keys, SampleSet, lambda todo: self.model.sample_batch(
            [prompts[i] for i in todo], params, max_new_tokens, stop, extras))

    def _batched(self, op: str, keys: list[str], kind: type, compute: Callable[[list[int]], list]) -> list:
        """Look every prompt's key up; send only the misses, once each and in order, in one batched call
        (`compute` gets the positions of the prompts to run)."""
        found = self.cache.get_many(op, keys, accept=lambda r: isinstance(r, kind))
        missing: dict[str, int] = {}
        for index, key in enumerate(keys):
            if key not in found:
                missing.setdefault(key, index)
        if missing:
            results = compute(list(missing.values()))
            if len(results) != len(missing):
                raise RuntimeError(f"{type(self.model).__name__} answered {len(results)} of {len(missing)} "
                                   f"{op} prompts")
            fresh = dict(zip(missing, results))
            self.cache.put_many(op, fresh.items())
            found.update(fresh)
        out, used = [], set()
        for key in keys:  # a prompt repeated in one batch must not hand out one shared object twice
            out.append(copy.deepcopy(found[key]) if key in used else found[key])
            used.add(key)
        return out

    def score(self, prompt: Prompt, continuation: str) -> list[float]:
        key = call_key(self._identity, "score", prompt, continuation=continuation)
        cached = self.cache.get("score", key, accept=_is_score)
        if cached is not None:
            return cached
        result = self.model.score(prompt, continuation)
        self.cache.put("score", key, result)
        return result

    def received_attention(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        return self._attention("attention", 3, self.model.received_attention, token_ids, layer)

    def attention_matrix(self, token_ids: Sequence[int], layer: int = -1) -> np.ndarray:
        return self._attention("attention-matrix", 2, self.model.attention_matrix, token_ids, layer)

    def _attention(self, operation: str, ndim: int, compute, token_ids: Sequence[int], layer: int) -> np.ndarray:
        """A pass over tokens alone, cached under the `attention` operation (its key names which array)."""
        key = call_key(self._identity, operation, None, token_ids=[int(t) for t in token_ids], layer=layer)
        cached = self.cache.get("attention", key, accept=lambda r: isinstance(r, np.ndarray) and r.ndim == ndim)
        if cached is not None:
            return cached
        result = compute(token_ids, layer)
        self.cache.put("attention", key, result)
        return result

    def attribution(self, prompt: Prompt, settings: IGSettings = IGSettings()) -> Attribution:
        """Keyed on every IG setting, `batch` included: chunking changes the last bits, and a cached
        result must be the one a fresh call would give."""
        key = call_key(self._identity, "attribution", prompt, settings=settings)
        cached = self.cache.get("attribution", key, accept=lambda r: isinstance(r, Attribution))
        if cached is not None:
            return cached
        result = self.model.attribution(prompt, settings)
        self.cache.put("attribution", key, result)
        return result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("model", "cache", "capabilities", "_identity"):
            raise AttributeError(name)
        return getattr(self.model, name)
