"""Benchmark loaders: each official format -> a list of `Example`.

Malformed input raises `InputError` whose message starts with the file, then names the record (or,
for JSON-lines files, the line) and the field; nothing is skipped silently, because a silently
shorter dataset changes every score computed from it. The one deliberate drop (IIRC questions whose
answer type is `none`, as the reference code does) is logged as a warning on `adaptive_rag.data`.

Standard library only: `config` imports `LOADERS` to validate `datasets.<name>.format`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import InputError
from ..io import iter_jsonl, read_text

log = logging.getLogger("adaptive_rag.data")


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    answers: list[str]  # gold answer first, then aliases
    answer_type: str  # "span" | "yes/no" | "value" (IIRC numeric/value answers)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> "Example":
        return cls(**record)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _kind_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


class _Record:
    """Field access on one raw record with errors that point at file, record (or line) and field.

    `unit` is what `index` counts ("record": position in the file's list; "line": 1-based line of a
    JSON-lines file). Nested objects are `_Record`s too (`child`, `children`), whose `prefix` is their
    path inside the record, so an error reads e.g. `record 3, field 'questions[1].answer.type'`.
    """

    def __init__(self, path: Path, index: int, record: Any, unit: str = "record", prefix: str = ""):
        self.path, self.index, self.unit, self.prefix = Path(path), index, unit, prefix
        if not isinstance(record, dict):
            raise self.error(None, f"expected an object, got {_type_name(record)}")
        self.record = record

    def field(self, name: str | None) -> str:
        if not name:
            return self.prefix
        return f"{self.prefix}.{name}" if self.prefix else name

    @property
    def where(self) -> str:
        return f"{self.unit} {self.index}" + (f", field '{self.prefix}'" if self.prefix else "")

    def error(self, name: str | None, message: str) -> InputError:
        name = self.field(name)
        where = f"{self.unit} {self.index}" + (f", field '{name}'" if name else "")
        return InputError(f"{self.path}: {where}: {message}")

    def get(self, name: str, kind: type | tuple[type, ...], required: bool = True,
            allow_empty: bool = False) -> Any:
        if name not in self.record:
            if required:
                raise self.error(name, "missing")
            return None
        value = self.record[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int subclass: `true` is never accepted where a number is expected
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.error(name, f"expected {_kind_names(kind)}, got {_type_name(value)}")
        if isinstance(value, str) and not value.strip() and not allow_empty:
            raise self.error(name, "is empty")
        return value

    def text(self, name: str, required: bool = True, allow_empty: bool = False) -> str | None:
        """A string field, stripped."""
        value = self.get(name, str, required, allow_empty)
        return None if value is None else value.strip()

    def strings(self, name: str, required: bool = True, scalar_ok: bool = False,
                nonempty: bool = True) -> list[str] | None:
        """A list of non-empty strings, stripped (`scalar_ok`: a lone string counts as a list of one)."""
        value = self.get(name, (list, str) if scalar_ok else list, required)
        if value is None:
            return None
        if isinstance(value, str):
            return [value.strip()]
        if nonempty and not value:
            raise self.error(name, "is an empty list")
        out = []
        for position, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{name}[{position}]", f"expected str, got {_type_name(item)}")
            if not item.strip():
                raise self.error(f"{name}[{position}]", "is empty")
            out.append(item.strip())
        return out

    def child(self, name: str, required: bool = True) -> "_Record | None":
        value = self.get(name, dict, required)
        return None if value is None else _Record(self.path, self.index, value, self.unit, self.field(name))

    def children(self, name: str, required: bool = True, nonempty: bool = False) -> list["_Record"]:
        """The objects of a list field, each as a `_Record` located at `name[i]`."""
        items = self.get(name, list, required) or []
        if nonempty and not items:
            raise self.error(name, "is an empty list")
        return [_Record(self.path, self.index, item, self.unit, f"{self.field(name)}[{position}]")
                for position, item in enumerate(items)]


def _load_json(path: Path) -> Any:
    """The parsed JSON of a dataset file; an empty file and invalid JSON are errors naming the file."""
    path = Path(path)
    text = read_text(path, "dataset file")
    if not text.strip():
        raise InputError(f"{path}: file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None


def _records(path: Path) -> list:
    data = _load_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of records, got {_type_name(data)}")
    if not data:
        raise InputError(f"{path}: contains no records")
    return data


def _document(path: Path, key: str) -> list:
    """The record list under `key` of a top-level JSON object (TriviaQA `Data`, SQuAD `data`)."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object with a '{key}' list, got {_type_name(data)}")
    if key not in data:
        raise InputError(f"{path}: top-level field '{key}' is missing")
    if not isinstance(data[key], list):
        raise InputError(f"{path}: top-level field '{key}': expected list, got {_type_name(data[key])}")
    if not data[key]:
        raise InputError(f"{path}: top-level field '{key}' contains no records")
    return data[key]


