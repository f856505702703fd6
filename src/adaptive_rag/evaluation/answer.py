"""Pull the final answer out of a chain-of-thought.

The prompt asks the model to end with "So the answer is X."; we take X: the text after the last
"the answer is" up to the end of its line, with trailing whitespace and one final period stripped, as
the reference evaluation does. It is never cut at an inner period, so "St. Louis", "U.S. Army" and
"3.5 million" survive whole, and a final period that ends an abbreviation ("Washington, D.C.",
"Jr.") stays. When the phrase is missing we score the whole output (normalisation then removes
articles and punctuation) and the trace records `answer_found: false`, so the rate of well-formed
outputs is visible instead of hidden.

`answer_extraction: dragin-code` (a method setting, `methods/parts/rules.py`) reads answers as the
DRAGIN reference code's evaluation does (github oneal2000/DRAGIN, src/eval.py `regenerate_answer` and
src/data.py `HotpotQA.get_real_prediction`): the output is cut at the first "Question:", "#10000000"
or "Note:", and the answer is everything after the *first* "the answer is" (exact case) and the one
character that follows it, with a trailing end-of-sequence text and then one final period removed;
no phrase, no answer (an empty string).
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


# src/eval.py `regenerate_answer`: the words an output is cut at (the first of them only past its start)
DRAGIN_CODE_SPLIT_WORDS = ("Question:", "#10000000", "Note:")
DRAGIN_CODE_PHRASE = "the answer is"
# src/data.py `HotpotQA.get_real_prediction` strips its models' end texts ("</s>", "<|endoftext|>");
# SmolLM2's "<|im_end|>" is added here and in the reference's patch (benchmarks/dragin_reference.py).
DRAGIN_CODE_END_TEXTS = ("</s>", "<|endoftext|>", "<|im_end|>")
EXTRACTIONS = ("project", "dragin-code")


def dragin_code_cut(text: str, at_start: bool = False) -> str:
    """The text cut at each split word in turn (`regenerate_answer`: before the fallback only an
    occurrence past position 0 cuts, `at_start=False`; after it, any occurrence, `at_start=True`)."""
    for word in DRAGIN_CODE_SPLIT_WORDS:
        position = text.find(word)
        if position > 0 or (at_start and position == 0):
            text = text[:position]
    return text


def dragin_code_answer(text: str) -> tuple[str, bool]:
    """`get_real_prediction` of HotpotQA: what follows the first "the answer is" and one more character
    (the space), an end text and then one final period stripped; ("", False) without the phrase."""
    position = text.find(DRAGIN_CODE_PHRASE)
    if position < 0:
        return "", False
    answer = text[position + len(DRAGIN_CODE_PHRASE) + 1:]
    for end in DRAGIN_CODE_END_TEXTS:
        if answer.endswith(end):
            answer = answer[:-len(end)]
    if answer.endswith("."):
        answer = answer[:-1]
    return answer, True


def predicted(output: str, direct: bool, extraction: str = "project") -> tuple[str, bool]:
    """The answer a method's output gives: the whole completion of a direct-answer prompt, else the
    chain of thought's answer phrase, read the project's way or the DRAGIN reference code's."""
    if direct:
        return direct_answer(output)
    return (dragin_code_answer if extraction == "dragin-code" else extract_answer)(output)


def has_answer(text: str) -> bool:
    """Whether an output already states its answer ("... the answer is X")."""
    answer, found = extract_answer(text)
    return found and bool(answer)
