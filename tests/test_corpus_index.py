"""DPR TSV -> JsonCollection -> a real Lucene index built and searched through pyserini's jar."""

import json

import pytest

from adaptive_rag.data.corpus import convert_to_collection, iter_passages, read_manifest
from adaptive_rag.errors import InputError
from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index

TSV = (
    "id\ttext\ttitle\n"
    '1\t"Velmora Glassworks was founded by Idris Penhallow in 1712; its ""blue crown"" glass is famous."\tVelmora Glassworks\n'
    "2\tIdris Penhallow was a glassmaker born in the harbour town of Carrowmere.\tIdris Penhallow\n"
    "3\t\tEmpty Passage\n"
    "4\tCarrowmere is a harbour town on the Lune estuary, known for its rope walks.\tCarrowmere\n"
    "5\tThe Tessilan Rope Mill spun hemp for the river fleets of the Lune.\tTessilan Rope Mill\n"
)


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    tsv = root / "psgs.tsv"
    tsv.write_text(TSV, encoding="utf-8")
    out = root / "collection"
    manifest = convert_to_collection(tsv, out, shard_size=2)
    return tsv, out, manifest


def test_conversion_streams_into_shards_and_counts_empty_rows(collection):
    _, out, manifest = collection
    assert manifest["passages"] == 4 and manifest["empty_rows_skipped"] == 1 and manifest["shards"] == 2
    assert read_manifest(out) == manifest
    docs = [json.loads(l) for f in sorted(out.glob("*.jsonl")) for l in f.read_text().splitlines()]
    assert [d["id"] for d in docs] == ["1", "2", "4", "5"]
    assert docs[0]["contents"] == 'Velmora Glassworks\nVelmora Glassworks was founded by Idris Penhallow in 1712; its "blue crown" glass is famous.'
    assert docs[0]["title"] == "Velmora Glassworks"


@pytest.mark.parametrize(
    "content, message",
    [
        ("id\ttitle\ttext\n1\ta\tb\n", "line 1: expected the DPR header"),
        ("id\ttext\ttitle\n1\tonly two\n", "line 2: expected 3 tab-separated fields"),
        ("id\ttext\ttitle\n1\ta\tA\n1\tb\tB\n", "line 3: passage id '1' appears twice"),
        ("id\ttext\ttitle\n\ta\tA\n", "line 2: empty passage id"),
    ],
)
def test_malformed_tsv_names_file_and_line(tmp_path, content, message):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text(content)
    with pytest.raises(InputError) as err:
        list(iter_passages(tsv))
    assert str(tsv) in str(err.value) and message in str(err.value)


def test_gzipped_dump_is_streamed_and_expected_count_enforced(tmp_path):
    import gzip

    tsv = tmp_path / "psgs_w100.tsv.gz"
    with gzip.open(tsv, "wt", encoding="utf-8") as handle:
        handle.write(TSV)
    manifest = convert_to_collection(tsv, tmp_path / "gz", expected=4)
    assert manifest["passages"] == 4 and manifest["empty_rows_skipped"] == 1
    with pytest.raises(InputError, match="4 passages with text, but corpus.expected_passages is 5 "
                                         r"\(1 empty rows were skipped\)"):
        convert_to_collection(tsv, tmp_path / "gz2", expected=5)


def test_missing_corpus_file(tmp_path):
    with pytest.raises(InputError, match="passages TSV not found"):
        convert_to_collection(tmp_path / "nope.tsv", tmp_path / "out")


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_real_lucene_index_is_built_and_searched(collection, tmp_path):
    _, out, manifest = collection
    log = tmp_path / "index.log"
    with open(log, "w") as handle:
        assert build_index(out, tmp_path / "index", threads=1, expected=manifest["passages"], log=handle) == 4
    assert "documents indexed" in log.read_text()
    retriever = BM25Retriever(tmp_path / "index", k1=0.9, b=0.4)
    hits = retriever.search("Who founded the Velmora Glassworks?", 2)
    assert hits[0].id == "1" and hits[0].title == "Velmora Glassworks"
    assert hits[0].text.startswith("Velmora Glassworks was founded by Idris Penhallow")
    assert len(hits) == 1  # only passage 1 mentions Velmora or founding
    hits = retriever.search("harbour town rope", 5)
    assert hits[0].id == "4"  # the only passage with all three terms
    assert {h.id for h in hits} == {"2", "4", "5"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert retriever.identity()["documents"] == 4


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_a_relative_index_path_is_read_against_the_current_directory(collection, tmp_path, monkeypatch):
    """The JVM keeps the directory it started in; a relative path given after a `chdir` still opens."""
    _, out, manifest = collection
    build_index(out, tmp_path / "data/index", threads=1, expected=manifest["passages"])  # the JVM is up now
    monkeypatch.chdir(tmp_path)
    retriever = BM25Retriever("data/index")
    assert retriever.search("harbour town rope", 1)[0].id == "4"
    assert [term for term, _ in retriever.term_statistics("rope walks")] == ["rope", "walk"]
    assert retriever.identity()["index"] == "data/index"  # the identity keeps the path as given


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_index_count_mismatch_is_an_error(collection, tmp_path):
    _, out, _ = collection
    with pytest.raises(RuntimeError, match="index has 4 documents but the corpus has 5"):
        build_index(out, tmp_path / "index", threads=1, expected=5)
    assert not (tmp_path / "index").exists()


def test_opening_a_missing_index_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="not a Lucene index"):
        BM25Retriever(tmp_path)


LONG_TSV = "id\ttext\ttitle\n" + "".join(f"{i}\tpassage {i} about {i * 7919 % 104729}\tT{i}\n" for i in range(3000))


def _gzipped(path, text):
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)
    return path


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(_gzipped(p, LONG_TSV).read_bytes()[:2000]), "not a readable gzip file: it breaks off"),
    (lambda p: p.write_text(TSV), "not a readable gzip file: it breaks off after line 0"),  # plain text named .gz
])
def test_damaged_gzip_dump_is_an_error_naming_the_file(tmp_path, damage, message):
    tsv = tmp_path / "psgs_w100.tsv.gz"
    damage(tsv)
    with pytest.raises(InputError) as err:
        convert_to_collection(tsv, tmp_path / "out")
    assert str(err.value).startswith(f"{tsv}: {message}")


def test_a_tsv_that_is_not_utf8_is_an_error_naming_the_file(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_bytes(TSV.encode() + b"6\tcaf\xe9 in Latin-1\tCafe\n")
    with pytest.raises(InputError, match=r"psgs.tsv: line 7: not UTF-8 text \(invalid continuation byte\)"):
        list(iter_passages(tsv))


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_a_damaged_lucene_index_is_an_error_not_a_java_traceback(collection, tmp_path):
    _, out, manifest = collection
    build_index(out, tmp_path / "index", threads=1, expected=manifest["passages"])
    for segments in (tmp_path / "index").glob("segments_*"):
        segments.write_bytes(b"not a segments file")
    with pytest.raises(InputError, match=r"index: the Lucene index cannot be read \(.+\); delete the directory"):
        BM25Retriever(tmp_path / "index")
