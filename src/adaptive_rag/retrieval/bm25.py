"""BM25 over a pyserini (Lucene) index.

Indexing runs Anserini's `IndexCollection` in a separate `java` process (the same code pyserini's
`python -m pyserini.index.lucene` calls), streaming its log to us. Searching uses Anserini's
`SimpleSearcher` through pyserini's JVM bridge directly, because importing `pyserini.search.lucene`
costs seconds (it imports every dense encoder) and every generation job would pay it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tqdm import tqdm

from ..errors import InputError
from . import Hit
from .jvm import anserini_jar, java_executable, start_jvm

_INDEXED = re.compile(r"([\d,]+) documents indexed")  # Anserini prints 8,112


def build_index(collection_dir: str | Path, index_dir: str | Path, threads: int, expected: int, log=None) -> int:
    collection_dir, index_dir = Path(collection_dir), Path(index_dir)
    if not any(collection_dir.glob("*.jsonl")):
        raise InputError(f"{collection_dir}: no JsonCollection shards (*.jsonl) to index")
    if index_dir.exists():
        shutil.rmtree(index_dir)
    command = [
        str(java_executable()), "-cp", str(anserini_jar()), "io.anserini.index.IndexCollection",
        "-collection", "JsonCollection", "-input", str(collection_dir), "-index", str(index_dir),
        "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
        "-storePositions", "-storeDocvectors", "-storeRaw",
    ]
    bar = tqdm(total=expected, desc="index", unit=" docs", mininterval=1.0)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            if log is not None:
                log.write(line)
            if match := _INDEXED.search(line):
                bar.update(max(0, int(match.group(1).replace(",", "")) - bar.n))
        returncode = proc.wait()
    bar.close()
    if returncode != 0:
        shutil.rmtree(index_dir, ignore_errors=True)
        raise RuntimeError(f"Anserini indexing failed (exit {returncode}); see the step's log")
    count = BM25Retriever(index_dir).num_docs
    if count != expected:
        shutil.rmtree(index_dir, ignore_errors=True)
        raise RuntimeError(f"index has {count} documents but the corpus has {expected} passages")
    return count


class BM25Retriever:
    def __init__(self, index_dir: str | Path, k1: float = 0.9, b: float = 0.4):
        self.index_dir = Path(index_dir)
        if not (self.index_dir / "segments_1").exists() and not any(self.index_dir.glob("segments_*")):
            raise InputError(f"{self.index_dir}: not a Lucene index (run the index step first)")
        autoclass = start_jvm()
        try:
            # The JVM keeps the working directory it started in: a relative path would be read
            # against that one after a `chdir` (a library caller, a test), so Java gets it absolute.
            self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir.resolve()))
            self.num_docs = int(self._searcher.get_total_num_docs())
        except Exception as exc:  # jnius.JavaException: Lucene found the files damaged or missing
            if type(exc).__name__ != "JavaException":
                raise
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"{self.index_dir}: the Lucene index cannot be read ({reason}); delete the "
                             "directory and rerun the index step") from None
        self.k1, self.b = k1, b
        self._searcher.set_bm25(float(k1), float(b))
        self._reader = None  # opened on the first `term_statistics` call

    def search(self, query: str, k: int) -> list[Hit]:
        hits = []
        for hit in self._searcher.search(query, int(k)):
            raw = json.loads(hit.lucene_document.get("raw"))
            hits.append(Hit(id=raw["id"], title=raw.get("title", ""), text=raw.get("text", raw["contents"]),
                            score=round(float(hit.score), 4)))
        return hits

    def identity(self) -> dict:
        return {"type": "bm25", "index": str(self.index_dir), "documents": self.num_docs, "k1": self.k1, "b": self.b}

    def term_statistics(self, text: str) -> list[tuple[str, int]]:
        """The terms Lucene's analyzer makes of `text` (Anserini's default English analyzer, the one the
        index was built and is searched with: lower case, Porter stems, stop words dropped), each with
        its document frequency in the index. DioR's keyword scoring takes its idf from these (`tfidf:
        corpus`). Read through Anserini's `IndexReaderUtils`, the class pyserini's `LuceneIndexReader`
        wraps, on the JVM the searcher already runs (importing `pyserini.index.lucene` would load
        pyserini's analysis and prebuilt-index modules for two calls)."""
        if self._reader is None:
            autoclass = start_jvm()
            self._reader = autoclass("io.anserini.index.IndexReaderUtils").getReader(str(self.index_dir.resolve()))
            self._analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newStemmingInstance("porter")
            self._analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
            term, field = autoclass("org.apache.lucene.index.Term"), autoclass("io.anserini.index.Constants").CONTENTS
            self._term = lambda t: term(field, t)
        terms = [str(t) for t in self._analyze(self._analyzer, text).toArray()]
        return [(t, int(self._reader.docFreq(self._term(t)))) for t in terms]
