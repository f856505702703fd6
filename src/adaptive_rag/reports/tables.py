"""Methods x metrics tables (markdown for reading, CSV for tools)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import atomic_write, read_json

COLUMNS = ("dataset", "method", "questions", "em", "f1", "precision", "recall", "acc", "retrievals_mean",
           "answer_found")


def collect_scores(paths: list[Path]):
    import pandas as pd

    rows = []
    for path in paths:
        data = read_json(path, "score file")
        if "summary" not in data or "dataset" not in data:
            raise InputError(f"{path}: not a score file (missing 'summary' or 'dataset')")
        rows.append({"dataset": data["dataset"], "method": data["method"], **data["summary"]})
    return pd.DataFrame(rows)[list(COLUMNS)]


def write_tables(frame, markdown: Path, csv: Path) -> None:
    with atomic_write(csv) as handle:
        frame.to_csv(handle, index=False, float_format="%.4f", lineterminator="\n")
    with atomic_write(markdown) as handle:
        handle.write(frame.to_markdown(index=False, floatfmt=".4f") + "\n")
