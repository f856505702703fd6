"""Prompt templates: the layout of a prompt as data (instruction, exemplars, passages, the question).

Why data: two implementations of one method can only be compared on the same prompt, and the prompt
is more than its exemplars: where the instruction goes, what separates exemplars, how a passage is
written, what precedes the test question. A template file says all of that, so a user who copies
another implementation's layout into one gets its prompt byte for byte, and the project's own layout
(`builtin:default`, shipped in `templates/`) is one such file rather than code.

Why YAML: a template is written by hand and must say why each piece is there (comments), and its
strings are byte-exact, which double-quoted YAML strings show plainly (every newline is a visible
`\\n`). JSON has no comments, and its strings are no clearer.

A template has one section per prompt style (`cot`, the chain of thought every method uses;
`qa-oneshot`, SUGAR's direct answer), each with the pieces both formats share and one subsection
per prompt format (`raw`: one text; `chat`: messages). Every string is a Python format string whose
placeholders are checked against what that piece may use (`PIECES`), so a typo fails when params
are checked, naming the file and the key, not halfway through a run.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import InputError
from ..io import read_yaml
from ..lm.base import Prompt

if TYPE_CHECKING:
    from ..retrieval import Hit
    from .fewshot import Exemplar

BUILTIN = "builtin:"
BUILTIN_DIR = Path(__file__).parent / "templates"
DEFAULT = "builtin:default"
VERSION = 1
FORMATS = ("raw", "chat")
STYLES = ("cot", "qa-oneshot")
_EXEMPLAR = ("i", "question", "reasoning", "answer", "completion", "instruction")
# Each piece and the placeholders it may use; a chat `system` of null means no system message.
PIECES: dict[str, tuple[str, ...]] = {
    "instruction": (),
    "completion": ("question", "reasoning", "answer"),
    "passage": ("i", "id", "title", "text"),
    "context": ("passages",),
    "raw.header": ("instruction",),
    "raw.exemplar": _EXEMPLAR,
    "raw.question": ("context", "question", "instruction"),
    "chat.system": ("instruction",),
    "chat.user": _EXEMPLAR,
    "chat.assistant": _EXEMPLAR,
    "chat.question": ("context", "question", "instruction"),
}
NULLABLE = {"chat.system"}


@dataclass(frozen=True)
class Style:
    """One style's pieces, checked; `raw`/`chat` are None when the template leaves that format out."""

    name: str
    instruction: str
    completion: str
    exemplars: int | None  # how many exemplars are shown (None: all)
    passage: str
    context: str
    raw: dict[str, str] | None
    chat: dict[str, str | None] | None


@dataclass(frozen=True)
class Template:
    spec: str  # as params names it (`builtin:<name>` or a path)
    path: Path
    data: dict  # the file as loaded: what a run's settings record of a template other than the default
    styles: dict[str, Style]

    def style(self, name: str, prompt_format: str) -> Style:
        style = self.styles.get(name)
        if style is None:
            raise InputError(f"{self.path}: no `{name}` section (the {name} prompt needs it; "
                             f"this template has: {', '.join(self.styles) or 'none'})")
        if {"raw": style.raw, "chat": style.chat}.get(prompt_format) is None:
            raise InputError(f"{self.path}: {name}: no `{prompt_format}` section, and model.prompt_format "
                             f"is {prompt_format}")
        return style

    # ---- rendering ------------------------------------------------------------------------------

    def render(self, prompt_format: str, exemplars: Sequence["Exemplar"], question: str,
               passages: Sequence["Hit"] = (), style: str = "cot", searched: bool = False) -> Prompt:
        """`searched`: a search was made, so the context block is written even when it found nothing
        (the DRAGIN reference's prompt after a search with an empty query); otherwise no passages, no block."""
        s = self.style(style, prompt_format)
        shots = list(exemplars if s.exemplars is None else exemplars[:s.exemplars])
        context = _context(s, passages, searched)
        if prompt_format == "chat":
            return _chat(s, shots, question, context)
        return _raw(s, shots, question, context)


def _fill(piece: str, **values: Any) -> str:
    return piece.format_map(values)


def _shot_values(s: Style, i: int, e: "Exemplar") -> dict:
    completion = _fill(s.completion, question=e.question, reasoning=e.reasoning, answer=e.answer)
    return {"i": i, "question": e.question, "reasoning": e.reasoning, "answer": e.answer,
            "completion": completion, "instruction": s.instruction}


def _context(s: Style, passages: Sequence["Hit"], searched: bool = False) -> str:
    if not passages and not searched:
        return ""
    lines = "".join(_fill(s.passage, i=i, id=p.id, title=p.title, text=p.text) for i, p in enumerate(passages, 1))
    return _fill(s.context, passages=lines)


def _raw(s: Style, shots: list, question: str, context: str) -> Prompt:
    shared = _fill(s.raw["header"], instruction=s.instruction) + "".join(
        _fill(s.raw["exemplar"], **_shot_values(s, i, e)) for i, e in enumerate(shots, 1))
    last = _fill(s.raw["question"], context=context, question=question, instruction=s.instruction)
    return Prompt(text=shared + last, shared=len(shared))


