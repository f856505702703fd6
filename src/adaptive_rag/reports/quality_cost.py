"""A results frame as two tables a reader can take in: answer **quality** (EM, F1, Acc with their
intervals and the paired difference from the baseline) and **cost** (retrievals, model calls, tokens,
time), each with a glossary of every column and mark it shows.

One table of everything was 19 columns wide; the two halves answer different questions (is it
better? what did it cost?) and read apart. Rc is left out of the cost table because it is N_R by
definition (`evaluation.score.efficiency`): the CSV, which keeps every column, still has it. The main
experiment's tables and every score-based ablation's go through here, so they read alike.
"""

from __future__ import annotations

from .compare import LABELS, METRICS, baseline_label, compact, marks
from .layout import HEADERS, MISSING, Shown, shown

# Shown in the cost table, in this order, where the frame has them (Rc: see the module doc).
COST = ("N_R", "S_eff", "time_rel", "Gc", "Ks", "Hc", "Tc", "Sc", "wall_time_s_mean", "cache_hits")
# Shown in the quality table after the scores and their differences, where the frame has them.
# retrieval_rate (ablations) sits beside the scores: a "when to retrieve" row reads only with its rate.
QUALITY_AFTER = ("retrieval_rate", "answer_found", "weighting_best", "query_best")

# what a method cell's parenthesis means (`config.Params.method_label`)
ROW_NOTE = ("in parentheses, what the run must be read with, e.g. the judge of a SUGAR run whose clusters are not "
            "its NLI model's")

GLOSSARY = {
    "dataset": "the dataset (`datasets.<name>` in params.yaml)",
    "method": f"the method configuration (`methods.<name>` in params.yaml); {ROW_NOTE}",
    "questions": "questions scored (the split's size)",
    "em": "exact match: share of questions whose answer equals a gold answer or alias after SQuAD normalisation",
    "f1": "token F1 of the answer against the best-matching gold answer, mean over questions",
    "acc": "share of questions whose prediction contains a gold answer (SUGAR's and DioR's Acc)",
    "answer_found": "share of outputs that stated their answer after \"the answer is\"; the others are scored whole",
    "N_R": "mean retrievals per question (SCAAR's N_R); DioR's Rc counts the same retrievals, so it is shown "
           "once here and kept as `Rc` in the CSV",
    "retrieval_rate": "share of questions that retrieved at least once (SeaKR Table 3's estimator rows differ in "
                      "when they retrieve: compare their scores at their rates)",
    "S_eff": "100 × (score − wo-RAG's score on the same questions) / N_R: the score gained per retrieval, with F1 "
             "as the score (EM on yes/no datasets such as StrategyQA), ×100 as SCAAR prints it; – without "
             "retrievals or without a wo-RAG run on the dataset",
    "time_rel": "SUGAR's Time: mean wall time per question over the time baseline's on the same questions; – when "
                "either run took calls from the call cache (its time would measure the cache)",
    "Gc": "greedy model calls per question (DioR's Gc)",
    "Ks": "sampled sequences per question (sampling methods such as SeaKR; not counted in Gc)",
    "Hc": "hallucination detections per question: how often the method's retrieval trigger fired (DioR's Hc)",
    "Tc": "generated tokens per question over every call, discarded look-aheads included (DioR's Tc)",
    "Sc": "generated sentences per question over every call (DioR's Sc)",
    "wall_time_s_mean": "mean wall time per question in seconds, from the run's trace; it compares methods only "
                        "where cached calls is 0 (a call served from the call cache costs a lookup)",
    "cache_hits": "model calls the run took from the call cache (`generation.cache`); – when unknown (a run "
                  "resumed or split over several processes)",
}
for _key in ("weighting", "query"):
    GLOSSARY[f"{_key}_best"] = (f"win: F1 significantly above every other row that differs only in {_key} (paired "
                                f"p < 1 − confidence); tie: best, or not significantly below the best; empty: neither")
GLOSSARY[MISSING] = "no value (each column's entry says when)"


def glossary(columns, defined: dict | None = None) -> list[tuple[str, str]]:
    """(shown header, definition) of each column with one; `defined` adds to or overrides `GLOSSARY`."""
    known = {**GLOSSARY, **(defined or {})}
    return [(HEADERS.get(c, c), known[c]) for c in columns if c in known]


def quality_and_cost(frame, keys: list[str], settings, defined: dict | None = None,
                     titles: tuple[str, str] = ("Answer quality", "Cost"), note: str | None = None) -> list[Shown]:
    """The quality and the cost table of `frame` (rows as they are; `keys` name them in both tables).
    `settings`: the intervals' (`params.report`), for the glossary; `defined`: definitions of columns
    `GLOSSARY` lacks (an ablation's varied settings); `note`: a line under both tables."""
    display = compact(frame)
    scores = [m for m in METRICS if m in display]
    label = baseline_label(frame)
    differences = [f"Δ{LABELS[m]} vs {label}" for m in scores if label is not None]
    quality = [*keys, *(["questions"] if "questions" in display else []), *scores, *differences,
               *(c for c in QUALITY_AFTER if c in display)]
    cost = [*keys, *(c for c in COST if c in display and display[c].notna().any())]
    tables = []
    for title, columns, extra in ((titles[0], quality, marks(frame, settings)), (titles[1], cost, [])):
        part = display[columns]
        missing = part.isna().to_numpy().any()
        entries = glossary([c for c in columns if not c.startswith("Δ")], defined) + extra
        if missing:
            entries += glossary([MISSING])
        tables.append(shown(title, part, entries, note))
    return tables
