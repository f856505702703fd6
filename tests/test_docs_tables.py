"""Tables the docs copy from built outputs (`<!-- table: PATH -->` blocks) equal those outputs.

Outputs are DVC artifacts, so a checkout holds them only after `snakemake --cores all` (or `dvc pull`):
a block whose file is absent is skipped with the target that builds it; once built, a block that differs
fails with the command that rewrites it (`adaptive-rag docs-tables`)."""

import pytest

from adaptive_rag.errors import InputError
from adaptive_rag.reports.docs_tables import blocks, expected_body, pages, refuse_machine_columns, sync

from conftest import REPO

BLOCKS = [block for page in pages(REPO) for block in blocks(page)]


def test_the_docs_cite_built_tables():
    assert {b.path for b in BLOCKS} >= {"reports/tables/quality.md", "reports/tables/cost.md"}
    assert any(b.page.name == "README.md" for b in BLOCKS)  # the README's headline table is one of them


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page.name}:{b.line}:{b.path}" for b in BLOCKS])
def test_no_cited_table_shows_a_column_the_machine_decides(block):
    """Wall times and call-cache hits differ on every machine and cache: a fresh build could never equal
    them, so the docs cite only what params.yaml decides (checked whether or not the file is built)."""
    refuse_machine_columns(block, block.body)


def test_a_block_showing_wall_times_or_cache_hits_is_refused_naming_the_column(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/cost.md").write_text("| method | N_R | s/question | cached calls |\n|---|---|---|---|\n"
                                              "| flare | 1.50 | 0.81 | 12 |\n")
    page = tmp_path / "page.md"
    page.write_text("<!-- table: reports/cost.md -->\n<!-- /table -->\n")
    [whole] = blocks(page)
    with pytest.raises(InputError, match=r"page.md:1: cites s/question, cached calls of reports/cost.md: wall time; "
                                         r"the call cache's hits, set by the machine"):
        expected_body(tmp_path, whole)
    page.write_text("<!-- table: reports/cost.md; columns=method,s/question -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match="cites s/question of reports/cost.md"):
        expected_body(tmp_path, blocks(page)[0])
    page.write_text("<!-- table: reports/cost.md; columns=method,N_R -->\n<!-- /table -->\n")
    assert expected_body(tmp_path, blocks(page)[0]) == "| method | N_R |\n|---|---|\n| flare | 1.50 |\n"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page.name}:{b.line}:{b.path}" for b in BLOCKS])
def test_a_cited_table_equals_the_built_file(block):
    source = REPO / block.path
    if not source.is_file():
        pytest.skip(f"{block.path} is not built in this checkout (`snakemake --cores all {block.path}` or "
                    f"`dvc pull` makes it)")
    assert block.body == expected_body(REPO, block), (
        f"{block.page.relative_to(REPO)}:{block.line}: the table differs from {block.path}; "
        f"`adaptive-rag docs-tables` rewrites it (then reread the text around it)")


def test_sync_rewrites_stale_blocks_checks_and_reports_absent_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/a.md").write_text("| a |\n|---|\n| 2 |\n")
    page = tmp_path / "docs/page.md"
    page.write_text("intro\n<!-- table: reports/a.md -->\n| a |\n|---|\n| 1 |\n<!-- /table -->\n"
                    "<!-- table: reports/missing.md -->\n| b |\n<!-- /table -->\nend\n")
    differing, checked, absent = sync(tmp_path, [page], check=True)
    assert differing == checked == ["docs/page.md:2 reports/a.md"] and absent == ["docs/page.md:7 reports/missing.md"]
    assert "| 1 |" in page.read_text()  # --check rewrites nothing
    differing, _, _ = sync(tmp_path, [page], check=False)
    assert differing and page.read_text() == ("intro\n<!-- table: reports/a.md -->\n| a |\n|---|\n| 2 |\n"
                                              "<!-- /table -->\n<!-- table: reports/missing.md -->\n| b |\n"
                                              "<!-- /table -->\nend\n")
    assert sync(tmp_path, [page], check=True)[0] == []


def test_an_unclosed_block_is_an_error_naming_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- table: reports/a.md -->\n| a |\n")
    with pytest.raises(InputError, match="page.md: 1 '<!-- table: PATH -->' markers but 0 blocks closed"):
        blocks(page)


