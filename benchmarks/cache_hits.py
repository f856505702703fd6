"""Call-cache hits per run: how much of each ablation variant was answered from calls other variants made.

Reads the `call_cache` block of each run's `provenance.json` (hits and misses per operation: greedy
`generate`, SeaKR's `sample_set`, `score`, `judge`) and prints one row per run, plus the total.
A hit is a model call that was not made because an identical call (same model, prompt and settings)
was made before, by this run's earlier batches or by any other run sharing the cache.

Usage: python benchmarks/cache_hits.py data/runs/demo-small/seakr-*  (run directories, in order)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def counts(run: Path) -> dict[str, tuple[int, int]]:
    provenance = json.loads((run / "provenance.json").read_text())
    stats = provenance.get("call_cache") or {}
    return {op: (v.get("hits", 0), v.get("misses", 0)) for op, v in sorted(stats.items())
            if isinstance(v, dict) and "hits" in v and (v.get("hits") or v.get("misses"))}


def main() -> None:
    runs = [Path(p) for p in sys.argv[1:]]
    if not runs:
        sys.exit(__doc__.strip().splitlines()[-1])
    missing = [str(r) for r in runs if not (r / "provenance.json").is_file()]
    if missing:
        sys.exit(f"error: no provenance.json in {', '.join(missing)} (run the generate step first)")
    rows = {run: counts(run) for run in runs}
    ops = sorted({op for c in rows.values() for op in c})
    print("| run | " + " | ".join(f"{op} hits / calls" for op in ops) + " |")
    print("|---|" + "---|" * len(ops))
    total = {op: [0, 0] for op in ops}

    def cell(hits: int, misses: int) -> str:
        calls = hits + misses
        return f"{hits} / {calls} ({hits / calls:.0%})" if calls else "–"

    for run, c in rows.items():
        for op, (hits, misses) in c.items():
            total[op][0] += hits
            total[op][1] += misses
        print(f"| {run.name} | " + " | ".join(cell(*c.get(op, (0, 0))) for op in ops) + " |")
    print("| **all** | " + " | ".join(cell(*total[op]) for op in ops) + " |")


if __name__ == "__main__":
    main()
