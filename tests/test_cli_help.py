"""The CLI explains itself: what runs the workflow, every step's every option, the profiles there are,
the version, a methods listing that fits the terminal, and what check-params counts."""

from __future__ import annotations

import argparse
import tomllib

import pytest

from adaptive_rag import cli
from adaptive_rag.ablations import SEPARATOR
from adaptive_rag.config import load_params
from adaptive_rag.methods import registry

from conftest import REPO


def steps() -> list[str]:
    parser = cli.build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subparsers.choices)


def shown_help(argv, monkeypatch, capsys) -> tuple[argparse.ArgumentParser, str]:
    """`adaptive-rag ARGV --help` as a user runs it: the parser that printed the help, and the text."""
    printed = []
    print_help = argparse.ArgumentParser.print_help

    def record(self, file=None):
        printed.append(self)
        print_help(self, file)

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", record)
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--help"])
    assert stop.value.code == 0 and len(printed) == 1
    return printed[0], capsys.readouterr().out


def without_help(parser: argparse.ArgumentParser) -> list[str]:
    """The options and arguments of `parser` that its --help shows with no text."""
    return [action.option_strings[0] if action.option_strings else action.dest for action in parser._actions
            if not isinstance(action, argparse._SubParsersAction)
            and (not action.help or not action.help.strip()) and action.help != argparse.SUPPRESS]


def test_the_help_check_finds_an_option_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--documented", help="what it does")
    parser.add_argument("--bare")
    parser.add_argument("name")
    assert without_help(parser) == ["--bare", "name"]


def test_every_option_of_every_step_has_help(monkeypatch, capsys):
    assert {"generate", "serve", "profile", "methods", "check-params"} <= set(steps())
    missing = {}
    for argv in ([], *([step] for step in steps())):
        parser, text = shown_help(argv, monkeypatch, capsys)
        if without_help(parser):
            missing[" ".join(argv) or "adaptive-rag"] = without_help(parser)
        assert text.startswith(f"usage: adaptive-rag {' '.join(argv)}".rstrip()), text[:80]
    assert missing == {}


def test_help_says_what_runs_the_workflow(monkeypatch, capsys):
    _, text = shown_help([], monkeypatch, capsys)
    head = " ".join(text.split("positional arguments:")[0].split())
    assert "Snakemake runs the workflow (`snakemake --cores all`), or DVC does (`dvc repro`" in head
    assert "each of its rules calls one of these steps" in head
    assert "entry point" not in head


def test_version_is_the_package_version(capsys):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"adaptive-rag {version}\n"


def test_profile_help_lists_the_profiles_in_params(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    _, text = shown_help(["profile"], monkeypatch, capsys)
    names = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))
    assert len(names) >= 7
    assert f"({', '.join(names)})" in " ".join(text.split())
    (tmp_path / "params").mkdir()
    for name in ("alpha", "beta"):
        (tmp_path / "params" / f"{name}.yaml").write_text("seed: 0\n")
    monkeypatch.chdir(tmp_path)
    _, text = shown_help(["profile"], monkeypatch, capsys)
    assert "(alpha, beta)" in text and "(alpha | beta)" in text


def test_plan_help_names_the_profiles_and_the_tables_it_reads(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    _, text = shown_help(["plan"], monkeypatch, capsys)
    text = " ".join(text.split())
    names = sorted(p.stem for p in (REPO / "params").glob("*.yaml"))
    assert f"plan params/NAME.yaml instead ({' | '.join(names)})" in text
    assert "unit_costs.yaml, written by benchmarks/unit_costs.py" in text
    assert "question_counts.jsonl, written by benchmarks/question_counts.py" in text


def test_serve_help_names_the_command_users_type(monkeypatch, capsys):
    parser, text = shown_help(["serve"], monkeypatch, capsys)
    assert parser.prog == "adaptive-rag serve" and text.startswith("usage: adaptive-rag serve ")


@pytest.mark.parametrize("columns", [60, 100])
def test_methods_listing_fits_the_terminal(columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= columns
    types = registry.method_types()
    assert [line for line in lines if line and not line.startswith(" ")] == types
    assert "  settings: top_k: 3, max_retrievals: null," in "\n".join(lines)


def test_methods_markdown_is_the_table_docs_embed(capsys):
    assert cli.main(["methods", "--markdown"]) == 0
    assert capsys.readouterr().out == registry.methods_table()
    assert cli.main(["methods", "--markdown", "--update", "docs/methods.md"]) == 2
    assert capsys.readouterr().err == ("error: --update writes the markdown table into FILE: give it without "
                                       "--markdown\n")


def test_check_params_says_ablation_variants_are_method_configurations(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    params = load_params("params.yaml")
    named = len(params.named_methods)
    variants = len([name for name in params.methods if SEPARATOR in name])
    assert named + variants == len(params.methods) and variants > 0
    assert cli.main(["check-params"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"params.yaml: ok ({len(params.datasets)} datasets; {len(params.methods)} method "
                          f"configurations: {named} named + {variants} ablation variants of "
                          f"{len(params.ablations)} ablations; experiment: demo, demo-single x wo-rag, ")
