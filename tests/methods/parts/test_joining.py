"""`joining: dragin-code`: the kept text and the call prefixes as the DRAGIN reference code's loops
put them together (src/generate.py `TokenRAG.inference` for FLARE, `AttnWeightRAG.inference` for
DRAGIN), computed by hand from those lines."""

from __future__ import annotations

import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.methods.fl_rag import FixedLengthRetrieval
from adaptive_rag.methods.flare import FLARE
from adaptive_rag.methods.parts import joining
from adaptive_rag.methods.parts.text import sentences

from conftest import RecordingRetriever, ScriptedLM, cont, method_with


def test_token_rag_keeps_the_space_of_an_empty_piece_and_attn_weight_rag_drops_it():
    # TokenRAG: case + " " + text + " " + ptext.strip(), the template holding the first space
    assert joining.regenerate_prefix("", "", skip_empty=False) == " "
    assert joining.regenerate_prefix(" A.", "B.\n", skip_empty=False) == " A. B."
    # AttnWeightRAG: " ".join of the non-empty [case, text, ptext.strip()]
    assert joining.regenerate_prefix("", "", skip_empty=True) == ""
    assert joining.regenerate_prefix(" A.", "B.\n", skip_empty=True) == "  A. B."
    assert joining.lookahead_prefix("", skip_empty=True) == ""
    assert joining.lookahead_prefix(" A.", skip_empty=True) == "  A."
    assert joining.lookahead_prefix(" A.", skip_empty=False) == " A."
    # text.strip() + " " + ptext.strip() + " " + new_text.strip()
    assert joining.kept_after_regeneration("", "", " C.\n", skip_empty=False) == "  C."
    assert joining.kept_after_regeneration("", "", " C.\n", skip_empty=True) == "C."
    assert joining.kept_after_lookahead(" A.", " B.\nC.\n") == "A. B.\nC."


def test_the_sentences_before_the_fired_one_are_joined_with_spaces():
    found = sentences(" Paris is big.\nRome is old. He died.")
    assert joining.text_before(found, 2) == "Paris is big. Rome is old."
    assert joining.text_before(found, 0) == ""
    assert joining.first_sentence(found) == "Paris is big."


class TokenizingLM(ScriptedLM):
    """A scripted model whose tokenizer counts whitespace-separated words (the loop's budget check)."""

    class tokenizer:  # noqa: N801 - the attribute the loop reads
        @staticmethod
        def encode(text):
            return text.split()


# FLARE (paper: a token with p < 0.8 fires) fires on the first sentence's " Paris"; the reference
# regenerates from "Answer: " + " " (nothing kept yet), keeps the first sentence with two spaces before
# it, and feeds that back; the next look-ahead is kept stripped, its inner newline left as it is.
LOOKAHEAD = cont([" Paris", " is", " big", ".", "\n", "He", " died", "."], [0.3] + [0.9] * 7)
REGENERATED = cont([" Rome", " is", " old", ".", "\n", "So", " the", " answer", " is", " Rome", "."])
ANSWERS = cont([" He", " died", ".", "\n", "So", " the", " answer", " is", " Rome", "."])
SCRIPT = {(False, ""): LOOKAHEAD, (True, " "): REGENERATED, (False, "  Rome is old."): ANSWERS}


def run_flare(max_new_tokens=50, script=SCRIPT):
    lm, retriever = TokenizingLM(script), RecordingRetriever()
    method = method_with(FLARE, {"joining": "dragin-code"}, lm, retriever, max_new_tokens)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Rome"], "span")])
    return answer, lm


def test_flare_with_dragin_code_joining_prompts_and_keeps_what_token_rag_does():
    answer, lm = run_flare()
    assert [(c["passages"], c["prefix"]) for c in lm.calls[:3]] == [(False, ""), (True, " "), (False, "  Rome is old.")]
    assert answer.output == "Rome is old. He died.\nSo the answer is Rome."
    assert answer.retrievals == 1


def test_dragin_code_joining_stops_once_the_text_has_more_tokens_than_the_budget():
    # after the regeneration the text "  Rome is old." has 3 words: over a budget of 2, so no third
    # look-ahead; the answer fallback completes the stripped output
    fallback = (False, " Rome is old. So the answer is")
    answer, lm = run_flare(max_new_tokens=2, script={**SCRIPT, fallback: cont([" Rome", "."])})
    assert [(c["passages"], c["prefix"]) for c in lm.calls] == [(False, ""), (True, " "), fallback]
    assert answer.output == "Rome is old. So the answer is Rome."


def test_joining_is_refused_outside_the_triggered_loop():
    with pytest.raises(ConfigError, match="joining: dragin-code joins the pieces of the triggered loop"):
        method_with(FixedLengthRetrieval, {"joining": "dragin-code"}, ScriptedLM({}))
