"""Leave-one-out contributions of a sentence's words, through a fake encoder whose similarities we set."""

from __future__ import annotations

import pytest

from adaptive_rag.methods.parts.contribution import contributions, without

from conftest import ROPE_QUESTION as QUESTION
from conftest import FakeSimilarity
from conftest import rope_lookahead as lookahead


def test_contributions_leave_one_out_in_one_call():
    la = lookahead([0.9] * 6)
    sentence = la.sentences[0]
    units = la.word_units(sentence)
    fake = FakeSimilarity()
    r = contributions(fake, QUESTION, sentence.text, sentence.start, units)
    assert r == pytest.approx([0.5, 0.1, 0.01, 0.2, 0.15])
    assert max(range(5), key=lambda k: r[k]) == 0  # the dropped content word "Idris" contributes most
    assert len(fake.calls) == 1 and len(fake.calls[0][1]) == 5  # every variant in one encoder call
    assert fake.calls[0][0] == f"{QUESTION} Idris founded the rope walk."
    assert fake.calls[0][1][2] == f"{QUESTION} Idris founded rope walk."
    assert without("Idris founded the rope walk.", 0, units[4]) == "Idris founded the rope ."
