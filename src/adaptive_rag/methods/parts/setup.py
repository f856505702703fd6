"""The set-up a method configuration answers under, as a paper's table must hold it equal across rows.

A row answers in one or more roles: `none` (no retrieval), `single` (one search with the question, then
the answer) or `multi` (searches while generating). Per role: the prompt (style and the method's own
template, None: the dataset's), the answer's token budget (None: the dataset's), and for the roles that
search, the index (`retriever`, None: `retrieval.type`), the passages a search returns (`top_k`), and for
`multi` how many searches a question may make and how many passages it keeps. A value that a method's
own paper or reference code sets, whatever the table, is an `Own` with the reason: the comparison of a
table's rows (`row_setups.py`) leaves it out. A field a role lacks (a method that keeps no passages
across searches has no `max_passages`) is compared only among the rows that have it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = ("none", "single", "multi")


@dataclass(frozen=True)
class Own:
    """A set-up value the method's paper or reference code fixes (`why`), so rows may differ in it."""

    value: Any
    why: str

    def __str__(self) -> str:
        return f"{self.value} (own: {self.why})"


def basic_setup(method_type, settings: dict[str, Any], role: str | None = None) -> dict[str, dict[str, Any]]:
    """{role: fields} of a configuration read from its settings by the names every type shares."""
    role = role or method_type.role
    style = settings.get("prompt_style", "cot") if method_type.reads_answer_style else "cot"
    fields: dict[str, Any] = {"prompt": style, "template": settings.get("template"),
                              "answer_tokens": settings.get("max_new_tokens") if method_type.reads_answer_style
                              else None}
    if method_type.needs_retriever and role != "none":
        fields.update(retriever=settings.get("retriever"), top_k=settings.get("top_k"))
    if role == "multi":
        fields["max_retrievals"] = settings.get("max_retrievals")
        if settings.get("accumulate"):  # IRCoT keeps every step's passages, up to this many
            fields["max_passages"] = settings.get("max_passages")
    return {role: fields}
