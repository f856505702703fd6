"""Method registry: one file per method, registered by name with `@register("name")`.

Kept import-light (no torch) because params validation, and so the Snakefile, consult it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import Section
    from .base import Method

_REGISTRY: dict[str, type["Method"]] = {}


def register(name: str):
    def decorate(cls):
        if name in _REGISTRY:
            raise RuntimeError(f"method {name!r} registered twice")
        cls.type_name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load_builtin_methods() -> None:
    from . import dragin, fl_rag, flare, fs_rag, scaar, sr_rag, weighted_threshold, wo_rag  # noqa: F401  (registration)


def method_class(type_name: str) -> type["Method"]:
    _load_builtin_methods()
    if type_name not in _REGISTRY:
        raise ConfigError(f"unknown method type {type_name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[type_name]


def available_methods() -> list[str]:
    _load_builtin_methods()
    return sorted(_REGISTRY)


def validate_method_settings(type_name: str, section: "Section") -> dict:
    _load_builtin_methods()
    if type_name not in _REGISTRY:
        raise ConfigError(
            f"{section.source}: {section.path}: unknown method type {type_name!r}; "
            f"available: {', '.join(sorted(_REGISTRY))} (set `type:` to one of them)"
        )
    settings = _REGISTRY[type_name].read_settings(section)
    section.done()
    return settings
