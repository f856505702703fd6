"""The run key (`Params.run_settings`, digested) of every run a params file plans: what the generate
rule's params trigger compares and what a run's progress log is bound to.

`tests/fixtures/run_keys/<profile>.json` were written by this script with the code as it was before
prompt templates and loop rules existed (`PYTHONPATH=<old src> python tests/run_keys.py OUT_DIR` at
commit e906238), so a test can prove that runs built then keep their key: Snakemake reruns none of
them and every call they made is still asked for with the same prompt. `demo.json` was captured again
after a params change (SUGAR's single-hop tables moved to `demo-single-small`, whose `sugar` preset
changes the `sugar` key); the code was the same, and the other five profiles kept every key. All six
were captured again when the engine's attention path (`model.attention`) and `generation.chunk_size`
entered every run's key: a deliberate change of every key (results now come from another kernel and
another batching), after which the test again holds that no code change moves a key. The five GPU
profiles' fixtures were captured once more when those profiles turned `model.cuda_graphs` on. `demo.json`
and `dior.json` were captured again when DioR's settings gained `candidates` and `chunk_close` and its
variants took their base's presets: a deliberate change of every `dior` run's key (no other run's moved).
The `demo`, `seakr` and `dior` fixtures were captured again when SeaKR's settings gained its own token
budget (`max_new_tokens`, 100), `rationale_periods` and the `rate` calibration rule as the default:
only SeaKR runs' keys moved.
The SUGAR runs' keys of demo, shared and sugar were refreshed when SUGAR's settings changed what its runs
compute (`condition_on_question` only for NLI judges, the `mean` rule's multi-step t2, empty samples);
every other run kept its key.
`self-rag.json` was written when the `self-rag` profile was added (every other profile's keys were the same), and again
when `retrieve_rule` took the reference code's arithmetic as its default (only that profile's keys moved).
`reference.json` was written when the `reference` profile and the settings it selects (answer extraction,
`end_of_turn: continue`, `query_words`, `retrieval.query_max_tokens`, FLARE's `score_range` and
`masking`, a method's `template`) were added; every other profile's keys were the same. Its keys
were captured again when the profile selected `model.special_tokens: keep` and `joining: dragin-code`
(FLARE, DRAGIN); no other profile's key moved; and again when it selected `empty_query: search` (FLARE,
DRAGIN) and DRAGIN's `sentence_words`, `filter_order: after-firing` and `query_words: dragin-code`: only
those two keys moved.
`demo.json` and `sugar.json` gained the keys of the Adaptive-RAG row of SUGAR's Table I (`adaptive-rag`);
no other key of any profile moved.
`demo.json` and `sugar.json` gained the keys of the Adaptive Retrieval row of SUGAR's Table I
(`adaptive-retrieval` with `popularity_proxy: corpus-frequency`); no other key of any profile moved.
`demo.json` and `dior.json` gained the keys of the RaDIO rows of DioR's Tables 1, 2 and 5 (`radio`); no other
key of any profile moved. Those `radio` keys moved once more when RaDIO's `filter_order` became the code's
`after-firing`; no other key moved.
All nine were captured again when (a) SUGAR's tables took every row under SUGAR's prompt (`wo-rag-qa`,
`sr-rag-qa`, `ircot-8` replaced the chain-of-thought rows and `sugar-single-step`; the Adaptive-RAG and
Adaptive Retrieval rows of Table I took that prompt, Adaptive Retrieval its reference's top 1), (b) SUGAR
kept empty answers as answers (`empty_samples: answer`: every `sugar` key), (c) RaDIO's real-word filter
became its code's (`real_word_match: token-piece`: every `radio` key), and (d) the `reference` profile's
FLARE and DRAGIN read token pieces as Llama's tokenizer writes them (`token_pieces: llama`) and the
profile gained `hotpotqa-unseen`; `paper`, `scaar`, `seakr` and `self-rag` kept every key, and no other
run of any profile moved. `demo.json` then gained the keys of `sugar-empty-samples` (SUGAR with either
empty-sample rule); no other key moved.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILES = {"demo": REPO / "params.yaml", **{p.stem: p for p in sorted((REPO / "params").glob("*.yaml"))
                                             if p.stem != "demo"}}


def run_keys(path: Path) -> dict[str, str]:
    from adaptive_rag.config import load_params, planned_runs
    from adaptive_rag.progress import digest

    params = load_params(path)
    runs = planned_runs((params.experiment_datasets, params.experiment_methods), params.ablations)
    return {f"{d}/{m}": digest(params.run_settings(d, m)) for d, m in sorted(runs)}


def main(out: str) -> None:
    for name, path in PROFILES.items():
        keys = run_keys(path)
        (Path(out) / f"{name}.json").write_text(json.dumps(keys, indent=0, sort_keys=True) + "\n")
        print(f"{name}: {len(keys)} runs")


if __name__ == "__main__":
    main(sys.argv[1])
