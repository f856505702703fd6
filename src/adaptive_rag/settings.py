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
SEED_MAX = 2**63 - 1
# Names become file names, and the longest one made of two names is the generate rule's benchmark
# file, logs/benchmarks/generate-<dataset>-<method>.tsv: with names of at most NAME_MAX characters and
# ablation variants' generated names (`<ablation>--<values>`) of at most VARIANT_NAME_MAX, every file
# name the workflow derives (temporary siblings included) stays under the 255 bytes of common file systems.
NAME_MAX = 100
VARIANT_NAME_MAX = 120


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

    def float(self, name: str, default: Any = MISSING, minimum: float | None = None,
              maximum: float | None = None) -> float:
        value = self.raw(name, default)
        # YAML's .nan and .inf are floats; no setting of ours means anything at either
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or (minimum is not None and value < minimum) or (maximum is not None and value > maximum)):
            bound = (f" between {minimum} and {maximum}" if minimum is not None and maximum is not None
                     else f" >= {minimum}" if minimum is not None else f" <= {maximum}" if maximum is not None else "")
            raise self.fail(name, f"expected a finite number{bound}, got {show(value)}")
        return float(value)

    def seed(self, name: str, default: Any = MISSING) -> int:
        """A random seed: torch takes at most 64 bits and numpy no negative seed, and the API backend
        sends it to a server as a signed 64-bit integer, so 0 <= seed <= 2**63 - 1 is what every consumer
        accepts (a larger one passed here and overflowed only when a step seeded its generator)."""
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
            raise self.fail(name, f"expected a seed, an integer from 0 to {SEED_MAX} (2**63 - 1), got {show(value)}")
        return value

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
    alphabet no shell or path gives a meaning to, never starting like an option (`--dataset -x` would
    be read as a flag) and short enough to be a file name (NAME_MAX). `name` defaults to `key` (a
    mapping's own keys)."""
    name = key if name is MISSING else name
    if (not isinstance(name, str) or not name or name[0] in ".-"
            or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name)):
        raise s.fail(key, f"{what} names may use ASCII letters, digits, '-', '_' and '.' only, and may not "
                          f"start with '.' or '-'; got {show(name)}")
    check_length(s, key, f"the {what} name", name, NAME_MAX)


def check_length(s: Section, key: str, what: str, name: str, limit: int, fix: str = "shorten it") -> None:
    """`what` (`the dataset name`) is at most `limit` characters: see NAME_MAX."""
    if len(name) > limit:
        raise s.fail(key, f"{what} is {len(name)} characters long; {fix} to at most {limit}, so that the file names "
                          f"made from it (logs/benchmarks/generate-<dataset>-<method>.tsv) stay under the 255-byte "
                          f"limit of file systems")


def rule_name(prefix: str, name: str) -> str:
    """The Snakemake rule (and DVC stage) made for a named entry, e.g. `ablation_scaar_grid`: rule names
    are Python identifiers, so '-' and '.' become '_'."""
    return prefix + name.replace("-", "_").replace(".", "_")


def check_rule_names(s: Section, names, prefix: str, what: str) -> None:
    """Two names that differ only by '-', '_' or '.' (`ab-x`, `ab_x`) would make one rule name twice,
    which Snakemake refuses only while parsing its rules, with its own error: refuse them here."""
    seen: dict[str, str] = {}
    for name in names:
        rule = rule_name(prefix, name)
        if rule in seen:
            raise s.fail(name, f"{what} names {seen[rule]!r} and {name!r} both make the Snakemake target {rule} "
                               f"('-' and '.' become '_'); rename one of them")
        seen[rule] = name


def optional_str(s: Section, name: str) -> str:
    value = s.raw(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise s.fail(name, f"expected a string, got {show(value)}")
    return value
