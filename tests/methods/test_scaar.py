"""SCAAR on constructed cases: SCW thresholds and the trigger (fake encoder whose similarities we set),
its word probabilities, PFQ for several alphas, and its settings."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.lm.base import Continuation
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.scaar import SCAAR

from conftest import ROPE_QUESTION as QUESTION
from conftest import FakeSimilarity, settings_of
from conftest import rope_lookahead as lookahead


def scaar(**params) -> SCAAR:
    method = SCAAR(settings_of(SCAAR, {"theta": 0.3, **params}, "methods.scaar"), context=None)
    method._similarity = FakeSimilarity()
    return method


class State:
    class example:
        question = QUESTION

    text = ""


def test_scw_trigger_on_hand_set_probabilities():
    # thresholds = exp(r') * 0.3 with r' = 5 r / .96:
    #   Idris exp(2.604) * .3 = 4.056 | founded exp(.5208) * .3 = .505 | the exp(.0521) * .3 = .316
    #   rope exp(1.0417) * .3 = .850  | walk exp(.78125) * .3 = .655
    method = scaar()
    thresholds = [math.exp(5 * x / 0.96) * 0.3 for x in (0.5, 0.1, 0.01, 0.2, 0.15)]
    # every word above its threshold except "Idris" (always below: its threshold exceeds 1)
    la = lookahead([0.99, 0.6, 0.4, 0.9, 0.7, 0.99])
    detection = method.detect(State, la, la.sentences[0])
    assert detection.thresholds == pytest.approx(thresholds)
    assert detection.flagged == [0] and detection.fire
    # a low-contribution word with a low probability: "the" at .31 < .316 fires too; "rope" at .86 does not
    la = lookahead([0.99, 0.6, 0.31, 0.86, 0.7, 0.99])
    assert method.detect(State, la, la.sentences[0]).flagged == [0, 2]
    # ORIGIN weighting on the same numbers: one threshold, theta itself
    origin = scaar(weighting="origin")
    detection = origin.detect(State, la, la.sentences[0])
    assert detection.thresholds == [0.3] * 5 and not detection.fire


def test_scaar_word_probability_is_the_length_normalised_product():
    method = scaar()
    tokens = ["Inch", "combe", " founded", " it", "."]
    probs = [0.25, 1.0, 0.9, 0.9, 0.9]
    la = LookAhead(Continuation(text="".join(tokens), tokens=tokens, logprobs=[math.log(p) for p in probs],
                                finish_reason="stop"))
    method._similarity = type("Flat", (), {"similarities": lambda self, a, v: [0.9] * len(v)})()
    detection = method.detect(State, la, la.sentences[0])
    assert [u.text for u in detection.units] == ["Inchcombe", "founded", "it"]
    assert detection.scores == pytest.approx([0.5, 0.9, 0.9])  # sqrt(.25 * 1.0) = .5


@pytest.mark.parametrize("alpha, query", [
    (0.2, f"{QUESTION} Idris"),  # ceil(.2 * 5) = 1 word: Idris
    (0.5, f"{QUESTION} walk"),  # ceil(2.5) = 3: Idris, rope, walk; Idris and rope are flagged
    (1.0, f"{QUESTION} founded the walk"),  # all five, minus the flagged
])
def test_pfq_keeps_the_top_alpha_words_minus_hallucinated_in_order(alpha, query):
    method = scaar(alpha=alpha)
    la = lookahead([0.2, 0.99, 0.99, 0.2, 0.99, 0.99])
    sentence = la.sentences[0]
    detection = method.detect(State, la, sentence)
    if alpha == 0.2:
        detection.flagged = [3]  # keep "Idris" unflagged for this case: only "rope" hallucinated
    else:
        assert detection.flagged == [0, 3]
    assert method.build_query(State, la, sentence, detection) == query


def test_scaar_settings_validate():
    with pytest.raises(Exception, match="alpha: must be between 0 and 1"):
        scaar(alpha=1.5)
    assert SCAAR.needs_for(scaar().settings) == set()  # black-box: token log-probs only
    assert SCAAR.needs_for(scaar(weighting="attn").settings) == {"attentions"}
