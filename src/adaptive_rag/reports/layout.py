"""How a report table is shown to a reader: readable cells, a glossary under it, one writer per format.

A table frame keeps plain numbers, and the CSV writes them as they are for tools. A reader gets
`Shown` tables instead: each column at a precision that fits it (scores 3 decimals, per-question
counters 1 or 2, counts none), intervals and differences as compact cells (`reports.compare`), missing
values as "–", headers in the papers' spelling, and under the table a glossary that defines every
column and mark it shows. The same `Shown` tables are written as markdown (a terminal, GitHub), HTML
(Snakemake's report shows HTML inline but markdown, CSV and LaTeX only as downloads) and LaTeX (papers),
so the three never disagree.
"""

from __future__ import annotations

import html
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

from ..io import atomic_write

# Decimals per column; a float column not named here gets DEFAULT_DECIMALS, an integer column none.
DECIMALS = {"questions": 0, "cache_hits": 0, "N_R": 2, "Rc": 2, "Gc": 2, "Ks": 2, "Hc": 2, "Sc": 2, "Tc": 1,
            "S_eff": 2, "time_rel": 2, "wall_time_s_mean": 2, "retrieval_rate": 2}
DEFAULT_DECIMALS = 3  # scores (EM, F1, Acc, answer found) and anything else
MISSING = "–"
# Column -> header as tables show it (the CSV keeps the column names).
HEADERS = {"em": "EM", "f1": "F1", "acc": "Acc", "S_eff": "S_eff ×100", "answer_found": "answer found",
           "wall_time_s_mean": "s/question", "cache_hits": "cached calls", "retrieval_rate": "retrieval rate"}


@dataclass
class Shown:
    """One table as a reader sees it: `cells` (a frame of strings under their shown headers), which
    columns are numbers (right-aligned), and the glossary (term, definition) printed under it."""

    title: str
    cells: object  # pandas.DataFrame of str
    numeric: list[bool]
    glossary: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None


def cell(value, decimals: int) -> str:
    """One value as a table shows it: `decimals` places for a float, none for an integer, text as
    it is, "–" for a missing value; no "-0.00" for a value that rounds to 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, (str, bool)):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    text = f"{float(value):.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def shown_frame(frame, decimals: dict | None = None, default: int = DEFAULT_DECIMALS):
    """(cells, numeric): the frame's values as strings under their shown headers, and which columns
    hold numbers. `decimals` adds to or overrides `DECIMALS` for this table."""
    import pandas as pd

    places = {**DECIMALS, **(decimals or {})}
    cells, numeric = {}, []
    for column in frame.columns:
        values = frame[column]
        present = [v for v in values if not (v is None or (isinstance(v, float) and math.isnan(v)))]
        is_number = bool(present) and all(isinstance(v, numbers.Number) and not isinstance(v, bool) for v in present)
        integral = is_number and pd.api.types.is_integer_dtype(values)
        cells[HEADERS.get(column, column)] = [cell(int(v) if integral else v, places.get(column, default))
                                              for v in values.astype(object).where(values.notna(), None)]
        numeric.append(is_number or _numeric_text(present))
    return pd.DataFrame(cells, columns=list(cells)), numeric


def _numeric_text(values) -> bool:
    """Text that starts with a number (compact interval cells `0.083 [0.021, 0.167]`, a varied
    setting's value) lines up as numbers do: right-aligned."""
    def number(v):
        try:
            float(v.split()[0])
            return True
        except (ValueError, IndexError):
            return False
    return bool(values) and all(isinstance(v, str) and number(v) for v in values)


def shown(title: str, frame, glossary=(), note: str | None = None, decimals: dict | None = None,
          default: int = DEFAULT_DECIMALS) -> Shown:
    return Shown(title, *shown_frame(frame, decimals, default), list(glossary), note)


def markdown(tables: list[Shown]) -> str:
    """Each table under a `##` heading, its note and its glossary (a list) under it."""
    from tabulate import tabulate

    parts = []
    for table in tables:
        aligns = ["right" if n else "left" for n in table.numeric]
        text = tabulate(table.cells.values.tolist(), headers=list(table.cells.columns), tablefmt="pipe",
                        disable_numparse=True, colalign=aligns)
        parts.append(f"## {table.title}\n\n{text}\n")
        if table.note:
            parts.append(f"{table.note}\n")
        if table.glossary:
            parts.append("\n".join(f"- **{term}**: {definition}" for term, definition in table.glossary) + "\n")
    return "\n".join(parts)


STYLE = """body { font-family: sans-serif; font-size: 14px; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 0.8em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; white-space: nowrap; }
th { background: #f3f3f3; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; max-width: 70em; }
dt { font-weight: bold; } dd { margin: 0; }"""


def html_page(title: str, tables: list[Shown]) -> str:
    """A standalone page (Snakemake's report shows it in a frame): each table, its note and glossary."""
    e = html.escape
    body = []
    for table in tables:
        head = "".join(f'<th class="num">{e(c)}</th>' if n else f"<th>{e(c)}</th>"
                       for c, n in zip(table.cells.columns, table.numeric))
        rows = "\n".join("<tr>" + "".join(f'<td class="num">{e(v)}</td>' if n else f"<td>{e(v)}</td>"
                                          for v, n in zip(row, table.numeric)) + "</tr>"
                         for row in table.cells.values.tolist())
        body.append(f"<h2>{e(table.title)}</h2>\n<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n"
                    f"</tbody>\n</table>")
        if table.note:
            body.append(f"<p>{e(table.note)}</p>")
        if table.glossary:
            body.append("<dl>\n" + "\n".join(f"<dt>{e(t)}</dt><dd>{e(d)}</dd>" for t, d in table.glossary)
                        + "\n</dl>")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{e(title)}</title>\n'
            f"<style>\n{STYLE}\n</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def latex(tables: list[Shown]) -> str:
    """Each table as a `tabular`, its title, note and glossary as `%` comments above it."""
    parts = []
    for table in tables:
        comments = [table.title, *([table.note] if table.note else []),
                    *(f"{term}: {definition}" for term, definition in table.glossary)]
        align = "".join("r" if n else "l" for n in table.numeric)
        text = table.cells.replace(MISSING, "--").to_latex(index=False, escape=True, column_format=align)
        text = text.replace("Δ", r"$\Delta$").replace("p<", "p$<$")  # plain `<` prints as ¡ in OT1 fonts
        parts.append("".join(f"% {line}\n" for line in comments) + text)
    return "\n".join(parts)


def write_shown(tables: list[Shown], title: str, markdown_path: Path | None = None, html_path: Path | None = None,
                latex_path: Path | None = None) -> None:
    """The tables in each format asked for."""
    for path, render in ((markdown_path, lambda: markdown(tables)), (html_path, lambda: html_page(title, tables)),
                         (latex_path, lambda: latex(tables))):
        if path is not None:
            with atomic_write(path) as handle:
                handle.write(render())
