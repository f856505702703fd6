"""Dense retrieval (bundled MiniLM + faiss) built and searched offline, and compared with BM25."""

import json
import os

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.retrieval import Hit
from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index
from adaptive_rag.retrieval.dense import DEFAULT_ENCODER, DenseRetriever, build_dense_index

# Invented passages: the names exist nowhere else, so only the passage itself can match them.
PASSAGES = [
    ("p1", "Velmora Glassworks", "Velmora Glassworks was founded by Idris Penhallow in 1712; its blue crown glass is famous."),
    ("p2", "Idris Penhallow", "Idris Penhallow was a glassmaker born in the harbour town of Carrowmere."),
    ("p3", "Carrowmere", "Carrowmere is a harbour town on the Lune estuary, known for its rope walks."),
    ("p4", "Tessilan Rope Mill", "The Tessilan Rope Mill spun hemp for the river fleets of the Lune."),
    ("p5", "Orsk Observatory", "The Orsk Observatory sits on a basalt ridge and catalogued comets with a brass refractor telescope."),
    ("p6", "Quillon Cheese", "Quillon is a soft goat's-milk cheese aged in limestone caves and eaten with pears."),
    ("p7", "Battle of Harrowfen", "The Battle of Harrowfen was fought in a marsh in 1403, when the northern army was defeated."),
    ("p8", "Amberlight Railway", "The Amberlight Railway is a narrow-gauge steam line that climbs through pine forest to a mountain lake."),
]
QUERIES = {
    "Who founded the Velmora Glassworks?": "p1",
    "Which observatory used a telescope to catalogue comets?": "p5",
    "What cheese is aged in caves?": "p6",
    "steam train to a lake in the mountains": "p8",
}


