"""Gold-title recall of BM25 and dense retrieval on the shared HotpotQA sample, with index build times.

Not a test: it builds both indexes from scratch over the shared 8,112-passage DPR sample (which
contains the sample questions' own paragraphs among random distractors) and prints a table, so
retriever choices in params.yaml can be argued from numbers measured on this machine.

    python benchmarks/retrieval_recall.py [--data ../shared/data] [--scratch DIR]

Two measures per cut-off k: `hit@k`, the share of questions with at least one gold (supporting-fact)
paragraph in the top k, which is what a single-retrieval RAG method needs; and `recall@k`, the mean
share of each question's gold titles found, which is what multi-hop questions need.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from adaptive_rag.data.corpus import convert_to_collection  # noqa: E402
from adaptive_rag.data.datasets import load_hotpotqa  # noqa: E402
from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index  # noqa: E402
from adaptive_rag.retrieval.dense import DEFAULT_ENCODER, DenseRetriever, build_dense_index  # noqa: E402

CUTOFFS = (1, 3, 5, 10)
BM25_SETTINGS = ((0.9, 0.4), (1.2, 0.75))  # pyserini's MS MARCO-tuned default; Robertson's classic values


def evaluate(retriever, examples) -> tuple[dict, float]:
    hit = {k: 0 for k in CUTOFFS}
    recall = {k: 0.0 for k in CUTOFFS}
    start = time.perf_counter()
    for example in examples:
        gold = set(example.metadata["supporting_titles"])
        titles = [h.title for h in retriever.search(example.question, max(CUTOFFS))]
        for k in CUTOFFS:
            found = gold & set(titles[:k])
            hit[k] += bool(found)
            recall[k] += len(found) / len(gold)
    elapsed = time.perf_counter() - start
    n = len(examples)
    row = {f"hit@{k}": hit[k] / n for k in CUTOFFS} | {f"recall@{k}": recall[k] / n for k in CUTOFFS}
    return row, 1000 * elapsed / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                        help="the shared reference data directory (default: ../shared/data beside the checkout)")
    parser.add_argument("--scratch", type=Path, default=None,
                        help="where to build the collection and indexes (default: a temporary directory, removed)")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help=f"dense encoder spec (default {DEFAULT_ENCODER})")
    parser.add_argument("--query-prefix", default="", help='e.g. "query: " for e5')
    parser.add_argument("--passage-prefix", default="", help='e.g. "passage: " for e5')
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="indexing threads (default: all cores)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    tsv = args.data / "wikipedia" / "psgs_w100_sample.tsv"
    questions = args.data / "benchmarks" / "hotpotqa" / "hotpot_train_sample.json"
    for path in (tsv, questions):
        if not path.is_file():
            parser.error(f"{path} not found (point --data at the shared reference data)")

    import os

    import faiss
    import torch
    from tabulate import tabulate

    threads = args.threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="retrieval-recall-") as tmp:
        scratch = args.scratch or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        timings = {}
        start = time.perf_counter()
        manifest = convert_to_collection(tsv, scratch / "collection")
        timings["corpus (TSV -> JsonCollection)"] = time.perf_counter() - start
        start = time.perf_counter()
        build_index(scratch / "collection", scratch / "bm25", threads=threads, expected=manifest["passages"])
        timings[f"BM25 index (Lucene, {threads} threads)"] = time.perf_counter() - start
        start = time.perf_counter()
        build_dense_index(scratch / "collection", scratch / "dense", args.encoder, batch_size=args.batch_size,
                          expected=manifest["passages"], device=args.device, query_prefix=args.query_prefix,
                          passage_prefix=args.passage_prefix, threads=threads)
        timings[f"dense index ({args.encoder}, {args.device}, {torch.get_num_threads()} threads)"] = (
            time.perf_counter() - start)

        examples = load_hotpotqa(questions)
        retrievers = {f"BM25 k1={k1} b={b}": BM25Retriever(scratch / "bm25", k1=k1, b=b) for k1, b in BM25_SETTINGS}
        retrievers[f"dense {args.encoder}"] = DenseRetriever(scratch / "dense", device=args.device)
        rows = []
        for name, retriever in retrievers.items():
            row, ms = evaluate(retriever, examples)
            rows.append({"retriever": name} | {key: f"{value:.2f}" for key, value in row.items()}
                        | {"ms/query": f"{ms:.1f}"})

    print(f"\n{len(examples)} HotpotQA questions, {manifest['passages']} passages; gold = supporting-fact titles")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; torch {torch.__version__}, faiss {faiss.__version__}\n")
    print(tabulate(rows, headers="keys", tablefmt="github"))
    print()
    print(tabulate([(step, f"{seconds:.1f}") for step, seconds in timings.items()],
                   headers=["build step", "seconds"], tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
