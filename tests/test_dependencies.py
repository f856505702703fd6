"""pyproject.toml declares every third-party package the code imports: a package that arrives only as
another's dependency (scikit-learn through pyserini, say) disappears the day that one drops it, and
constraints.txt pins versions without making anything a requirement."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from conftest import REPO

PACKAGE_DIR = REPO / "src" / "adaptive_rag"


def imported_modules(sources: dict[str, str]) -> dict[str, set[str]]:
    """Top-level module -> the files importing it, over every import statement (absolute ones: a
    relative import stays inside the package)."""
    found: dict[str, set[str]] = {}
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text, name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                found.setdefault(module.split(".")[0], set()).add(name)
    return found


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared_distributions(pyproject: Path) -> set[str]:
    requirements = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    return {canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group()) for r in requirements}


def undeclared(sources: dict[str, str], declared: set[str], own: str = "adaptive_rag") -> dict[str, str]:
    """Third-party modules imported by `sources` whose distribution is not in `declared`, each with why."""
    distributions = importlib.metadata.packages_distributions()
    problems = {}
    for module, files in sorted(imported_modules(sources).items()):
        if module == own or module in sys.stdlib_module_names:
            continue
        providers = {canonical(d) for d in distributions.get(module, [])}
        where = ", ".join(sorted(files))
        if not providers:
            problems[module] = f"no installed distribution provides it (imported by {where})"
        elif not providers & declared:
            problems[module] = (f"from {', '.join(sorted(providers))}, not in pyproject.toml's dependencies "
                                f"(imported by {where})")
    return problems


def test_the_check_finds_an_undeclared_and_an_unknown_import():
    sources = {"a.py": "import numpy as np\nfrom yaml import safe_load\nimport json\nfrom . import b\n",
               "b.py": "import sklearn.metrics\nimport no_such_module_anywhere\nimport adaptive_rag.io\n"}
    problems = undeclared(sources, declared={"pyyaml", "numpy"})
    assert sorted(problems) == ["no_such_module_anywhere", "sklearn"]
    assert problems["sklearn"] == "from scikit-learn, not in pyproject.toml's dependencies (imported by b.py)"
    assert problems["no_such_module_anywhere"].startswith("no installed distribution provides it")


def test_every_imported_package_is_a_declared_dependency():
    sources = {str(path.relative_to(REPO)): path.read_text(encoding="utf-8") for path in PACKAGE_DIR.rglob("*.py")}
    assert len(sources) > 50
    assert undeclared(sources, declared_distributions(REPO / "pyproject.toml")) == {}
