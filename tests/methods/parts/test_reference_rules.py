"""The settings that make wo-RAG, SR-RAG, FLARE and DRAGIN decide as the DRAGIN reference code does
(github oneal2000/DRAGIN): answer extraction (src/eval.py `regenerate_answer`, src/data.py
`HotpotQA.get_real_prediction`), going on after the end-of-turn token (src/generate.py
`TokenRAG.inference`, `AttnWeightRAG.inference`), DRAGIN's whole-sentence query
(`AttnWeightRAG.keep_real_words`), query truncation in tokens (src/retriever.py `BM25.retrieve`),
FLARE's token range and masking (`TokenRAG.modifier`) and a template per method. Expected values are
worked out by hand from those functions' rules, in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.evaluation.answer import dragin_code_answer, dragin_code_cut, predicted
from adaptive_rag.methods.base import last_tokens
from adaptive_rag.methods.dragin import DRAGIN
from adaptive_rag.methods.flare import FLARE, reference_masked, reference_token_ranges
from adaptive_rag.methods.parts.attention import real_words_query
from adaptive_rag.methods.parts.lookahead import LookAhead
from adaptive_rag.methods.parts.rules import Rules
from adaptive_rag.methods.wo_rag import WithoutRetrieval
from adaptive_rag.settings import Section

from conftest import ANSWER, RecordingRetriever, ScriptedLM, cont, method_with, run_method, settings_of


# ---- answer extraction ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, answer", [
    # the FIRST phrase, everything after it and its following space, one final period stripped
    ("Born in 1722. So the answer is St. Louis. So the answer is X.", ("St. Louis. So the answer is X", True)),
    ("So the answer is Paris.<|im_end|>", ("Paris", True)),  # an end text, then the period
    ("So the answer is Paris.\nQuestion", ("Paris.\nQuestion", True)),  # not cut at the line's end
    ("The answer is Paris.", ("", False)),  # exact case only: no phrase, no answer
    ("so the answer is", ("", True)),
])
def test_dragin_code_answer_follows_get_real_prediction(text, answer):
    assert dragin_code_answer(text) == answer
    assert predicted(text, False, "dragin-code") == answer


def test_dragin_code_cut_follows_regenerate_answer():
    assert dragin_code_cut("Paris is big.\nQuestion: Who? Note: x") == "Paris is big.\n"
    assert dragin_code_cut("Question: Who?") == "Question: Who?"  # before the fallback: not at position 0
    assert dragin_code_cut("Question: Who?", at_start=True) == ""
    assert predicted("So the answer is Paris.", False) == ("Paris", True)  # the project's reading stays the default


def test_the_dragin_code_fallback_appends_the_phrase_with_its_space_and_no_stop():
    first = cont([" Paris", " is", " big", ".", "\n", "Question", ":", " Who"])
    # cut at "Question:" -> "Paris is big.\n"; the fallback prompt continues " " + that + " So the answer is "
    prefix = " Paris is big.\n So the answer is "
    lm = ScriptedLM({(False, ""): first, (False, prefix): cont([" Paris", ".", "\n", "Question", ":"])})
    method = method_with(WithoutRetrieval, {"answer_extraction": "dragin-code"}, lm)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert [c["stop"] for c in lm.calls][1] == ()  # the reference's fallback has no stop string
    assert lm.calls[1]["max_new_tokens"] == 5  # answer_fallback_tokens
    # cot + the continuation stripped, cut at "Question:" again (any position)
    assert answer.output == "Paris is big.\n So the answer is Paris.\n"
    assert (answer.extraction, predicted(answer.output, False, answer.extraction)) == ("dragin-code", ("Paris.\n", True))


def test_the_dragin_code_fallback_leaves_an_output_with_the_phrase_alone():
    lm = ScriptedLM({(False, ""): ANSWER})
    method = method_with(WithoutRetrieval, {"answer_extraction": "dragin-code"}, lm)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert (answer.output, len(lm.calls)) == ("So the answer is Paris.", 1)


# ---- the end-of-turn token ------------------------------------------------------------------------

class EndOfTurnLM(ScriptedLM):
    end_of_turn_text = "<|im_end|>"


def test_end_of_turn_continue_goes_on_after_the_models_end_token():
    ends = cont([" Paris", " is", " big", "."], finish="eos")  # confident: FLARE (paper, .8) does not fire
    script = {(False, ""): ends, (False, " Paris is big.<|im_end|>"): ANSWER}
    lm = EndOfTurnLM(script)
    [answer] = method_with(FLARE, {"end_of_turn": "continue"}, lm).answer_batch(
        [Example("q1", "Where?", ["Paris"], "span")])
    assert [c["prefix"] for c in lm.calls] == ["", " Paris is big.<|im_end|>"]
    assert answer.output == "Paris is big.<|im_end|> So the answer is Paris."
    # `keep` ends the question there: the next call is the answer fallback
    lm = EndOfTurnLM({**script, (False, " Paris is big.<|im_end|> So the answer is"): cont([" Paris", "."])})
    [kept] = method_with(FLARE, {"end_of_turn": "keep"}, lm).answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert [c["prefix"] for c in lm.calls] == ["", " Paris is big.<|im_end|> So the answer is"]
    assert not Rules(end_of_turn="continue").finished(ends) and Rules(end_of_turn="keep").finished(ends)


# ---- DRAGIN's query -------------------------------------------------------------------------------

PROMPT = ["Question", ":", " What", " river", " flows", " through", " Paris", "?", "\n", "Answer", ":",
          " Paris", " is", " a", " city", "."]
GENERATED = [" The", " river", " is", " near", " Lyon", "."]
WEIGHTS = ([0.5] * 4 + [0.01, 0.01, 0.01, 0.05, 0.02, 0.01, 0.10, 0.01, 0.01, 0.30, 0.01, 0.20, 0.01, 0.01, 0.08,
                        0.01] + [0.01, 0.15, 0.01, 0.01, 0.40, 0.01])


def lyon() -> LookAhead:
    rows = [np.array(WEIGHTS[:20 + j + 1]) for j in range(len(GENERATED))]
    return LookAhead(cont(GENERATED, prompt_tokens=20, attentions=rows, meta={"prompt_tokens": PROMPT}))


def test_whole_sentence_query_takes_the_sentences_real_words_but_the_flagged():
    la, flagged = lyon(), [(4, 10)]  # " river" (token 1, characters 4-10) flagged
    # token 1's row: question river .05, flows .02, Paris .10; answer Paris .20, city .08 (best Paris kept)
    assert real_words_query(la, 1, "What river flows through Paris?", " Paris is a city.", 35) == \
        "river flows Paris city"
    # the whole sentence adds "Lyon" (after token 1: no attention from it, ranked last); "river" is flagged
    assert real_words_query(la, 1, "What river flows through Paris?", " Paris is a city.", 35,
                            sentence=(1, 24), flagged=flagged) == "river flows Paris city Lyon"
    assert real_words_query(la, 1, "What river flows through Paris?", " Paris is a city.", 4,
                            sentence=(1, 24), flagged=flagged) == "river flows Paris city"
    # without the flag, the sentence's own "river" (.15) outranks the question's (.05): one "river", here
    assert real_words_query(la, 1, "What river flows through Paris?", " Paris is a city.", 35,
                            sentence=(1, 24)) == "flows Paris city river Lyon"


def test_without_a_flagged_token_the_whole_sentence_query_is_its_first_candidates_in_text_order():
    # `filter_order: after-firing` fired with no flag left: the reference ranks by 0/0 (NaN), which leaves the
    # candidates in text order: question river, flows, Paris; answer (Paris again), city; sentence (river), Lyon
    la = lyon()
    assert real_words_query(la, None, "What river flows through Paris?", " Paris is a city.", 3,
                            sentence=(1, 24)) == "river flows Paris"
    assert real_words_query(la, None, "What river flows through Paris?", " Paris is a city.", 35,
                            sentence=(1, 24)) == "river flows Paris city Lyon"
    with pytest.raises(ValueError, match="needs the whole sentence"):
        real_words_query(la, None, "What river flows through Paris?", "", 3)


def test_query_words_is_a_dragin_setting_left_out_of_keys_at_its_default():
    settings = settings_of(DRAGIN, {}, "methods.dragin")
    assert settings["query_words"] == "until-flagged" and "query_words" not in DRAGIN.settings_key(settings)
    assert settings_of(DRAGIN, {"reference": "dragin-code"}, "methods.dragin")["query_words"] == "until-flagged"
    whole = settings_of(DRAGIN, {"query_words": "whole-sentence"}, "methods.dragin")
    assert DRAGIN.settings_key(whole)["query_words"] == "whole-sentence"


class WordTokenizer:
    """Splits on spaces; "<s>" is its one special token (dropped when decoding, as `skip_special_tokens`)."""

    def __call__(self, text, add_special_tokens=False):
        assert not add_special_tokens
        return {"input_ids": text.split(" ")}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(i for i in ids if not (skip_special_tokens and i == "<s>"))


class TokenizerLM:
    tokenizer = WordTokenizer()


def test_query_max_tokens_keeps_the_last_tokens_decoded_without_special_tokens():
    assert last_tokens("a b c d e", 3, TokenizerLM()) == "c d e"  # truncated on the left
    assert last_tokens("<s> b c", 3, TokenizerLM()) == "b c"  # decoded even when it fits, as the reference
    with pytest.raises(ConfigError, match="retrieval.query_max_tokens needs the model's tokenizer"):
        last_tokens("a b", 1, object())


def test_query_max_tokens_applies_to_every_search():
    from adaptive_rag.methods.base import Context, Method

    retriever = RecordingRetriever()
    method = Method({}, Context(lm=TokenizerLM(), exemplars=[], prompt_format="raw", max_new_tokens=5,
                                retriever=retriever, query_max_tokens=2))
    method.search("who founded the glassworks", 3)
    assert retriever.queries == [("the glassworks", 3)]


# ---- FLARE ----------------------------------------------------------------------------------------

INCH = [" In", "ch", "combe", " was", " born", " in", " 1722", ".", " He", " died", ",", " sadly", "."]
SENTENCES = ["Inchcombe was born in 1722.", "He died, sadly."]


def test_reference_token_ranges_run_one_token_past_each_sentence():
    tokens = [t.lstrip() for t in INCH]
    # sentence 1: "In" .. "." are found (pos = find offset in the suffix + length: 2, 2, 7, 6, 12, 9, 17, 10),
    # "He" is not in "was born in 1722." -> tr = 8, scored 0..8 ("He" included); sentence 2 starts at 9
    assert reference_token_ranges(SENTENCES, tokens) == [(0, 8), (9, 13)]


def test_reference_masking_replaces_first_occurrences_and_keeps_the_text_as_it_is():
    units = [t.lstrip() for t in INCH[:9]]
    masked = [u in ("1722", "He") for u in units]
    # "1722" -> "[xxx]"; "He" is not found (find -1: one character before pos, the period) -> "[xxx]" there
    assert reference_masked(SENTENCES[0], units, masked) == "Inchcombe was born in "
    assert reference_masked("He died, sadly.", ["He", "died", ",", "sadly", "."], [False, True, False, False, False]) \
        == "He , sadly."


def test_flare_score_range_dragin_code_scores_the_reference_range():
    probs = [0.9] * 8 + [0.1] + [0.9] * 4  # only "He" (token 8) is doubtful: mean 1 - p over 0..8 = (8 * .1 + .9) / 9
    la = LookAhead(cont(INCH, probs))
    project = FLARE(settings_of(FLARE, {"variant": "dragin-code", "theta": 0.15}, "methods.flare"), None)
    code = FLARE(settings_of(FLARE, {"variant": "dragin-code", "theta": 0.15, "score_range": "dragin-code",
                                     "masking": "dragin-code"}, "methods.flare"), None)
    first = la.sentences[0]
    assert not project.detect(None, la, first).fire  # its own tokens: mean doubt .1
    detection = code.detect(None, la, first)
    assert detection.fire and [u.text for u in detection.units][-1] == "He"  # mean (0.8 + 0.9) / 9 = .189
    assert detection.flagged == [8]
    assert code.build_query(None, la, first, detection) == "Inchcombe was born in 1722"  # "He" eats the period
    assert [u.text for u in code.detect(None, la, la.sentences[1]).units] == ["died", ",", "sadly", "."]
    with pytest.raises(ConfigError, match="score_range: dragin-code scores tokens"):
        settings_of(FLARE, {"score_range": "dragin-code", "granularity": "word"}, "methods.flare")


def test_a_method_template_lays_out_its_own_prompts_and_the_fallback_keeps_the_datasets(tmp_path):
    from adaptive_rag.prompts.template import DEFAULT, load_template

    template = tmp_path / "flare.yaml"
    text = load_template(DEFAULT).path.read_text().replace('question: "{context}Question: {question}\\nAnswer:"',
                                                          'question: "{context}Question: {question}\\nAnswer: "')
    template.write_text(text)
    script = {(False, ""): cont([" Paris", "."], finish="stop"), (False, " Paris. So the answer is"): ANSWER}
    answer, lm, _ = run_method(FLARE, {"template": str(template)}, script)
    assert lm.calls[0]["prompt"].text.endswith("Answer: ")
    assert lm.calls[1]["prompt"].text.endswith("Answer:")  # the fallback: the dataset's layout
    with pytest.raises(ConfigError, match="methods.flare.template: .*no such file"):
        FLARE.read_settings(Section({"template": str(tmp_path / "none.yaml")}, "methods.flare", "params.yaml"))
