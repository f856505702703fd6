"""Reading one mapping of a params file, with errors that name the key.

The lowest layer of configuration: `config` (the whole params.yaml), `ablations` and every method's
`read_settings` use it, and it imports nothing of the package but `errors`, so none of them import
each other to share it.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import ConfigError

MISSING = object()


class Section:
    """Reads one mapping of params.yaml, remembering its dotted path for error messages."""

    def __init__(self, data: Any, path: str, source: str):
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: {path or 'top level'}: expected a mapping, got {show(data)}")
        self.data, self.path, self.source, self.used = data, path, source, set()
        self.choices: dict[str, tuple[str, ...]] = {}  # what `str(..., choices=)` allowed, per key (for docs)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {self.key(name)}: {message}")

    def raw(self, name: str, default: Any = MISSING) -> Any:
        self.used.add(name)
        if name not in self.data:
            if default is MISSING:
                raise self.fail(name, "missing required key")
            return default
        return self.data[name]

    def str(self, name: str, default: Any = MISSING, choices: tuple[str, ...] | None = None) -> str:
        if choices:
            self.choices[name] = tuple(choices)
        value = self.raw(name, default)
        if not isinstance(value, str) or not value:
            raise self.fail(name, f"expected a non-empty string, got {show(value)}")
        if choices and value not in choices:
            raise self.fail(name, f"must be one of {', '.join(choices)}; got {show(value)}")
        return value

    def int(self, name: str, default: Any = MISSING, minimum: int | None = None, allow_none: bool = False):
        value = self.raw(name, default)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            bound = f" >= {minimum}" if minimum is not None else ""
            raise self.fail(name, f"expected an integer{bound}{' or null' if allow_none else ''}, got {show(value)}")
        return value

    def float(self, name: str, default: Any = MISSING, minimum: float | None = None) -> float:
        value = self.raw(name, default)
        # YAML's .nan and .inf are floats; no setting of ours means anything at either
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or (minimum is not None and value < minimum)):
            bound = f" >= {minimum}" if minimum is not None else ""
            raise self.fail(name, f"expected a finite number{bound}, got {show(value)}")
        return float(value)

    def bool(self, name: str, default: Any = MISSING) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, got {show(value)}")
        return value

    def section(self, name: str, default: Any = MISSING) -> "Section":
        return Section(self.raw(name, default), self.key(name), self.source)

    def str_list(self, name: str) -> list[str]:
        value = self.raw(name)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise self.fail(name, f"expected a non-empty list of names, got {show(value)}")
        if len(set(value)) != len(value):
            raise self.fail(name, f"lists a name twice: {value}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            known = ", ".join(sorted(self.used)) or "(none)"
            raise ConfigError(f"{self.source}: {self.key(unknown[0])}: unknown key (known keys here: {known})")


def show(value: Any) -> str:
    return repr(value) if not isinstance(value, (dict, list)) else type(value).__name__


def check_name(s: Section, key: str, what: str, name: Any = MISSING) -> None:
    """Names become directory names, Snakemake wildcards and words of shell commands: keep them to an
    alphabet no shell or path gives a meaning to. `name` defaults to `key` (a mapping's own keys)."""
    name = key if name is MISSING else name
    if (not isinstance(name, str) or not name or name.startswith(".")
            or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name)):
        raise s.fail(key, f"{what} names may use ASCII letters, digits, '-', '_' and '.' only, and may not "
                          f"start with '.'; got {show(name)}")


def optional_str(s: Section, name: str) -> str:
    value = s.raw(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise s.fail(name, f"expected a string, got {show(value)}")
    return value
