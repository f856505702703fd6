"""DRAGIN on the hand-built look-ahead " Paris is one city.": RIND scores by hand, detection under each
switch, the reference defaults, and one loop where it fires on the first sentence."""

from __future__ import annotations

import pytest

from adaptive_rag.lm.base import NO_EXTRAS, Extras
from adaptive_rag.methods.dragin import DRAGIN
from adaptive_rag.methods.parts.lookahead import LookAhead

from conftest import cont, pioc, run_method, settings_of


def dragin(**params) -> DRAGIN:
    return DRAGIN(settings_of(DRAGIN, {"theta": 0.5, **params}, "methods.dragin"), None)


@pytest.mark.parametrize("params, scores, flagged", [
    # paper: a = [.3,.2,.2,.1,0] * H [1,3,3,2,5] = [.3,.6,.6,.2,0]; stop words and "." zeroed
    ({}, [0.3, 0, 0, 0.2, 0], []),
    # the diagonal: a3 = .6 -> city 1.2 > .5
    ({"include_diagonal": True}, [0.3, 0, 0, 1.2, 0], [3]),
    # generated scope: a = [.75, 1/3, 1/3, 1/6, 0] -> Paris .75 > .5
    ({"attention_scope": "generated"}, [0.75, 0, 0, 1 / 3, 0], [0]),
    # normalised: a * 5 / .8 = [1.875, 1.25, 1.25, .625, 0] -> * H -> Paris 1.875, city 1.25
    ({"normalise": True}, [1.875, 0, 0, 1.25, 0], [0, 3]),
    # filter after: scores unfiltered; over .5: "is" and "one" (.6); only "one" (NUM) is a real word
    ({"filter_order": "after"}, [0.3, 0.6, 0.6, 0.2, 0], [2]),
    # dragin-code: generated + diagonal a = [1, 1/3, 1/3, .75, 1/6] (sum 31/12), normalised *60/31
    # -> [60, 20, 20, 45, 10]/31 * H = [60, 60, 60, 90, 50]/31, all over .5; real words: Paris, one, city
    ({"reference": "dragin-code"}, [60 / 31, 60 / 31, 60 / 31, 90 / 31, 50 / 31], [0, 2, 3]),
])
def test_dragin_detect_under_each_switch(params, scores, flagged):
    la = LookAhead(pioc())
    d = dragin(**params).detect(None, la, la.sentences[0])
    assert [u.text for u in d.units] == ["Paris", "is", "one", "city", "."]
    assert d.scores == pytest.approx(scores, abs=1e-6)
    assert d.flagged == flagged
    assert d.fire is bool(flagged)


def test_dragin_reference_defaults():
    assert {k: v for k, v in dragin(reference="dragin-code").settings.items()
            if k in ("attention_scope", "include_diagonal", "normalise", "filter_order", "keep")} == {
        "attention_scope": "generated", "include_diagonal": True, "normalise": True, "filter_order": "after",
        "keep": "first-sentence"}
    assert dragin().settings["keep"] == "all"
    with pytest.raises(Exception, match="true or false"):
        dragin(normalise="yes")


def test_dragin_loop_fires_on_the_first_sentence_and_regenerates_from_nothing():
    # include_diagonal: "city" fires (1.2 > .5, see the switch table); QFS with the attention of " city"
    # (row 3): prompt columns [.2 (" Which river?"), 0]; generated " Paris is " -> Paris .1
    # top 2: river .2, Paris .1 -> "river Paris"
    lookahead = pioc(meta={"prompt_tokens": [" Which river?", "\nAnswer:"]})
    regen = cont([" The", " Seine", ".", " So", " the", " answer", " is", " Seine", "."], finish="stop")
    script = {(False, ""): lookahead, (True, ""): regen}
    answer, lm, retriever = run_method(DRAGIN, {"include_diagonal": True, "theta": 0.5, "top_n": 2}, script,
                                       question="Which river?")
    assert retriever.queries == [("river Paris", 3)]
    assert [(c["passages"], c["prefix"], c["max_new_tokens"]) for c in lm.calls] == [(False, "", 50),
                                                                                     (True, "", 50)]
    assert lm.calls[0]["extras"] == Extras(entropy=True, attention_layer=-1)
    assert lm.calls[1]["extras"] == NO_EXTRAS
    assert answer.output == "The Seine. So the answer is Seine."
    assert answer.counters() == {"retrievals": 1, "llm_calls": 2, "detections": 1, "generated_tokens": 14,
                                 "sentences": 3}
    assert answer.steps[0]["kept"] == 1 and answer.steps[0]["query"] == "river Paris"