def write_collection(directory, passages, shard_size=3):
    """The corpus step's JsonCollection layout, written directly so the test controls every record."""
    directory.mkdir(parents=True)
    for start in range(0, len(passages), shard_size):
        lines = [json.dumps({"id": pid, "contents": f"{title}\n{text}", "title": title, "text": text})
                 for pid, title, text in passages[start:start + shard_size]]
        (directory / f"docs{start // shard_size:05d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "manifest.json").write_text(json.dumps({"passages": len(passages)}))
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense")
    collection = write_collection(root / "collection", PASSAGES)
    count = build_dense_index(collection, root / "dense", DEFAULT_ENCODER, batch_size=4, expected=len(PASSAGES))
    return root, collection, count


def test_build_writes_a_complete_index_and_nothing_else(tiny):
    root, _, count = tiny
    assert count == len(PASSAGES)
    record = json.loads((root / "dense" / "index.json").read_text())
    assert record["encoder"] == DEFAULT_ENCODER and record["dimension"] == 384 and record["documents"] == 8
    assert record["normalised"] == "l2" and record["faiss_version"]
    assert not [p for p in os.listdir(root) if p.startswith(".")]  # the temporary build directory is gone


def test_search_puts_the_relevant_passage_first(tiny):
    root, _, _ = tiny
    retriever = DenseRetriever(root / "dense")
    for query, pid in QUERIES.items():
        hits = retriever.search(query, 3)
        assert len(hits) == 3 and hits[0].id == pid, (query, hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    hit = retriever.search("Who founded the Velmora Glassworks?", 1)[0]
    assert hit.title == "Velmora Glassworks" and hit.text.startswith("Velmora Glassworks was founded")
    assert isinstance(hit.score, float) and hit.score == round(hit.score, 4)
    assert len(retriever.search("glass", 50)) == len(PASSAGES)  # k beyond the corpus is clamped
    identity = retriever.identity()
    assert identity["type"] == "dense" and identity["documents"] == 8 and identity["encoder"] == DEFAULT_ENCODER


def test_rebuild_replaces_an_existing_index(tiny, tmp_path):
    _, collection, _ = tiny
    out = tmp_path / "dense"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    build_dense_index(collection, out, batch_size=8)
    assert not (out / "stale.txt").exists() and (out / "index.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["dense"]


def test_wrong_expected_count_fails_and_leaves_no_index(tiny, tmp_path):
    _, collection, _ = tiny
    with pytest.raises(InputError, match="8 passages but the corpus manifest says 9"):
        build_dense_index(collection, tmp_path / "dense", expected=9)
    assert os.listdir(tmp_path) == []


def test_non_index_directories_are_input_errors(tiny, tmp_path):
    root, collection, _ = tiny
    with pytest.raises(InputError, match="not a dense index"):
        DenseRetriever(collection)
    with pytest.raises(InputError, match="not a dense index"):
        DenseRetriever(tmp_path / "missing")
    with pytest.raises(InputError, match="no JsonCollection shards"):
        build_dense_index(tmp_path, tmp_path / "dense")


def test_unknown_encoder_is_an_input_error(tiny, tmp_path):
    _, collection, _ = tiny
    with pytest.raises(InputError, match="not installed"):
        build_dense_index(collection, tmp_path / "dense", encoder="pypi:no-such-encoder-package")
    with pytest.raises(InputError, match="could not be loaded"):
        build_dense_index(collection, tmp_path / "dense", encoder=str(tmp_path / "no-such-model-dir"))
    assert not (tmp_path / "dense").exists()


@pytest.mark.slow  # Anserini's IndexCollection runs in a java process
def test_bm25_and_dense_answer_through_the_same_interface(tiny, tmp_path):
    root, collection, _ = tiny
    build_index(collection, tmp_path / "bm25", threads=1, expected=len(PASSAGES))
    retrievers = {"bm25": BM25Retriever(tmp_path / "bm25"), "dense": DenseRetriever(root / "dense")}
    for name, retriever in retrievers.items():
        assert {"type", "index", "documents"} <= set(retriever.identity()), name
        assert retriever.identity()["documents"] == len(PASSAGES)
        for query, pid in QUERIES.items():
            if name == "bm25" and query.startswith("steam"):
                continue  # a paraphrase with little word overlap: what dense retrieval adds
            hits = retriever.search(query, 2)
            assert hits and all(isinstance(h, Hit) and isinstance(h.score, float) for h in hits), name
            assert hits[0].id == pid, (name, query, hits)


# --- real data: the shared DPR sample and the HotpotQA questions whose paragraphs it contains ---

@pytest.fixture(scope="module")
def real_indexes(tmp_path_factory):
    from conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (it lives beside the checkout as ../shared/data)")
    from adaptive_rag.data.corpus import convert_to_collection

    root = tmp_path_factory.mktemp("real")
    manifest = convert_to_collection(SHARED_DATA / "wikipedia" / "psgs_w100_sample.tsv", root / "collection")
    build_index(root / "collection", root / "bm25", threads=2, expected=manifest["passages"])
    build_dense_index(root / "collection", root / "dense", batch_size=64, expected=manifest["passages"])
    return {"bm25": BM25Retriever(root / "bm25", k1=0.9, b=0.4), "dense": DenseRetriever(root / "dense")}


@pytest.mark.slow  # encodes 8,112 passages with MiniLM: minutes on a small CPU
def test_most_hotpotqa_questions_find_a_gold_paragraph_in_the_top5(shared_data, real_indexes):
    from adaptive_rag.data.datasets import load_hotpotqa

    examples = load_hotpotqa(shared_data / "benchmarks" / "hotpotqa" / "hotpot_train_sample.json")
    assert len(examples) == 100
    for name, retriever in real_indexes.items():
        found = sum(
            bool({h.title for h in retriever.search(ex.question, 5)} & set(ex.metadata["supporting_titles"]))
            for ex in examples
        )
        assert found / len(examples) > 0.5, f"{name}: only {found}/100 questions have a gold paragraph in the top 5"
