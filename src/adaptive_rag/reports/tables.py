"""Methods x metrics tables (markdown for reading, LaTeX for papers, CSV for tools).

S_eff is SCAAR's efficiency: (score - score of wo-RAG on the same questions) / N_R, with F1 as the
score for multi-hop span datasets and EM for StrategyQA (yes/no), reported times 100 because that is
the scale the paper's tables print (FS-RAG, 2Wiki, 13B: (0.4701 - 0.2779) / 3.48 = 0.0552, printed
5.52); the column header says so. It is computed here, not in the score step, because it needs the
wo-RAG run of the same dataset.

Every EM, F1 and acc comes with its bootstrap interval, and every run is compared with
`experiment.baseline` on the same questions (`reports.compare`, `evaluation.intervals`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..evaluation.intervals import ReportConfig
from ..io import atomic_write, read_json
from .compare import COMPARISON_COLUMNS, INTERVAL_COLUMNS, comparison_columns, compact, interval_columns

COLUMNS = ("dataset", "method", "questions", "em", "f1", "acc", "N_R", "S_eff", "Rc", "Gc", "Hc", "Tc", "Sc",
           "answer_found")
# Which score S_eff uses, by dataset format (SCAAR: F1 for 2Wiki/HotpotQA/IIRC, EM for StrategyQA).
S_EFF_METRIC = {"strategyqa": "em"}
BASELINE_TYPE = "wo-rag"
S_EFF_SCALE = 100  # SCAAR's tables print S_eff x 100
HEADERS = {"S_eff": "S_eff ×100"}  # column -> header in written tables


def s_eff_metric(dataset_format: str) -> str:
    return S_EFF_METRIC.get(dataset_format, "f1")


def load_scores(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        data = read_json(path, "score file")
        if "summary" not in data or "dataset" not in data:
            raise InputError(f"{path}: not a score file (missing 'summary' or 'dataset')")
        out.append({**data, "path": str(path)})
    return out


def s_eff(score: dict, baseline: dict, metric: str) -> float | None:
    """100 (score - baseline) / N_R over the questions both runs answered (the paper's scale); None
    when N_R is 0."""
    mine = {q["id"]: q[metric] for q in score["per_question"]}
    base = {q["id"]: q[metric] for q in baseline["per_question"]}
    if set(mine) != set(base):
        raise InputError(f"{score['path']} and {baseline['path']} score different questions; "
                         f"S_eff compares runs on the same split")
    n_r = score["summary"].get("N_R", 0.0)
    if not n_r:
        return None
    return S_EFF_SCALE * (sum(mine.values()) - sum(base.values())) / len(mine) / n_r


def time_rel(score: dict, baseline: dict) -> float | None:
    """SUGAR's Time: mean wall time per question over the baseline's (single-step retrieval) on the same
    questions. None unless neither run took a call from the call cache (`cache_hits` 0, from its
    provenance): a cached call costs a lookup, so such times measure the cache, not the method."""
    if {q["id"] for q in score["per_question"]} != {q["id"] for q in baseline["per_question"]}:
        raise InputError(f"{score['path']} and {baseline['path']} score different questions; "
                         f"time_rel compares runs on the same split")
    if score["summary"].get("cache_hits") != 0 or baseline["summary"].get("cache_hits") != 0:
        return None
    base = baseline["summary"].get("wall_time_s_mean")
    mine = score["summary"].get("wall_time_s_mean")
    return mine / base if mine is not None and base else None


def collect_scores(paths: list[Path], params=None):
    """One row per score file, with intervals (`params.report`, defaults without params); S_eff and the
    comparison with `experiment.baseline` need `params` (dataset formats, which method is wo-RAG)."""
    import pandas as pd

    scores = load_scores(paths)
    settings = params.report if params is not None else ReportConfig()
    baselines = {}
    if params is not None:
        for data in scores:
            if data["method"] in params.methods and params.method(data["method"]).type == BASELINE_TYPE:
                baselines.setdefault(data["dataset"], data)
    compare_to = params.experiment_baseline if params is not None else None
    compared = _compared(scores, compare_to, params) if compare_to else {}
    rows = []
    for data in scores:
        row = {"dataset": data["dataset"], "method": data["method"], **data["summary"]}
        base = baselines.get(data["dataset"])
        row["S_eff"] = None
        if base is not None and base is not data:
            row["S_eff"] = s_eff(data, base, s_eff_metric(params.dataset(data["dataset"]).format))
        row.update(interval_columns(data, settings))
        if compare_to:
            row.update(comparison_columns(data, compared[data["dataset"]], compare_to, settings))
        rows.append(row)
    frame = pd.DataFrame(rows)
    columns = [*COLUMNS, *INTERVAL_COLUMNS, *(COMPARISON_COLUMNS if compare_to else [])]
    for column in columns:
        if column not in frame:
            frame[column] = None
    return frame[columns]


def _compared(scores: list[dict], method: str, params) -> dict[str, dict]:
    """The baseline's score per dataset; every dataset in the table needs one."""
    found = {}
    for data in scores:
        if data["method"] == method:
            found.setdefault(data["dataset"], data)
    for dataset in dict.fromkeys(d["dataset"] for d in scores):
        if dataset not in found:
            raise InputError(f"no score file for {dataset}/{method} among the inputs: {params.source}: "
                             f"experiment.baseline is {method!r}, every run is compared with it on its "
                             f"dataset (pass its score file, or set experiment.baseline: null)")
    return found


def retrieval_distribution(paths: list[Path]):
    """Questions per number of retrievals, one row per (dataset, method)."""
    import pandas as pd

    rows = []
    for data in load_scores(paths):
        for count, questions in data["summary"].get("retrievals_histogram", {}).items():
            rows.append({"dataset": data["dataset"], "method": data["method"], "retrievals": int(count),
                         "questions": questions})
    return pd.DataFrame(rows, columns=["dataset", "method", "retrievals", "questions"])


def distribution_table(long):
    """Wide form: retrieval counts as columns."""
    if long.empty:
        return long
    wide = long.pivot_table(index=["dataset", "method"], columns="retrievals", values="questions",
                            fill_value=0, aggfunc="sum")
    wide.columns = [f"{c} retrievals" for c in wide.columns]
    return wide.reset_index()


def write_tables(frame, markdown: Path, csv: Path | None, latex: Path | None = None,
                 note: str | None = None) -> None:
    """CSV: every number in its own column; markdown and LaTeX: intervals as compact cells
    (`reports.compare`), `note` under the markdown table and as a comment atop the LaTeX."""
    if csv is not None:
        with atomic_write(csv) as handle:
            frame.rename(columns=HEADERS).to_csv(handle, index=False, float_format="%.4f", lineterminator="\n")
    frame = compact(frame).rename(columns=HEADERS)
    shown = frame.astype(object).where(frame.notna(), None)  # NaN (e.g. S_eff without retrievals) -> "–"
    with atomic_write(markdown) as handle:
        handle.write(shown.to_markdown(index=False, floatfmt=".4f", missingval="–") + "\n")
        if note:
            handle.write(f"\n{note}\n")
    if latex is not None:
        text = frame.to_latex(index=False, float_format="%.4f", na_rep="--", escape=True)
        text = text.replace("Δ", r"$\Delta$").replace("p<", "p$<$")  # plain `<` prints as ¡ in OT1 fonts
        with atomic_write(latex) as handle:
            handle.write((f"% {note}\n" if note else "") + text)