def _jsonl(path: Path, what: str = "dataset file") -> Iterator[tuple[int, Any]]:
    """(1-based line number, parsed object) for each non-blank line; a file without one is an error."""
    found = False
    for lineno, record in iter_jsonl(path, what):
        found = True
        yield lineno, record
    if not found:
        raise InputError(f"{path}: contains no records")


def _check_unique(path: Path, examples: list[Example], locations: list[str] | None = None) -> list[Example]:
    """Duplicate ids are an error; `locations` (default `record <i>`) says where each example came from."""
    seen: dict[str, int] = {}
    for index, example in enumerate(examples):
        if example.id in seen:
            where = locations or [f"record {i}" for i in range(len(examples))]
            raise InputError(f"{path}: {where[index]}: id {example.id!r} repeats {where[seen[example.id]]}")
        seen[example.id] = index
    return examples


def _finish(path: Path, examples: list[Example], locations: list[str] | None = None) -> list[Example]:
    if not examples:
        raise InputError(f"{path}: contains no questions")
    return _check_unique(path, examples, locations)


def _unique(values: list[str]) -> list[str]:
    """Order-preserving de-duplication (the first value stays the gold answer)."""
    return list(dict.fromkeys(values))


def _answer_type(answer: str) -> str:
    return "yes/no" if answer.strip().lower() in ("yes", "no") else "span"


def _check_context(rec: _Record, name: str = "context") -> None:
    """HotpotQA / 2Wiki context: a list of [title, [sentences]] pairs."""
    for position, paragraph in enumerate(rec.get(name, list, required=False) or []):
        if not (isinstance(paragraph, list) and len(paragraph) == 2 and isinstance(paragraph[0], str)
                and isinstance(paragraph[1], list)):
            raise rec.error(name, f"entry {position} is not a [title, [sentences]] pair")


def _supporting_titles(rec: _Record, name: str = "supporting_facts") -> list[str]:
    supporting = rec.get(name, list, required=False) or []
    return sorted({fact[0] for fact in supporting if isinstance(fact, list) and fact and isinstance(fact[0], str)})


# --- HotpotQA ------------------------------------------------------------------------------------

def load_hotpotqa(path: str | Path) -> list[Example]:
    """Official HotpotQA json (`_id, question, answer, type, level, supporting_facts, context`)."""
    path = Path(path)
    examples = []
    for index, raw in enumerate(_records(path)):
        rec = _Record(path, index, raw)
        answer = rec.text("answer")
        _check_context(rec)
        examples.append(Example(
            id=rec.get("_id", str),
            question=rec.text("question"),
            answers=[answer],
            answer_type=_answer_type(answer),
            metadata={
                "type": rec.get("type", str, required=False),
                "level": rec.get("level", str, required=False),
                "supporting_titles": _supporting_titles(rec),
            },
        ))
    return _check_unique(path, examples)


# --- 2WikiMultihopQA -----------------------------------------------------------------------------

ID_ALIASES = "id_aliases.json"


def load_2wiki_aliases(path: str | Path) -> dict[str, list[str]]:
    """Official `id_aliases.json` (JSON lines `{Q_id, aliases, demonyms}`) -> Q_id -> aliases + demonyms.

    Demonyms count as aliases, as in the official 2Wiki evaluation script. A Q_id listed twice with
    different content is an error.
    """
    path = Path(path)
    table: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    for lineno, raw in _jsonl(path, "2WikiMultihopQA alias file"):
        rec = _Record(path, lineno, raw, unit="line")
        qid = rec.text("Q_id")
        names = _unique((rec.strings("aliases", nonempty=False) or [])
                        + (rec.strings("demonyms", required=False, nonempty=False) or []))
        if qid in table and table[qid] != names:
            raise rec.error("Q_id", f"{qid!r} already listed with other aliases on line {first_line[qid]}")
        table.setdefault(qid, names)
        first_line.setdefault(qid, lineno)
    return table


