"""The grid of prompt inputs whose renderings `tests/fixtures/prompts/default.json` holds.

The fixture was written by the prompt functions as they were before prompts became templates
(`python tests/prompt_grid.py tests/fixtures/prompts/default.json` at commit e906238), so the
built-in default template is checked against what every cached model call was keyed on, not
against itself. Each case is rendered to `Prompt.key()`: the exact string the call cache hashes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

QUESTIONS = [
    "Where was the person who established the Hockin Glassworks born?",
    'Which {film} has "quotes", a brace {0} and a trailing space? ',
]
PASSAGE_SETS = {
    "none": [],
    "three": [("296", "Hockin Glassworks", "The Hockin Glassworks was founded by Aldous Hockin in 1720."),
              ("100", "Aldous {Hockin}", "Aldous Hockin (born in Velmora) was a glassmaker.\nA second line."),
              ("7", "Émile", "Naïve café – unicode text {i} {title}.")],
}
EXEMPLAR_SETS = {"demo-8": (str(REPO / "data/demo/exemplars.json"), 8),
                 "hotpotqa-2": ("builtin:hotpotqa", 2),
                 "none": ("builtin:hotpotqa", 0)}
PREFIXES = ["", " The Hockin Glassworks was"]


def cases():
    """(name, format, style, exemplar spec, count, question, passages, prefix) for every case."""
    for ex_name, (spec, count) in EXEMPLAR_SETS.items():
        for fmt in ("raw", "chat"):
            for style in ("cot", "qa-oneshot"):
                for qi, question in enumerate(QUESTIONS):
                    for p_name, passages in PASSAGE_SETS.items():
                        for prefix in PREFIXES:
                            name = f"{ex_name}/{fmt}/{style}/q{qi}/{p_name}/{'prefix' if prefix else 'bare'}"
                            yield name, fmt, style, spec, count, question, passages, prefix


def render_current(fmt, style, spec, count, question, passages, prefix) -> str:
    """The rendering through the public functions every caller uses (`build_prompt`, `build_qa_prompt`)."""
    from adaptive_rag.prompts.fewshot import build_prompt, build_qa_prompt, load_exemplars
    from adaptive_rag.retrieval import Hit

    exemplars = load_exemplars(spec, count)
    hits = [Hit(i, t, x, 1.0) for i, t, x in passages]
    build = build_qa_prompt if style == "qa-oneshot" else build_prompt
    return build(fmt, exemplars, question, hits).with_prefix(prefix).key()


def main(out: str) -> None:
    rendered = {name: render_current(*rest) for name, *rest in cases()}
    Path(out).write_text(json.dumps(rendered, ensure_ascii=False, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(rendered)} prompts -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
