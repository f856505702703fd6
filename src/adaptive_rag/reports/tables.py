"""The main experiment's tables: one CSV with every number for tools (`scores.csv`), and for readers
the answer-quality and cost tables (`reports.quality_cost`) as markdown, HTML and LaTeX, and the
retrievals-per-question table. Rows follow `experiment.datasets`, then `experiment.methods`, in every
table and figure.

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
from .compare import COMPARISON_COLUMNS, INTERVAL_COLUMNS, comparison_columns, interval_columns
from .layout import shown, write_shown
from .quality_cost import glossary, quality_and_cost

COLUMNS = ("dataset", "method", "questions", "em", "f1", "acc", "N_R", "S_eff", "Rc", "Gc", "Hc", "Tc", "Sc",
           "answer_found")
# After the interval and comparison columns, so that the CSV's older columns keep their places; Ks only
# where some run sampled.
TIME_COLUMNS = ("wall_time_s_mean", "cache_hits")
# Which score S_eff uses, by dataset format (SCAAR: F1 for 2Wiki/HotpotQA/IIRC, EM for StrategyQA).
S_EFF_METRIC = {"strategyqa": "em"}
BASELINE_TYPE = "wo-rag"
S_EFF_SCALE = 100  # SCAAR's tables print S_eff x 100
CSV_HEADERS = {"S_eff": "S_eff ×100"}  # column -> header in the CSV (its other headers are the column names)


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
    sampled = ["Ks"] if "Ks" in frame and frame["Ks"].notna().any() else []
    columns = [*COLUMNS, *INTERVAL_COLUMNS, *(COMPARISON_COLUMNS if compare_to else []), *TIME_COLUMNS, *sampled]
    for column in columns:
        if column not in frame:
            frame[column] = None
    return experiment_order(frame[columns], params)


def experiment_order(frame, params):
    """Rows by `experiment.datasets`, then `experiment.methods` (names outside them after, as they came):
    the one order of every table and figure. Unchanged without params."""
    if params is None or frame.empty:
        return frame.reset_index(drop=True)

    def rank(names, order):
        seen = list(dict.fromkeys(names))
        return names.map({n: (order.index(n) if n in order else len(order) + seen.index(n)) for n in seen})

    keys = frame.assign(_d=rank(frame["dataset"], list(params.experiment_datasets)),
                        _m=rank(frame["method"], list(params.experiment_methods)))
    return keys.sort_values(["_d", "_m"], kind="stable").drop(columns=["_d", "_m"]).reset_index(drop=True)


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


def retrieval_distribution(paths: list[Path], params=None):
    """Questions per number of retrievals, one row per (dataset, method), in `experiment_order`."""
    import pandas as pd

    rows = []
    for data in load_scores(paths):
        for count, questions in data["summary"].get("retrievals_histogram", {}).items():
            rows.append({"dataset": data["dataset"], "method": data["method"], "retrievals": int(count),
                         "questions": questions})
    return experiment_order(pd.DataFrame(rows, columns=["dataset", "method", "retrievals", "questions"]), params)


def distribution_table(long):
    """Wide form: retrieval counts as columns, rows in the long form's order."""
    if long.empty:
        return long
    wide = long.pivot_table(index=["dataset", "method"], columns="retrievals", values="questions",
                            fill_value=0, aggfunc="sum")
    wide = wide.reindex(list(dict.fromkeys(zip(long["dataset"], long["method"]))))
    wide.columns = [f"{c} retrievals" for c in wide.columns]
    return wide.reset_index()


def write_csv(frame, path: Path) -> None:
    """Every column, every number in its own column (4 decimals), as tools read it."""
    with atomic_write(path) as handle:
        frame.rename(columns=CSV_HEADERS).to_csv(handle, index=False, float_format="%.4f", lineterminator="\n")


ORDER_NOTE = ("Rows follow `experiment.datasets`, then `experiment.methods` (params.yaml), as in every table and "
              "figure of the main experiment.")


def score_tables(frame, settings, params=None) -> list:
    """The main experiment's quality and cost tables (`reports.quality_cost`); with `params`, each row's
    method is named as `Params.method_label` names it."""
    if params is not None and not frame.empty:
        frame = frame.assign(method=[params.method_label(m, d) for m, d in zip(frame["method"], frame["dataset"])])
    return quality_and_cost(frame, ["dataset", "method"], settings, note=ORDER_NOTE,
                            titles=("Answer quality: methods × datasets", "Cost: methods × datasets"))


def retrievals_table(wide):
    """The retrievals-per-question table as shown, with its glossary."""
    entries = glossary(["dataset", "method"])
    if any(c.endswith(" retrievals") for c in wide.columns):
        entries.append(("k retrievals", "questions that retrieved k times; a row sums to the questions scored, "
                                        "and its mean is the cost table's N_R"))
    return shown("Questions per number of retrievals", wide, entries, ORDER_NOTE)


def write_tables(tables: list, prefix: Path, title: str, latex: bool = True) -> list[Path]:
    """PREFIX.md, PREFIX.html and (with `latex`) PREFIX.tex of the shown tables."""
    paths = [Path(f"{prefix}.md"), Path(f"{prefix}.html"), *([Path(f"{prefix}.tex")] if latex else [])]
    write_shown(tables, title, *paths)
    return paths
