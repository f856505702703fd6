"""Pull the final answer out of a chain-of-thought.

The prompt asks the model to end with "So the answer is X."; we take X, up to the end of that
sentence, trailing period stripped, as the reference evaluation does. When the phrase is missing we
score the whole output (normalisation then removes articles and punctuation) and the trace records
`answer_found: false`, so the rate of well-formed outputs is visible instead of hidden.
"""

from __future__ import annotations

import re

_ANSWER_IS = re.compile(r"answer is\s*:?\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(\s|$)|\n")


def extract_answer(text: str) -> tuple[str, bool]:
    matches = list(_ANSWER_IS.finditer(text))
    if not matches:
        return text.strip(), False
    tail = text[matches[-1].end():]
    end = _SENTENCE_END.search(tail)
    answer = (tail[: end.start()] if end else tail).strip().rstrip(".").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'":
        answer = answer[1:-1].strip()
    return answer, True


def has_answer(text: str) -> bool:
    """Whether an output already states its answer ("... the answer is X")."""
    answer, found = extract_answer(text)
    return found and bool(answer)