def _2wiki_full(path: Path, index: int, raw: Any, aliases: dict[str, list[str]]) -> Example:
    rec = _Record(path, index, raw)
    example_id, question = rec.text("_id"), rec.text("question")
    answer = rec.text("answer")
    answer_id = rec.get("answer_id", (str, type(None)), required=False)
    _check_context(rec)
    evidences = rec.get("evidences", list, required=False)
    for position, triple in enumerate(evidences or []):
        if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
            raise rec.error("evidences", f"entry {position} is not a [subject, relation, object] triple")
    metadata: dict[str, Any] = {
        "type": rec.get("type", str, required=False),
        "supporting_titles": _supporting_titles(rec),
    }
    if evidences is not None:
        metadata["evidences"] = [list(triple) for triple in evidences]
    if answer_id is not None:
        metadata["answer_id"] = answer_id
    return Example(
        id=example_id,
        question=question,
        answers=_unique([answer, *aliases.get(answer_id or "", [])]),
        answer_type=_answer_type(answer),
        metadata=metadata,
    )


def _2wiki_reduced(path: Path, index: int, raw: Any) -> Example:
    rec = _Record(path, index, raw)
    test_id = rec.get("test_id", (int, str))
    answers = _unique(rec.strings("answer", scalar_ok=True))
    return Example(
        id=str(test_id).strip(),
        question=rec.text("question"),
        answers=answers,
        answer_type=_answer_type(answers[0]),
        metadata={},
    )


def load_2wikimultihopqa(path: str | Path) -> list[Example]:
    """2WikiMultihopQA, in either form (detected per file from the first record):

    * official dev.json (`_id, type, question, context, supporting_facts, evidences, answer`): answers =
      [answer] + the aliases and demonyms of the record's `answer_id` from an `id_aliases.json` beside
      the file, when both exist;
    * reduced question file (`test_id, question, answer`), `answer` a list of aliases (or one string).
    """
    path = Path(path)
    records = _records(path)
    first = _Record(path, 0, records[0])
    if "_id" in first.record:
        alias_file = path.parent / ID_ALIASES
        aliases = load_2wiki_aliases(alias_file) if alias_file.is_file() and alias_file != path else {}
        examples = [_2wiki_full(path, index, raw, aliases) for index, raw in enumerate(records)]
    elif "test_id" in first.record:
        examples = [_2wiki_reduced(path, index, raw) for index, raw in enumerate(records)]
    else:
        raise first.error(None, "has neither '_id' (official dev.json) nor 'test_id' (reduced question file)")
    return _finish(path, examples)


# --- IIRC ----------------------------------------------------------------------------------------

def _iirc_answer(answer: _Record) -> tuple[list[str], str]:
    kind = answer.text("type")
    if kind == "span":
        spans = [span.text("text") for span in answer.children("answer_spans", nonempty=True)]
        return _unique([", ".join(spans), *spans]), "span"  # joined, as the reference code; each span an alias
    if kind == "value":
        value = answer.text("answer_value")
        unit = answer.text("answer_unit", required=False, allow_empty=True)
        return _unique([value] + ([f"{value} {unit}"] if unit else [])), "value"
    if kind == "binary":
        name = "answer_binary" if "answer_binary" in answer.record else "answer_value"
        value = answer.get(name, (bool, str))
        if isinstance(value, bool):
            return ["yes" if value else "no"], "yes/no"
        if value.strip().lower() not in ("yes", "no"):
            raise answer.error(name, f"expected yes or no for a binary answer, got {value!r}")
        return [value.strip().lower()], "yes/no"
    raise answer.error("type", f"unknown answer type {kind!r} (expected span, value, binary or none)")


def load_iirc(path: str | Path) -> list[Example]:
    """IIRC dev.json: a list of articles `{title, text, links, questions: [{qid, question, answer, context}]}`.

    Questions whose answer type is `none` (unanswerable) are dropped, as the reference code does, with
    a warning on the `adaptive_rag.data` logger giving the file and the count.
    """
    path = Path(path)
    examples, locations = [], []
    total = dropped = 0
    for index, raw in enumerate(_records(path)):
        article = _Record(path, index, raw)
        title = article.text("title")
        for question in article.children("questions"):
            total += 1
            answer = question.child("answer")
            if answer.text("type") == "none":
                dropped += 1
                continue
            answers, answer_type = _iirc_answer(answer)
            examples.append(Example(
                id=question.text("qid"),
                question=question.text("question"),
                answers=answers,
                answer_type=answer_type,
                metadata={"title": title, "iirc_answer_type": answer.text("type")},
            ))
            locations.append(question.where)
    if dropped:
        log.warning("%s: dropped %d of %d IIRC questions whose answer type is 'none' (unanswerable), "
                    "as the reference code does", path, dropped, total)
    if not examples:
        raise InputError(f"{path}: contains no answerable questions ({total} questions, {dropped} of type 'none')")
    return _finish(path, examples, locations)


# --- StrategyQA ----------------------------------------------------------------------------------