def test_a_block_may_cut_the_first_table_to_some_columns_and_rows(tmp_path):
    (tmp_path / "t.md").write_text("## A title\n\n| dataset | method | EM |\n|:--|:--|--:|\n| a | x | 0.1 |\n"
                                   "| b | x | 0.2 |\n| b | y | 0.3 |\n\nA glossary.\n")
    page = tmp_path / "page.md"
    page.write_text("<!-- table: t.md; columns=method,EM; where=dataset:b -->\n<!-- /table -->\n")
    assert sync(tmp_path, [page], check=False)[0] == ["page.md:1 t.md"]
    assert page.read_text() == ("<!-- table: t.md; columns=method,EM; where=dataset:b -->\n| method | EM |\n|---|---|\n"
                                "| x | 0.2 |\n| y | 0.3 |\n<!-- /table -->\n")
    page.write_text("<!-- table: t.md; columns=dataset,EM; except=method:x -->\n<!-- /table -->\n")
    sync(tmp_path, [page], check=False)
    assert "| dataset | EM |\n|---|---|\n| b | 0.3 |\n" in page.read_text()  # every row but method x's
    page.write_text("<!-- table: t.md; columns=dataset,EM; where=dataset -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match="page.md:1: table option 'where=dataset': expected where=COLUMN:VALUE"):
        sync(tmp_path, [page], check=True)
    page.write_text("<!-- table: t.md; columns=method,F1 -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match="page.md:1: t.md has no column F1; its columns: dataset, method, EM"):
        sync(tmp_path, [page], check=True)
    page.write_text("<!-- table: t.md; rows=3 -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match="table option 'rows=3'"):
        sync(tmp_path, [page], check=True)


def test_a_block_may_cite_a_later_table_of_the_file(tmp_path):
    (tmp_path / "t.md").write_text("## quality\n\n| method | EM |\n|:--|--:|\n| x | 0.1 |\n\nglossary\n\n"
                                   "## cost\n\n| method | N_R | Gc |\n|:--|--:|--:|\n| x | 1.50 | 3.00 |\n")
    page = tmp_path / "page.md"
    page.write_text("<!-- table: t.md; table=2; columns=method,N_R -->\n<!-- /table -->\n")
    sync(tmp_path, [page], check=False)
    assert page.read_text() == ("<!-- table: t.md; table=2; columns=method,N_R -->\n| method | N_R |\n|---|---|\n"
                                "| x | 1.50 |\n<!-- /table -->\n")
    page.write_text("<!-- table: t.md; table=3 -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match=r"t.md \(cited at .*page.md:1\): 2 markdown table\(s\), no table 3"):
        sync(tmp_path, [page], check=True)
    page.write_text("<!-- table: t.md; table=0 -->\n<!-- /table -->\n")
    with pytest.raises(InputError, match="page.md:1: table option 'table=0': N counts the file's markdown tables from 1"):
        sync(tmp_path, [page], check=True)


def test_the_cli_checks_then_rewrites(tmp_path, monkeypatch, capsys):
    from adaptive_rag.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "out.md").write_text("| a |\n|---|\n| 2 |\n")
    page = tmp_path / "docs/page.md"
    page.write_text("<!-- table: out.md -->\n| a |\n|---|\n| 1 |\n<!-- /table -->\n")
    monkeypatch.chdir(tmp_path)
    assert main(["docs-tables", "--check", "docs/page.md"]) == 1
    assert "error: 1 table(s) in the docs differ from the outputs they cite" in capsys.readouterr().err
    assert main(["docs-tables", "docs/page.md"]) == 0
    assert main(["docs-tables", "--check", "docs/page.md"]) == 0
    assert "| 2 |" in page.read_text()


def test_a_page_or_option_the_tool_cannot_read_is_one_line_naming_the_page(tmp_path, monkeypatch, capsys):
    """A `where=` without its colon is refused whether or not the cited file is built here (it would
    otherwise pass every check until the file is built); a page that is missing or not UTF-8 is named,
    with the line of the byte."""
    from adaptive_rag.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "page.md").write_text("intro\n<!-- table: reports/unbuilt.md; where=dataset -->\n<!-- /table -->\n")
    for args in (["page.md"], ["--check", "page.md"]):
        assert main(["docs-tables", *args]) == 2
        assert capsys.readouterr().err == ("error: page.md:2: table option 'where=dataset': expected "
                                           "where=COLUMN:VALUE\n")
    (tmp_path / "page.md").write_text("<!-- table: reports/unbuilt.md; except=:demo -->\n<!-- /table -->\n")
    assert main(["docs-tables", "page.md"]) == 2
    assert capsys.readouterr().err == "error: page.md:1: table option 'except=:demo': expected except=COLUMN:VALUE\n"
    (tmp_path / "latin1.md").write_bytes(b"intro\nun caf\xe9\n")
    assert main(["docs-tables", "latin1.md"]) == 2
    assert capsys.readouterr().err == "error: latin1.md: line 2: not UTF-8 text (invalid continuation byte)\n"
    assert main(["docs-tables", "gone.md"]) == 2
    assert capsys.readouterr().err == "error: docs page not found: gone.md\n"
