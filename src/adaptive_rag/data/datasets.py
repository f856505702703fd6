"""Benchmark loaders: each official format -> a list of `Example`.

Malformed input raises `InputError` naming the file, the record index and the field; nothing is
skipped silently, because a silently shorter dataset changes every score computed from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from ..io import read_json


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    answers: list[str]  # gold answer first, then aliases
    answer_type: str  # "span" | "yes/no" ...
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> "Example":
        return cls(**record)


class _Record:
    """Field access on one raw record with errors that point at file, record and field."""

    def __init__(self, path: Path, index: int, record: Any):
        self.path, self.index = path, index
        if not isinstance(record, dict):
            raise self.error(None, f"expected an object, got {type(record).__name__}")
        self.record = record

    def error(self, name: str | None, message: str) -> InputError:
        where = f"record {self.index}" + (f", field '{name}'" if name else "")
        return InputError(f"{self.path}: {where}: {message}")

    def get(self, name: str, kind: type | tuple[type, ...], required: bool = True) -> Any:
        if name not in self.record:
            if required:
                raise self.error(name, "missing")
            return None
        value = self.record[name]
        if not isinstance(value, kind):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(name, f"expected {expected}, got {type(value).__name__}")
        if isinstance(value, str) and not value.strip() and name != "answer":
            raise self.error(name, "is empty")
        return value


def _records(path: Path) -> list:
    data = read_json(path, "dataset file")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    if not data:
        raise InputError(f"{path}: contains no records")
    return data


def _check_unique(path: Path, examples: list[Example]) -> list[Example]:
    seen: dict[str, int] = {}
    for index, example in enumerate(examples):
        if example.id in seen:
            raise InputError(f"{path}: record {index}: id {example.id!r} repeats record {seen[example.id]}")
        seen[example.id] = index
    return examples


def load_hotpotqa(path: str | Path) -> list[Example]:
    """Official HotpotQA json (`_id, question, answer, type, level, supporting_facts, context`)."""
    path = Path(path)
    examples = []
    for index, raw in enumerate(_records(path)):
        rec = _Record(path, index, raw)
        answer = rec.get("answer", str)
        if not answer.strip():
            raise rec.error("answer", "is empty")
        context = rec.get("context", list, required=False) or []
        for position, paragraph in enumerate(context):
            if not (isinstance(paragraph, list) and len(paragraph) == 2 and isinstance(paragraph[0], str)
                    and isinstance(paragraph[1], list)):
                raise rec.error("context", f"entry {position} is not a [title, [sentences]] pair")
        supporting = rec.get("supporting_facts", list, required=False) or []
        examples.append(Example(
            id=rec.get("_id", str),
            question=rec.get("question", str).strip(),
            answers=[answer.strip()],
            answer_type="yes/no" if answer.strip().lower() in ("yes", "no") else "span",
            metadata={
                "type": rec.get("type", str, required=False),
                "level": rec.get("level", str, required=False),
                "supporting_titles": sorted({fact[0] for fact in supporting if isinstance(fact, list) and fact}),
            },
        ))
    return _check_unique(path, examples)


LOADERS: dict[str, Callable[[str | Path], list[Example]]] = {"hotpotqa": load_hotpotqa}


def load_dataset(fmt: str, path: str | Path) -> list[Example]:
    if fmt not in LOADERS:
        raise InputError(f"no loader for dataset format {fmt!r}; available: {', '.join(LOADERS)}")
    return LOADERS[fmt](path)
