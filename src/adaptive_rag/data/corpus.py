"""DPR passage TSV -> pyserini JsonCollection, streamed.

The full DPR dump has 21M rows, so rows are streamed into fixed-size shards and never held in
memory. Rows with empty text exist in the real dump; they are counted and reported, not indexed.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from ..errors import InputError
from ..io import atomic_write, iter_jsonl, require_file, sha256_file, write_json

HEADER = ["id", "text", "title"]
SHARD_SIZE = 100_000
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def contents(self) -> str:
        """What BM25 indexes: title and text, as the DRAGIN-lineage retrievers did."""
        return f"{self.title}\n{self.text}"


def iter_passages(path: str | Path, stats: dict | None = None) -> Iterator[Passage]:
    """The passages of a DPR TSV (plain or gzipped). A damaged file (truncated or not gzip, not
    UTF-8) is an `InputError` naming the file and the line, never a decoder's traceback."""
    path = require_file(path, "passages TSV")
    where = {"line": 0}  # physical lines read whole so far
    try:
        yield from _read_passages(path, stats, where)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: not a readable gzip file: it breaks off after line {where['line']} "
                         f"({exc})") from None


def _decoded_lines(handle, path: Path, where: dict) -> Iterator[str]:
    """Decoded line by line (not in blocks), so that a byte that is not UTF-8 is reported at its line."""
    for raw in handle:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: line {where['line'] + 1}: not UTF-8 text ({exc.reason})") from None
        where["line"] += 1
        yield line


def _read_passages(path: Path, stats: dict | None, where: dict) -> Iterator[Passage]:
    csv.field_size_limit(sys.maxsize)
    empty = 0
    opener = gzip.open if path.suffix == ".gz" else open  # the DPR dump ships as psgs_w100.tsv.gz
    with opener(path, "rb") as handle:
        reader = csv.reader(_decoded_lines(handle, path, where), delimiter="\t")
        header = next(reader, None)
        if header != HEADER:
            raise InputError(f"{path}: line 1: expected the DPR header {'<tab>'.join(HEADER)}, got {header!r}")
        seen_ids: set[str] = set()
        for row in reader:
            line = reader.line_num
            if len(row) != 3:
                raise InputError(f"{path}: line {line}: expected 3 tab-separated fields (id, text, title), got {len(row)}")
            pid, text, title = (field.strip() for field in row)
            if not pid:
                raise InputError(f"{path}: line {line}: empty passage id")
            if pid in seen_ids:
                raise InputError(f"{path}: line {line}: passage id {pid!r} appears twice")
            seen_ids.add(pid)
            if not text:
                empty += 1
                continue
            yield Passage(pid, title, text)
    if stats is not None:
        stats["empty_rows"] = empty


def convert_to_collection(tsv: str | Path, out_dir: str | Path, shard_size: int = SHARD_SIZE,
                          expected: int | None = None) -> dict:
    """Write JsonCollection shards plus a manifest with the passage count the index must match."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stats: dict = {}
    count, shard, handle, writer = 0, 0, None, None
    try:
        for passage in tqdm(iter_passages(tsv, stats), desc="corpus", unit=" passages", mininterval=1.0):
            if count % shard_size == 0:
                if writer is not None:
                    writer.__exit__(None, None, None)
                writer = atomic_write(out_dir / f"docs{shard:05d}.jsonl")
                handle = writer.__enter__()
                shard += 1
            record = {"id": passage.id, "contents": passage.contents(), "title": passage.title, "text": passage.text}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    except BaseException as exc:
        if writer is not None:
            writer.__exit__(type(exc), exc, exc.__traceback__)
        raise
    if writer is not None:
        writer.__exit__(None, None, None)
    if count == 0:
        raise InputError(f"{tsv}: no passages with text")
    if expected is not None and count != expected:
        raise InputError(f"{tsv}: {count} passages with text, but corpus.expected_passages is {expected} "
                         f"({stats.get('empty_rows', 0)} empty rows were skipped)")
    manifest = {
        "passages": count,
        "empty_rows_skipped": stats.get("empty_rows", 0),
        "shards": shard,
        "source": str(tsv),
        "source_sha256": sha256_file(tsv),
    }
    write_json(out_dir / MANIFEST, manifest)
    return manifest


def read_manifest(collection_dir: str | Path) -> dict:
    from ..io import read_json

    return read_json(Path(collection_dir) / MANIFEST, "corpus manifest (run the corpus step first)")


def collection_shards(collection_dir: Path) -> list[Path]:
    """The JsonCollection shards of the corpus step's directory, refused when there are none."""
    shards = sorted(collection_dir.glob("*.jsonl"))
    if not shards:
        raise InputError(f"{collection_dir}: no JsonCollection shards (*.jsonl) to index")
    return shards


def collection_documents(shards: list[Path]) -> Iterator[tuple[str, str, str]]:
    """(id, title, text) of every passage of the shards, in order."""
    for shard in shards:
        for lineno, record in iter_jsonl(shard, "JsonCollection shard"):
            if not isinstance(record, dict) or "id" not in record:
                raise InputError(f"{shard}: line {lineno}: not a JsonCollection record with an id")
            title = record.get("title") or ""
            text = record.get("text")
            if text is None:  # a collection written by something other than our corpus step
                text = record.get("contents", "")
            yield str(record["id"]), title, text
