"""Methods register themselves: the registry's discovery, its refusals, and the table it writes."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import adaptive_rag.methods as methods_package
from adaptive_rag.errors import ConfigError
from adaptive_rag.methods import registry
from adaptive_rag.methods.base import Method
from adaptive_rag.settings import Section

REPO = Path(__file__).resolve().parents[1]


def test_every_module_of_methods_registers_a_type_and_nothing_else_does():
    types = registry.method_types()
    by_module = {}
    for name in types:
        by_module.setdefault(registry.method_class(name).__module__.rsplit(".", 1)[-1], []).append(name)
    modules = {m.name for m in pkgutil.iter_modules(methods_package.__path__)}
    assert set(by_module) == modules - registry.NOT_METHODS  # one file per method, no helper among them
    packages = {m.name for m in pkgutil.iter_modules(methods_package.__path__) if m.ispkg} - {"parts"}
    assert packages == {"adaptive_rag", "adaptive_retrieval", "dior", "radio", "seakr", "sugar"}  # a paper's package: its method in <paper>/<paper>.py
    for package in packages:
        assert {registry.method_class(name).__module__ for name in by_module[package]} == \
            {f"adaptive_rag.methods.{package}.{package}"}
    assert types == ["adaptive-rag", "adaptive-retrieval", "dior", "dragin", "fl-rag", "flare", "fs-rag", "radio", "scaar", "seakr", "self-rag",
                     "sr-rag", "sugar", "weighted-threshold", "wo-rag"]


def test_a_method_package_without_its_method_module_is_refused(tmp_path, monkeypatch):
    """A package under methods/ that lacks <name>/<name>.py would otherwise vanish from the registry."""
    (tmp_path / "orphan").mkdir()
    (tmp_path / "orphan" / "__init__.py").write_text("")
    (tmp_path / "orphan" / "parts_only.py").write_text("")
    monkeypatch.setattr(methods_package, "__path__", [*methods_package.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_discovered", False)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(RuntimeError, match=r"adaptive_rag\.methods\.orphan: a method package holds its method "
                                           r"in orphan/orphan\.py"):
        registry.discover()


class _Toy(Method):
    when, what = "never", "nothing"


def test_register_refuses_a_class_without_its_table_row(monkeypatch):
    registry.discover()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    class Bare(Method):
        pass

    with pytest.raises(RuntimeError, match="set the class attribute `when`"):
        registry.register("bare")(Bare)
    assert "bare" not in registry._REGISTRY


def test_register_refuses_a_second_class_under_a_taken_name(monkeypatch):
    registry.discover()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(RuntimeError, match="'flare' registered twice"):
        registry.register("flare")(_Toy)
    assert registry.register("toy")(_Toy) is _Toy and registry.method_class("toy") is _Toy


@pytest.mark.parametrize("name", ["", "a b", "../x", ".hidden", "x;y"])
def test_register_refuses_names_that_cannot_be_paths_or_wildcards(name):
    with pytest.raises(ConfigError, match="method type names may use ASCII letters"):
        registry.register(name)


def test_unknown_type_names_the_key_and_lists_the_types():
    with pytest.raises(ConfigError) as info:
        registry.validate_settings("flair", Section({}, "methods.mine", "params.yaml"))
    message = str(info.value)
    assert message.startswith("params.yaml: methods.mine: unknown method type 'flair'; available: "
                              "adaptive-rag, adaptive-retrieval, dior, dragin")
    assert "(set `type:` to one of them)" in message


def test_validate_settings_is_the_method_reading_plus_unknown_keys():
    assert registry.validate_settings("sr-rag", Section({"top_k": 5}, "methods.s", "p.yaml")) == \
        {"top_k": 5, "retriever": None}
    with pytest.raises(ConfigError, match=r"p.yaml: methods.s.topk: unknown key \(known keys here: retriever, top_k\)"):
        registry.validate_settings("sr-rag", Section({"topk": 5}, "methods.s", "p.yaml"))


def test_describe_reads_defaults_choices_and_needs_from_the_class():
    info = registry.describe("dragin")
    assert info.needs == ("attentions", "entropy") and info.retrieves
    assert info.defaults["reference"] == "paper" and info.defaults["keep"] == "all"
    assert info.choices["reference"] == ("paper", "dragin-code")
    assert registry.describe("wo-rag").defaults == {} and not registry.describe("wo-rag").retrieves
    # needs that depend on settings: SCAAR's defaults need only log-probs, its ATTN weighting attentions
    assert registry.describe("scaar").needs == ()
    assert registry.method_class("scaar").needs_for({**registry.describe("scaar").defaults,
                                                     "weighting": "attn"}) == {"attentions"}


def test_methods_table_has_a_row_per_type_with_its_defaults():
    table = registry.methods_table().splitlines()
    assert table[0].startswith("| type | when it retrieves | what it retrieves | needs |")
    assert len(table) == 2 + len(registry.method_types())
    flare = next(row for row in table if row.startswith("| `flare` |"))
    assert "`theta: 0.8`" in flare and "`variant: paper (paper / dragin-code)`" in flare
    assert next(r for r in table if r.startswith("| `wo-rag` |")).endswith("| never | – | token log-probs | – |")


def test_docs_methods_table_is_the_generated_one():
    text = (REPO / "docs" / "methods.md").read_text(encoding="utf-8")
    block = text.split("<!-- methods-table:start -->\n", 1)[1].split("<!-- methods-table:end -->", 1)[0]
    assert block == registry.methods_table(), "run `adaptive-rag methods --update docs/methods.md`"


def test_methods_update_rewrites_only_the_marked_block(tmp_path, capsys):
    from adaptive_rag.cli import main

    page = tmp_path / "methods.md"
    page.write_text("# M\nbefore\n<!-- methods-table:start -->\nold\n<!-- methods-table:end -->\nafter\n")
    assert main(["methods", "--update", str(page)]) == 0
    assert page.read_text() == ("# M\nbefore\n<!-- methods-table:start -->\n" + registry.methods_table()
                                + "<!-- methods-table:end -->\nafter\n")
    page.write_text("no markers\n")
    assert main(["methods", "--update", str(page)]) == 2
    assert "needs one line <!-- methods-table:start -->" in capsys.readouterr().err
