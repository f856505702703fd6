"""`joining: dragin-code`: the text the dynamic loop keeps and the prefixes of its calls, put together
as the DRAGIN reference code's `inference` loops put them together (github oneal2000/DRAGIN,
src/generate.py), instead of this project's exact generated text.

The reference strips every piece it keeps and joins the pieces with single spaces, so the newlines a
model wrote between kept pieces become spaces, and the text before the fired sentence (`ptext`) is
its sentences joined with spaces. Its two loops differ in how empty pieces are joined:
- `TokenRAG.inference` (FLARE, `skip_empty=False`): the prompt is `case + " " + text`, the
  regeneration's `case + " " + text + " " + ptext.strip()`, the kept text
  `text.strip() + " " + ptext.strip() + " " + new_text.strip()`: an empty piece still brings its
  space (a regeneration at the first sentence is prompted with two spaces after "Answer:");
- `AttnWeightRAG.inference` (DRAGIN, `skip_empty=True`): the same pieces joined by
  `" ".join(s for s in ... if len(s) > 0)`; the text after a step without retrieval is
  `text.strip() + " " + new_text.strip()` in both.
The prefixes are what follows the method's template, which ends as the reference's first prompt
does: FLARE's "Answer: " (`case + " "`), DRAGIN's "Answer:" (`case`).
"""

from __future__ import annotations

JOINING = ("exact", "dragin-code")


def lookahead_prefix(text: str, skip_empty: bool) -> str:
    """The look-ahead call's prefix after the template: `case + " " + text` (the template holds the
    space) or `" ".join` of the non-empty `[case, text]`."""
    if not skip_empty:
        return text
    return " " + text if text else ""


def regenerate_prefix(text: str, ptext: str, skip_empty: bool) -> str:
    """The regeneration call's prefix after the template: `case + " " + text + " " + ptext.strip()`
    or `" ".join` of the non-empty `[case, text, ptext.strip()]`."""
    if not skip_empty:
        return text + " " + ptext.strip()
    return "".join(" " + s for s in (text, ptext.strip()) if s)


def kept_after_lookahead(text: str, new_text: str) -> str:
    """The text after a look-ahead that fired nothing: `text.strip() + " " + new_text.strip()`."""
    return text.strip() + " " + new_text.strip()


def kept_after_regeneration(text: str, ptext: str, new_text: str, skip_empty: bool) -> str:
    """The text after a regeneration: the kept text, the sentences before the fired one and the
    regenerated text, each stripped, joined with spaces (the empty ones left out with `skip_empty`)."""
    parts = [text.strip(), ptext.strip(), new_text.strip()]
    return " ".join(p for p in parts if p) if skip_empty else " ".join(parts)


def text_before(sentences, index: int) -> str:
    """`ptext`: the look-ahead's sentences before the fired one, stripped, the empty ones left out,
    joined with spaces (`" ".join(sentences[:sid])` over spaCy's non-empty stripped sentences)."""
    return " ".join(t for t in (s.text.strip() for s in sentences[:index]) if t)


def first_sentence(sentences) -> str:
    """`get_top_sentence`: the first non-empty sentence, stripped ("" when there is none)."""
    return next((t for t in (s.text.strip() for s in sentences) if t), "")
