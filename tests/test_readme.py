"""The README is a front page: at most 150 lines, and every command, file and link it shows exists."""

import re
import shlex
import sys
from pathlib import Path

import pytest

from adaptive_rag.cli import build_parser

from conftest import REPO

README = REPO / "README.md"
TEXT = README.read_text(encoding="utf-8")
MAX_LINES = 150


def steps() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def commands() -> list[str]:
    """Every command the README shows: the lines of its shell blocks and its inline `code` that starts
    with a program name."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", TEXT, re.S):
        found += [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    found += [c for c in re.findall(r"`([^`\n]+)`", TEXT)
              if c.split()[0] in ("adaptive-rag", "make", "snakemake", "dvc", "python", ".venv/bin/python")]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    return {slug(h) for h in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)}


def test_the_readme_is_a_front_page():
    lines = TEXT.splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES} (results go to docs/)"
    for section in ("## Methods", "## Set up", "## Run the demo", "## Documentation"):
        assert section in TEXT
    assert "../shared" not in TEXT  # a clone has no such folder


@pytest.mark.parametrize("command", commands())
def test_every_command_it_shows_exists(command):
    words = shlex.split(command.replace("<", "").replace(">", ""))
    program, rest = words[0], words[1:]
    if program == "adaptive-rag":
        step = next((w for w in rest if not w.startswith("-")), None)
        assert step in steps(), f"`{command}`: adaptive-rag has no step {step!r}"
    elif program == "make":
        for target in (w for w in rest if "=" not in w and not w.startswith("-")):
            assert target in make_targets(), f"`{command}`: the Makefile has no target {target!r}"
    elif program in ("snakemake", "dvc"):
        assert (Path(sys.executable).parent / program).is_file(), f"`{command}`: {program} is not installed"
    elif program in ("python", ".venv/bin/python"):
        script = next((w for w in rest if w.endswith(".py")), None)
        assert script is None or (REPO / script).is_file(), f"`{command}`: {script} does not exist"
    elif program == ".":
        assert rest == [".venv/bin/activate"]
    else:
        pytest.fail(f"`{command}`: a command the test does not know how to check")


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\(([^)\s]+)\)", TEXT))))
def test_every_link_it_shows_resolves(link):
    if link.startswith(("http://", "https://")):
        return
    path, _, anchor = link.partition("#")
    target = REPO / path if path else README
    assert target.exists(), f"README.md links to {link}: no such file"
    if anchor:
        assert anchor in anchors(target), f"README.md links to {link}: {path} has no heading with that anchor"
