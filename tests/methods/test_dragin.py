"""DRAGIN on the hand-built look-ahead " Paris is one city.": RIND scores by hand, detection under each
switch, the reference defaults, and one loop where it fires on the first sentence."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_rag.lm.base import NO_EXTRAS, Extras
from adaptive_rag.methods.dragin import DRAGIN
from adaptive_rag.methods.parts.attention import reencoded_received
from adaptive_rag.methods.parts.lookahead import LookAhead

from conftest import PIOC, PIOC_ENTROPIES, cont, pioc, run_method, settings_of


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
    # dragin-code's switches with the generation pass per token (this project's earlier stand-in):
    # generated + diagonal a = [1, 1/3, 1/3, .75, 1/6] (sum 31/12), normalised *60/31
    # -> [60, 20, 20, 45, 10]/31 * H = [60, 60, 60, 90, 50]/31, all over .5; real words: Paris, one, city
    ({"reference": "dragin-code", "attention_pass": "generation", "rind_units": "token"},
     [60 / 31, 60 / 31, 60 / 31, 90 / 31, 50 / 31], [0, 2, 3]),
])
def test_dragin_detect_under_each_switch(params, scores, flagged):
    la = LookAhead(pioc())
    d = dragin(**params).detect(None, la, la.sentences[0])
    assert [u.text for u in d.units] == ["Paris", "is", "one", "city", "."]
    assert d.scores == pytest.approx(scores, abs=1e-6)
    assert d.flagged == flagged
    assert d.fire is bool(flagged)


SWITCHES = ("attention_scope", "include_diagonal", "normalise", "filter_order", "keep", "rind_units",
            "attention_pass", "query_punctuation", "query_duplicates")


def test_dragin_reference_defaults():
    assert {k: dragin(reference="dragin-code").settings[k] for k in SWITCHES} == {
        "attention_scope": "generated", "include_diagonal": True, "normalise": True, "filter_order": "after",
        "keep": "first-sentence", "rind_units": "word", "attention_pass": "reencoded", "query_punctuation": "keep",
        "query_duplicates": "keep"}
    assert {k: dragin().settings[k] for k in SWITCHES} == {
        "attention_scope": "full", "include_diagonal": False, "normalise": False, "filter_order": "before",
        "keep": "all", "rind_units": "token", "attention_pass": "generation", "query_punctuation": "strip",
        "query_duplicates": "drop"}
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


# ---- the reference code's scoring: words, each head's maximum then the head mean, a re-encoded pass ----

# Two heads over the five tokens of " Paris is one city.", fed alone: [0] each head's largest attention
# from a later token, [1] each token's attention to itself.
LATER = [[0.4, 0.1, 0.2, 0.1, 0.0], [0.2, 0.3, 0.0, 0.3, 0.0]]
OWN = [[1.0, 0.5, 0.3, 0.2, 0.6], [1.0, 0.4, 0.5, 0.2, 0.2]]


class ReencodingLM:
    """Answers `received_attention` with LATER/OWN and records the token ids it was asked about."""

    def __init__(self):
        self.asked = []

    def received_attention(self, token_ids, layer=-1):
        self.asked.append((list(token_ids), layer))
        return np.array([LATER, OWN], dtype=np.float32)


def reencoding_dragin(**params):
    from adaptive_rag.methods.base import Context

    lm = ReencodingLM()
    ctx = Context(lm=lm, exemplars=[], prompt_format="raw", max_new_tokens=50)
    return DRAGIN(settings_of(DRAGIN, {"theta": 0.5, **params}, "methods.dragin"), ctx), lm


def reencodable():
    return LookAhead(cont(PIOC, [0.8, 0.6, 0.5, 0.4, 0.9], token_ids=[10, 11, 12, 13, 14], prompt_tokens=2,
                          entropies=list(PIOC_ENTROPIES), attentions=pioc().attentions))


def test_reencoded_attention_takes_each_heads_maximum_then_the_mean_over_heads():
    planes = np.array([LATER, OWN])
    # without the diagonal: mean of the heads' later maxima
    assert reencoded_received(planes).tolist() == pytest.approx([0.3, 0.2, 0.1, 0.2, 0.0])
    # with it: per head max(later, own) = [1, .5, .3, .2, .6] and [1, .4, .5, .3, .2]
    assert reencoded_received(planes, diagonal=True).tolist() == pytest.approx([1.0, 0.45, 0.4, 0.25, 0.4])


def test_reencoded_pass_per_token():
    # a = [.3, .2, .1, .2, 0] * H [1, 3, 3, 2, 5] = [.3, .6, .3, .4, 0]; stop words and "." zeroed
    d, lm = reencoding_dragin(attention_pass="reencoded", theta=0.35)
    la = reencodable()
    detection = d.detect(None, la, la.sentences[0])
    assert detection.scores == pytest.approx([0.3, 0, 0, 0.4, 0]) and detection.flagged == [3]
    assert lm.asked == [([10, 11, 12, 13, 14], -1)]


def test_word_units_merge_tokens_on_whitespace_and_sum_attention_average_entropy():
    # words Paris | is | one | city. ("." joins "city"); generation-pass a (no diagonal) = [.3, .2, .2, .1, 0]
    # -> Paris .3, is .2, one .2, city. .1 + 0; H Paris 1, is 3, one 3, city. (2 + 5) / 2 = 3.5
    # -> [.3, .6, .6, .35]; stop words ("is", "one") zeroed -> [.3, 0, 0, .35]
    d, lm = reencoding_dragin(rind_units="word", theta=0.32)
    la = reencodable()
    detection = d.detect(None, la, la.sentences[0])
    assert [u.text for u in detection.units] == ["Paris", "is", "one", "city."]
    assert [u.tokens for u in detection.units] == [(0,), (1,), (2,), (3, 4)]
    assert detection.scores == pytest.approx([0.3, 0, 0, 0.35]) and detection.flagged == [3]
    assert lm.asked == []  # the generation pass: no second pass


def test_reference_code_scoring_all_switches():
    # re-encoded with the diagonal: per token [1, .45, .4, .25, .4] -> words Paris 1, is .45, one .4,
    # city. .65 (sum 2.5); normalised * 4 / 2.5 -> [1.6, .72, .64, 1.04]; * H [1, 3, 3, 3.5]
    # -> [1.6, 2.16, 1.92, 3.64]; over theta 2: "is" and "city."; real words after: only "city."
    d, lm = reencoding_dragin(reference="dragin-code", theta=2.0)
    la = reencodable()
    detection = d.detect(None, la, la.sentences[0])
    assert detection.scores == pytest.approx([1.6, 2.16, 1.92, 3.64])
    assert detection.flagged == [3] and detection.first_flagged_token() == 3
    d.detect(None, la, la.sentences[0])
    assert len(lm.asked) == 1  # one re-encoded pass per look-ahead, however many sentences are judged