def _chat(s: Style, shots: list, question: str, context: str) -> Prompt:
    messages = []
    if s.chat["system"] is not None:
        messages.append({"role": "system", "content": _fill(s.chat["system"], instruction=s.instruction)})
    for i, e in enumerate(shots, 1):
        values = _shot_values(s, i, e)
        messages.append({"role": "user", "content": _fill(s.chat["user"], **values)})
        messages.append({"role": "assistant", "content": _fill(s.chat["assistant"], **values)})
    shared = len(messages)
    last = _fill(s.chat["question"], context=context, question=question, instruction=s.instruction)
    messages.append({"role": "user", "content": last})
    return Prompt.chat(messages, shared=shared)


# ---- loading --------------------------------------------------------------------------------------

def resolve_builtin(spec: str, directory: Path, suffix: str, what: str) -> Path:
    """`builtin:<name>` names a file shipped with the package (`directory/<name><suffix>`); anything else
    is a file path."""
    if spec.startswith(BUILTIN):
        path = directory / f"{spec[len(BUILTIN):]}{suffix}"
        if not path.is_file():
            known = ", ".join(sorted(BUILTIN + p.stem for p in directory.glob(f"*{suffix}")))
            raise InputError(f"no built-in {what} {spec!r}; available: {known}")
        return path
    return Path(spec)


def resolve_template(spec: str) -> Path:
    return resolve_builtin(spec, BUILTIN_DIR, ".yaml", "prompt template")


def load_template(spec: str | None = None) -> Template:
    """The template params name (None: the project's default), read and checked once per process."""
    path = resolve_template(spec or DEFAULT)
    stat = path.stat() if path.is_file() else None
    return _load(spec or DEFAULT, str(path), stat.st_mtime_ns if stat else None)


@lru_cache(maxsize=16)
def _load(spec: str, path: str, _mtime: int | None) -> Template:
    data = read_yaml(path, "prompt template")
    where = Path(path)
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping with `version: {VERSION}` and style sections "
                         f"({', '.join(STYLES)})")
    if data.get("version") != VERSION:
        raise InputError(f"{where}: version: expected {VERSION}, got {data.get('version')!r}")
    unknown = sorted(set(data) - {"version", *STYLES})
    if unknown:
        raise InputError(f"{where}: {unknown[0]}: unknown key (known keys here: version, {', '.join(STYLES)})")
    styles = {name: _style(where, name, data[name]) for name in STYLES if name in data}
    if not styles:
        raise InputError(f"{where}: defines no style; give at least `cot` (the prompt every method uses)")
    return Template(spec, where, data, styles)


def _style(where: Path, name: str, data: Any) -> Style:
    if not isinstance(data, dict):
        raise InputError(f"{where}: {name}: expected a mapping")
    known = ("instruction", "completion", "exemplars", "passage", "context", *FORMATS)
    _no_unknown(where, name, data, known)
    if not any(f in data for f in FORMATS):
        raise InputError(f"{where}: {name}: give at least one format section ({', '.join(FORMATS)})")
    pieces = {key: _piece(where, f"{name}.{key}", data.get(key, ""), PIECES[key])
              for key in ("instruction", "completion", "passage", "context")}
    formats = {}
    for fmt in FORMATS:
        if fmt not in data:
            formats[fmt] = None
            continue
        section = data[fmt]
        if not isinstance(section, dict):
            raise InputError(f"{where}: {name}.{fmt}: expected a mapping")
        keys = [k.split(".", 1)[1] for k in PIECES if k.startswith(fmt + ".")]
        _no_unknown(where, f"{name}.{fmt}", section, keys)
        missing = [k for k in keys if k not in section]
        if missing:
            raise InputError(f"{where}: {name}.{fmt}.{missing[0]}: missing (a {fmt} section needs "
                             f"{', '.join(keys)})")
        formats[fmt] = {k: _piece(where, f"{name}.{fmt}.{k}", section[k], PIECES[f"{fmt}.{k}"],
                                  nullable=f"{fmt}.{k}" in NULLABLE) for k in keys}
    return Style(name, exemplars=_count(where, f"{name}.exemplars", data.get("exemplars", "all")),
                 raw=formats["raw"], chat=formats["chat"], **pieces)


def _no_unknown(where: Path, path: str, data: dict, known: Sequence[str]) -> None:
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        raise InputError(f"{where}: {path}.{unknown[0]}: unknown key (known keys here: {', '.join(known)})")


def _count(where: Path, key: str, value: Any) -> int | None:
    if value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: {key}: expected `all` or an integer >= 0, got {value!r}")
    return value


def _piece(where: Path, key: str, value: Any, allowed: tuple[str, ...], nullable: bool = False) -> str | None:
    """A format string whose placeholders are all in `allowed`, plain (no attribute, index, conversion
    or format spec): a value is inserted as it is and can never reach into an object."""
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        null = " or null" if nullable else ""
        raise InputError(f"{where}: {key}: expected a string{null}, got {value!r}")
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(value)
                  if name is not None]
    except ValueError as exc:
        raise InputError(f"{where}: {key}: not a valid template string ({exc}; write a literal brace as "
                         f"{{{{ or }}}})") from None
    for name, spec, conversion in fields:
        if name not in allowed or spec or conversion:
            can = ", ".join(f"{{{a}}}" for a in allowed) or "none (write a literal brace as {{ or }})"
            written = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise InputError(f"{where}: {key}: placeholder {{{written}}} is not one this piece has; "
                             f"it may use: {can} (plain, with no conversion or format spec)")
    return value