def load_strategyqa(path: str | Path) -> list[Example]:
    """Official StrategyQA json (`qid, term, description, question, answer: bool, facts, decomposition`)."""
    path = Path(path)
    examples = []
    for index, raw in enumerate(_records(path)):
        rec = _Record(path, index, raw)
        answer = rec.get("answer", bool)
        examples.append(Example(
            id=rec.text("qid"),
            question=rec.text("question"),
            answers=["yes" if answer else "no"],
            answer_type="yes/no",
            metadata={
                "term": rec.text("term", required=False, allow_empty=True),
                "facts": rec.strings("facts", required=False, nonempty=False) or [],
                "decomposition": rec.strings("decomposition", required=False, nonempty=False) or [],
            },
        ))
    return _finish(path, examples)


# --- Natural Questions (open) --------------------------------------------------------------------

def load_nq(path: str | Path) -> list[Example]:
    """NQ-open jsonl (`{question, answer: [...]}` per line). No id in the file: id = `nq-<0-based line>`,
    the official file's line positions, which other implementations' ids follow too.

    Errors name the 1-based line. A blank line before the last record is an error: it would shift every
    later id (trailing blank lines are harmless).
    """
    path = Path(path)
    examples = []
    for lineno, raw in _jsonl(path):
        if lineno != len(examples) + 1:
            raise InputError(f"{path}: line {len(examples) + 1}: blank line; NQ-open ids are line positions "
                             "(nq-<line - 1>), so it would shift every later question's id: remove it")
        rec = _Record(path, lineno, raw, unit="line")
        answers = _unique(rec.strings("answer"))
        examples.append(Example(id=f"nq-{lineno - 1}", question=rec.text("question"), answers=answers,
                                answer_type=_answer_type(answers[0]), metadata={}))
    return _finish(path, examples)


# --- TriviaQA ------------------------------------------------------------------------------------

def load_triviaqa(path: str | Path) -> list[Example]:
    """TriviaQA unfiltered / rc json `{"Data": [{Question, QuestionId, Answer: {Value, Aliases, ...}}]}`.

    Records are counted in the `Data` list. answers = [Value] + Aliases, de-duplicated in order.
    """
    path = Path(path)
    examples = []
    for index, raw in enumerate(_document(path, "Data")):
        rec = _Record(path, index, raw)
        answer = rec.child("Answer")
        value = answer.text("Value")
        examples.append(Example(
            id=rec.text("QuestionId"),
            question=rec.text("Question"),
            answers=_unique([value, *(answer.strings("Aliases", required=False, nonempty=False) or [])]),
            answer_type=_answer_type(value),
            metadata={"triviaqa_answer_type": answer.get("Type", str, required=False, allow_empty=True)},
        ))
    return _finish(path, examples)


# --- SQuAD v1.1 ----------------------------------------------------------------------------------

def load_squad(path: str | Path) -> list[Example]:
    """SQuAD v1.1 json `{"data": [{title, paragraphs: [{context, qas: [{id, question, answers}]}]}]}`.

    Records are the articles of `data`; one Example per qa, answers = its unique answer texts in order.
    """
    path = Path(path)
    examples, locations = [], []
    for index, raw in enumerate(_document(path, "data")):
        article = _Record(path, index, raw)
        title = article.text("title")
        for paragraph in article.children("paragraphs"):
            paragraph.get("context", str)
            for qa in paragraph.children("qas"):
                if qa.record.get("is_impossible") is True:
                    raise qa.error("is_impossible", "SQuAD 2.0 unanswerable questions are not supported "
                                                    "(this loader reads SQuAD v1.1)")
                texts = []
                for answer in qa.children("answers", nonempty=True):
                    texts.append(answer.text("text"))
                    answer.get("answer_start", int, required=False)
                texts = _unique(texts)
                examples.append(Example(id=qa.text("id"), question=qa.text("question"), answers=texts,
                                        answer_type=_answer_type(texts[0]), metadata={"title": title}))
                locations.append(qa.where)
    return _finish(path, examples, locations)


LOADERS: dict[str, Callable[[str | Path], list[Example]]] = {
    "hotpotqa": load_hotpotqa,
    "2wikimultihopqa": load_2wikimultihopqa,
    "iirc": load_iirc,
    "strategyqa": load_strategyqa,
    "nq": load_nq,
    "triviaqa": load_triviaqa,
    "squad": load_squad,
}


def load_dataset(fmt: str, path: str | Path) -> list[Example]:
    if fmt not in LOADERS:
        raise InputError(f"no loader for dataset format {fmt!r}; available: {', '.join(LOADERS)}")
    return LOADERS[fmt](path)
