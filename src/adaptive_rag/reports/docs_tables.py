"""Tables in the docs that are copies of built outputs, kept equal to them.

A docs page shows a built table between two markers:

    <!-- table: reports/tables/quality.md -->
    ... the file's content ...
    <!-- /table -->

or, for a page that needs only part of it, one markdown table of the file (the first, or the N-th with
`table=N`: an ablation's file holds a quality table, then a cost table) cut to some columns and rows
(options after the path, each after a `;`):

    <!-- table: reports/tables/quality.md; columns=method,EM,ΔEM vs wo-rag; where=dataset:demo-single -->
    <!-- table: reports/ablations/seakr-table1.md; table=2; columns=method,N_R,Ks -->
    <!-- table: reports/ablations/dior-table2.md; columns=method,EM; except=method:radio -->

(`where` keeps the rows whose column holds the value, `except` drops them.)

`adaptive-rag docs-tables` rewrites every such block from the file it names, and `--check` (the test suite
runs the same check) fails on a block that differs from its file, so a number in the docs is never older
than the output it cites. A block whose file has not been built here is left as it is and reported as
unchecked: outputs are DVC artifacts (`dvc pull` fetches them), not part of the repository.

A block may cite only what params.yaml decides: wall times and call-cache hits (`MACHINE_COLUMNS`)
depend on the machine and on what its call cache held, so a fresh build elsewhere could never equal
them; a block that shows one (in the page, or in the file a whole-file block copies) is refused, naming
the column, and cites the others with `columns=`. Timings belong in docs/performance.md, with the
machine they were measured on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..io import read_text

_BLOCK = re.compile(r"^<!-- table: (?P<spec>[^>\n]+?) -->\n(?P<body>.*?)^<!-- /table -->", re.S | re.M)
_MARKER = re.compile(r"^<!-- table: ", re.M)  # a marker opens a line; one quoted in text does not count
_OPTIONS = ("columns", "where", "except", "table")
# Table headers whose values come from the machine and its call cache, not from params.yaml
MACHINE_COLUMNS = {"s/question": "wall time", "cached calls": "the call cache's hits", "time_rel": "a ratio of wall times",
                   "Time": "a ratio of wall times"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening marker
    spec: str  # what the marker says: the path, then options
    body: str

    @property
    def path(self) -> str:
        """The cited output, relative to the repository root."""
        return self.spec.split(";")[0].strip()

    def options(self) -> dict[str, list[str]]:
        options = {}
        for part in self.spec.split(";")[1:]:
            name, _, value = part.strip().partition("=")
            if name not in _OPTIONS or not value:
                raise InputError(f"{self.page}:{self.line}: table option {part.strip()!r}; the options are "
                                 f"`; columns=A,B,...`, `; where=COLUMN:VALUE`, `; except=COLUMN:VALUE` and "
                                 f"`; table=N`")
            if name in ("where", "except") and (":" not in value or not value.partition(":")[0].strip()):
                raise InputError(f"{self.page}:{self.line}: table option {part.strip()!r}: expected "
                                 f"{name}=COLUMN:VALUE")
            if name == "table" and not (value.isdigit() and int(value) >= 1):
                raise InputError(f"{self.page}:{self.line}: table option {part.strip()!r}: N counts the file's "
                                 f"markdown tables from 1")
            options[name] = ([v.strip() for v in value.split(",")] if name == "columns"
                             else [value] if name == "table" else value.split(":", 1))
        return options


def blocks(page: Path) -> list[Block]:
    text = read_text(page, "docs page")
    found = [Block(page, text.count("\n", 0, m.start()) + 1, m["spec"].strip(), m["body"])
             for m in _BLOCK.finditer(text)]
    opening = len(_MARKER.findall(text))
    if opening != len(found):
        raise InputError(f"{page}: {opening} '<!-- table: PATH -->' markers but {len(found)} blocks closed by "
                         f"'<!-- /table -->' (each marker stands on its own line before the table)")
    return found


def expected_body(root: Path, block: Block) -> str | None:
    """What the block must hold, made from its file; None when the file is not built here. A block that
    shows a machine-dependent column (`MACHINE_COLUMNS`) is refused whether the file is built or not."""
    refuse_machine_columns(block, block.body)
    options = block.options()  # a mistaken option is refused whether the file is built here or not
    source = root / block.path
    if not source.is_file():
        return None
    content = read_text(source, f"{block.path} (cited at {block.page}:{block.line})")
    if not options:
        refuse_machine_columns(block, content)
        return content if content.endswith("\n") else content + "\n"
    number = int(options.get("table", ["1"])[0])
    header, rows = _table(content, number, f"{block.path} (cited at {block.page}:{block.line})")
    columns = options.get("columns", header)
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{block.page}:{block.line}: {block.path} has no column {', '.join(missing)}; "
                         f"its columns: {', '.join(header)}")
    for name, keep in (("where", True), ("except", False)):
        if name in options:
            column, value = options[name]
            if column not in header:
                raise InputError(f"{block.page}:{block.line}: {block.path} has no column {column}")
            rows = [r for r in rows if (r[header.index(column)] == value) == keep]
    refuse_machine_columns(block, "| " + " | ".join(columns) + " |\n|---|\n")
    picked = [[row[header.index(c)] for c in columns] for row in rows]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in picked]
    return "\n".join(lines) + "\n"


def refuse_machine_columns(block: Block, content: str) -> None:
    """Fail if a markdown table header in `content` names a column that the machine decides."""
    lines = content.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and set(lines[i + 1]) <= set("|:- ") and "-" in lines[i + 1]:
            found = [c for c in (cell.strip() for cell in line.strip().strip("|").split("|")) if c in MACHINE_COLUMNS]
            if found:
                raise InputError(f"{block.page}:{block.line}: cites {', '.join(found)} of {block.path}: "
                                 f"{'; '.join(MACHINE_COLUMNS[c] for c in found)}, set by the machine and its call "
                                 f"cache, not by params.yaml, so another build cannot equal it; cite the other "
                                 f"columns (`; columns=...`) and put timings in docs/performance.md")


def _table(content: str, number: int, what: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the `number`-th (from 1) markdown table in `content`, cells stripped."""
    lines = content.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]
    if len(starts) < number:
        raise InputError(f"{what}: {len(starts)} markdown table(s), no table {number}" if number > 1
                         else f"{what}: no markdown table")
    start = starts[number - 1]
    if start + 1 >= len(lines) or not set(lines[start + 1]) <= set("|:- "):
        raise InputError(f"{what}: table {number} has no header separator line")
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return table[0], table[2:]


def sync(root: Path, pages: list[Path], check: bool) -> tuple[list[str], list[str], list[str]]:
    """(blocks that differ from their file, blocks checked or rewritten, blocks whose file is absent), each
    as "page:line path"; with `check` False the differing blocks are rewritten in place."""
    differing, done, absent = [], [], []
    for page in pages:
        found = blocks(page)
        text = changed = page.read_text(encoding="utf-8")  # blocks() has read it as UTF-8
        for block in found:
            where = f"{page.relative_to(root) if page.is_relative_to(root) else page}:{block.line} {block.path}"
            body = expected_body(root, block)
            if body is None:
                absent.append(where)
                continue
            done.append(where)
            if body != block.body:
                differing.append(where)
                if not check:
                    changed = changed.replace(f"<!-- table: {block.spec} -->\n{block.body}<!-- /table -->",
                                              f"<!-- table: {block.spec} -->\n{body}<!-- /table -->", 1)
        if changed != text:
            page.write_text(changed, encoding="utf-8")
    return differing, done, absent


def pages(root: Path) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]
