"""Method types register themselves; the registry finds them by importing the modules of `methods/`.

Dropping `methods/<name>.py` with a `@register("<name>")` class in is all it takes to make
`type: <name>` valid in params.yaml: no list of methods exists anywhere else. A paper with many parts
gets a package instead, `methods/<paper>/`, whose method lives in `methods/<paper>/<paper>.py` beside
the parts only it uses (`methods/parts/` holds what two or more methods share). Discovery imports the
modules by name on first use (importlib), so params validation asks the registry and the registry
never imports a method module statically; the method modules import this one and the settings
reader, never `config`. Kept import-light: the Snakefile validates params at parse time.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..settings import Section, check_name

if TYPE_CHECKING:
    from .base import Method

PACKAGE = __name__.rsplit(".", 1)[0]  # adaptive_rag.methods
NOT_METHODS = frozenset({"registry", "base", "parts"})  # the modules of methods/ that hold no method type

_REGISTRY: dict[str, type["Method"]] = {}
_discovered = False


def register(name: str):
    """Class decorator: make `type: <name>` run this class. The class states its own `when` and
    `what` (one line each: they are the rows of the methods table in docs/methods.md)."""
    check_name(Section({}, "register", "method registry"), name, "method type")

    def decorate(cls):
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise RuntimeError(f"method type {name!r} registered twice ({_REGISTRY[name].__module__} and "
                               f"{cls.__module__})")
        for attribute in ("when", "what"):
            if not getattr(cls, attribute, ""):
                raise RuntimeError(f"method type {name!r} ({cls.__module__}): set the class attribute "
                                   f"`{attribute}` (one line for the methods table)")
        cls.type_name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def discover() -> None:
    """Import every method module once (`methods/<name>.py`, and `methods/<paper>/<paper>.py` for a
    paper's package); their `@register` calls fill the registry. A package without its method module
    is an error here rather than a method type that silently goes missing."""
    global _discovered
    if _discovered:
        return
    package = importlib.import_module(PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        if module.name in NOT_METHODS or module.name.startswith("_"):
            continue
        name = f"{PACKAGE}.{module.name}"
        if module.ispkg:
            if importlib.util.find_spec(f"{name}.{module.name}") is None:
                raise RuntimeError(f"{name}: a method package holds its method in {module.name}/{module.name}.py")
            name = f"{name}.{module.name}"
        importlib.import_module(name)
    _discovered = True


def method_types() -> list[str]:
    discover()
    return sorted(_REGISTRY)


def method_class(type_name: str) -> type["Method"]:
    discover()
    if type_name not in _REGISTRY:
        raise ConfigError(f"unknown method type {type_name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[type_name]


def validate_settings(type_name: str, section: Section) -> dict:
    """The method's own reading of its settings; an unknown key fails naming it."""
    discover()
    if type_name not in _REGISTRY:
        raise ConfigError(
            f"{section.source}: {section.path}: unknown method type {type_name!r}; "
            f"available: {', '.join(sorted(_REGISTRY))} (set `type:` to one of them)"
        )
    settings = _REGISTRY[type_name].read_settings(section)
    section.done()
    return settings


@dataclass(frozen=True)
class MethodInfo:
    """What the methods table says of a type, all read from its class."""

    type: str
    when: str
    what: str
    needs: tuple[str, ...]  # capabilities beyond token log-probabilities, at the default settings
    retrieves: bool
    defaults: dict[str, Any]
    choices: dict[str, tuple[str, ...]]
    module: str


def describe(type_name: str) -> MethodInfo:
    cls = method_class(type_name)
    section = Section({}, f"methods.<{type_name}>", "defaults")
    defaults = cls.read_settings(section)
    return MethodInfo(type_name, " ".join(cls.when.split()), " ".join(cls.what.split()),
                      tuple(sorted(cls.needs_for(defaults))), cls.needs_retriever, defaults,
                      dict(section.choices), cls.__module__)


def _described() -> list[tuple[MethodInfo, str, list[str]]]:
    """(what the class says, its needs, its `key: default` settings) of every registered type, by name:
    the rows of both the markdown table and the plain listing."""
    rows = []
    for name in method_types():
        info = describe(name)
        settings = [f"{key}: {_value(value, info.choices.get(key))}" for key, value in info.defaults.items()]
        rows.append((info, ", ".join(info.needs) or "token log-probs", settings))
    return rows


def methods_table() -> str:
    """The markdown table of every registered type (docs/methods.md holds this text; a test keeps it so)."""
    rows = ["| type | when it retrieves | what it retrieves | needs | settings (defaults) |",
            "|---|---|---|---|---|"]
    for info, needs, settings in _described():
        cells = ", ".join(f"`{setting}`" for setting in settings)
        rows.append(f"| `{info.type}` | {info.when} | {info.what} | {needs} | {cells or '–'} |")
    return "\n".join(rows) + "\n"


def methods_listing(width: int) -> str:
    """The table's facts as plain text for a terminal: one block per type, every line at most `width`
    columns (at least 40), so nothing runs off the screen as a markdown row of 1,000+ characters would."""
    width = max(width, 40)
    lines = []
    for info, needs, settings in _described():
        lines.append(info.type)
        # no-break spaces inside each `key: value` keep a setting on one line where it fits
        unbroken = ", ".join(setting.replace(" ", "\N{NO-BREAK SPACE}") for setting in settings)
        for label, text in (("when", info.when), ("what", info.what), ("needs", needs),
                            ("settings", unbroken or "none")):
            wrapped = textwrap.wrap(text, width, initial_indent=f"  {label + ':':<10}", subsequent_indent=" " * 12,
                                    break_on_hyphens=False)
            lines += [line.replace("\N{NO-BREAK SPACE}", " ") for line in wrapped]
        lines.append("")
    return "\n".join(lines)


def _value(value: Any, choices: tuple[str, ...] | None) -> str:
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return f"{text} ({' / '.join(choices)})" if choices and len(choices) > 1 else text
