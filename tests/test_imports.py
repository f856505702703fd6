"""The package's layers point one way: no import cycle, and the few rules that keep it so.

The graph is read from the source (every `import` that runs, at module level or inside a function;
`if TYPE_CHECKING:` blocks excluded, they never run), and importing `a.b.c` counts as importing the
packages `a` and `a.b` too, since Python runs their `__init__` first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "src" / "adaptive_rag"


def module_names(root: Path) -> dict[str, tuple[Path, bool]]:
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        names[".".join(parts)] = (path, is_package)
    return names


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def _targets(module: str, is_package: bool, node: ast.AST, known: dict) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module
    # `from pkg import name` imports the submodule pkg.name when there is one
    return [target] + [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    known = module_names(root)
    top = root.name
    graph = {}
    for module, (path, is_package) in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(module, is_package, node, known):
                parts = target.split(".")
                if parts[0] != top:
                    continue
                for i in range(1, len(parts) + 1):  # the packages on the way are imported first
                    name = ".".join(parts[:i])
                    if name in known and name != module:
                        edges.add(name)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reaches(graph, source: str) -> set[str]:
    seen, todo = set(), [source]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from ..a import x\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    graph = import_graph(package)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert graph["pkg.d"] == set()  # TYPE_CHECKING imports never run


def test_no_import_cycle_in_the_package():
    assert cycles(import_graph()) == []


GRAPH = None


def graph():
    global GRAPH
    GRAPH = GRAPH or import_graph()
    return GRAPH


@pytest.mark.parametrize("layer, forbidden", [
    # reports read files and draw; they never build a model, a retriever or a method
    ("adaptive_rag.reports", ("adaptive_rag.lm", "adaptive_rag.methods", "adaptive_rag.runner",
                              "adaptive_rag.retrieval.bm25", "adaptive_rag.retrieval.dense")),
    # the settings reader is the bottom of configuration
    ("adaptive_rag.settings", ("adaptive_rag.config", "adaptive_rag.methods", "adaptive_rag.ablations")),
    # methods are asked by config, never ask it
    ("adaptive_rag.methods", ("adaptive_rag.config", "adaptive_rag.runner", "adaptive_rag.cli")),
    ("adaptive_rag.ablations", ("adaptive_rag.config", "adaptive_rag.methods")),
    # backends know nothing of methods or of the workflow
    ("adaptive_rag.lm", ("adaptive_rag.methods", "adaptive_rag.config", "adaptive_rag.runner")),
    ("adaptive_rag.retrieval", ("adaptive_rag.methods", "adaptive_rag.config", "adaptive_rag.runner")),
])
def test_layer_never_reaches(layer, forbidden):
    g = graph()
    modules = [m for m in g if m == layer or m.startswith(layer + ".")]
    assert modules
    for module in modules:
        bad = sorted(t for t in reaches(g, module) if t.startswith(forbidden))
        assert not bad, f"{module} imports (directly or through others) {bad}"


def test_config_asks_the_registry_and_imports_no_method_module():
    direct = graph()["adaptive_rag.config"]
    assert "adaptive_rag.methods.registry" in direct
    assert not {m for m in reaches(graph(), "adaptive_rag.config")
                if m.startswith("adaptive_rag.methods.") and m != "adaptive_rag.methods.registry"}


@pytest.mark.slow  # a fresh interpreter: what the Snakefile pays at parse time
def test_validating_params_imports_no_heavy_library():
    code = ("import sys; from adaptive_rag.config import load_params; load_params('params.yaml'); "
            "print(sorted(m for m in ('torch', 'transformers', 'pyserini', 'spacy', 'pandas', "
            "'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_DIR.parents[1], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
