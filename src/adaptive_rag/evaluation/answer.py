"""Pull the final answer out of a chain-of-thought.

The prompt asks the model to end with "So the answer is X."; we take X: the text after the last
"the answer is" up to the end of its line, with trailing whitespace and one final period stripped, as
the reference evaluation does. It is never cut at an inner period, so "St. Louis", "U.S. Army" and
"3.5 million" survive whole, and a final period that ends an abbreviation ("Washington, D.C.",
"Jr.") stays. When the phrase is missing we score the whole output (normalisation then removes
articles and punctuation) and the trace records `answer_found: false`, so the rate of well-formed
outputs is visible instead of hidden.
"""

from __future__ import annotations

import re

_ANSWER_IS = re.compile(r"answer is\s*:?\s*", re.IGNORECASE)
# A final period that belongs to the answer: initials ("D.C.", "U.S.") or a common abbreviation.
_ABBREVIATION = re.compile(r"(?:\b[A-Za-z]\.){2,}$|\b(?:Jr|Sr|St|Dr|Mr|Mrs|Ms|Mt|Ft|Inc|Ltd|Co|Corp|Bros|Esq|Jan|Feb|"
                           r"Mar|Apr|Aug|Sept?|Oct|Nov|Dec|Vol|approx|etc)\.$")


def extract_answer(text: str) -> tuple[str, bool]:
    matches = list(_ANSWER_IS.finditer(text))
    if not matches:
        return text.strip(), False
    answer = text[matches[-1].end():].split("\n", 1)[0].strip()
    if answer.endswith(".") and not _ABBREVIATION.search(answer):
        answer = answer[:-1].rstrip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'":
        answer = answer[1:-1].strip()
    return answer, True


def direct_answer(text: str) -> tuple[str, bool]:
    """A direct-answer prompt's completion is the answer itself (no phrase to look for): stripped, with
    one final period removed as `extract_answer` removes it; found when anything is left."""
    answer = text.strip()
    if answer.endswith(".") and not _ABBREVIATION.search(answer):
        answer = answer[:-1].rstrip()
    return answer, bool(answer)


def predicted(output: str, direct: bool) -> tuple[str, bool]:
    """The answer a method's output gives: the whole completion of a direct-answer prompt, else the
    chain of thought's answer phrase."""
    return (direct_answer if direct else extract_answer)(output)


def has_answer(text: str) -> bool:
    """Whether an output already states its answer ("... the answer is X")."""
    answer, found = extract_answer(text)
    return found and bool(answer)
