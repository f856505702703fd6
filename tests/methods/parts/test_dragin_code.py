"""DRAGIN's `sentence_words`, `filter_order: after-firing` and `query_words: dragin-code`, and the loop's
`empty_query: search`: the DRAGIN reference code's own alignment, trigger and query (github
oneal2000/DRAGIN, src/generate.py `BasicGenerator.generate_attn`, `AttnWeightRAG.modifier`,
`AttnWeightRAG.keep_real_words`, `TokenRAG.inference`). Expected values are worked out by hand from
those functions, in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptive_rag.data.datasets import Example
from adaptive_rag.errors import ConfigError
from adaptive_rag.methods.dragin import DRAGIN
from adaptive_rag.methods.flare import FLARE
from adaptive_rag.methods.parts import dragin_code
from adaptive_rag.methods.parts.lookahead import LookAhead

from conftest import ANSWER, RecordingRetriever, ScriptedLM, cont, method_with, settings_of

# ---- words and sentences (`generate_attn`'s merge, `modifier`'s search) --------------------------------

TOKENS = [" The", " answer", " is", " no", ".", "\n", "Question", ":", " Who", "?"]
NEWLINE = 5


def test_words_start_at_a_space_and_at_the_newline_token_and_lose_their_spaces():
    groups = dragin_code.merged_words(TOKENS, list(range(len(TOKENS))), NEWLINE)
    assert groups == [[0], [1], [2], [3, 4], [5, 6, 7], [8, 9]]
    # the newline token is spelled as Llama's convert_ids_to_tokens spells it: the byte token "<0x0A>"
    assert [dragin_code.word_text(TOKENS, g) for g in groups] == ["The", "answer", "is", "no.", "<0x0A>Question:",
                                                                  "Who?"]
    assert dragin_code.word_text(TOKENS, groups[4], "decoded") == "\nQuestion:"
    # no newline id (a tokenizer without a newline token): the newline stays inside the word before it
    assert dragin_code.merged_words(TOKENS, list(range(len(TOKENS))), None)[3] == [3, 4, 5, 6, 7]


def test_token_pieces_as_llamas_tokenizer_writes_them():
    # convert_ids_to_tokens: "<0x0A>" per newline (SmolLM2's "\n\n" is one token: two byte tokens in it)
    assert dragin_code.spelled("\n\n") == "<0x0A><0x0A>"
    assert dragin_code.spelled("\n", "decoded") == "\n"
    # decode of one token: one leading space dropped ("▁▁two" -> " two"), a newline kept
    assert [dragin_code.decoded_piece(t) for t in (" The", "\n", " ", "  two", "x")] == ["The", "\n", "", " two", "x"]
    assert [dragin_code.decoded_piece(t, "decoded") for t in (" The", "\n", "  two")] == ["The", "", "two"]


def test_a_word_at_a_newline_holds_the_byte_tokens_characters_for_the_real_word_filter():
    # `modifier`'s `match`: a real word inside the word's string. On Llama the word is "<0x0A>A", so the
    # real word "A" (a PROPN here) matches it; spelled as "\nB" it would not have matched "A"
    words = [dragin_code.word_text(["\n", "B"], [0, 1]), "A"]
    assert words == ["<0x0A>B", "A"]
    assert dragin_code.real_word_filter("Grade A", words, [0, 1]) == [0, 1]


def test_a_sentence_is_found_by_a_substring_search_over_the_words_joined_with_spaces():
    words = ["Paris", "is", "big.", "Lyon", "is", "old."]
    # sentence 0 is first inside " ".join(words[0:3]); the last sentence takes every word left
    assert dragin_code.sentence_ranges(["Paris is big.", "Lyon is old."], words) == [(0, 3), (3, 6)]


def test_a_sentence_with_a_newline_gets_no_words_and_they_fall_to_the_next():
    words = ["The", "answer", "is", "no.", "\nQuestion:", "Who?", "Bob", "did."]
    # "...no.\nQuestion: Who?" is in no join ("no. \nQuestion: Who?" has a space before the newline):
    # range (0, 0), and sentence 1 starts at word 0, found once the join holds "Bob did."
    sentences = ["The answer is no.\nQuestion: Who?", "Bob did.", "Then."]
    assert dragin_code.sentence_ranges(sentences, words + ["Then."]) == [(0, 0), (0, 8), (8, 9)]


def test_the_range_score_is_the_attention_share_times_entropy_times_the_range_size():
    # attention [1, 3] of words 0-1: shares .25, .75; entropies 2, .5; two words
    assert dragin_code.range_scores([9.0, 1.0, 3.0], [0.0, 2.0, 0.5], 1, 3) == [1.0, 0.75]


def test_the_real_word_filter_matches_real_words_of_the_sentence_inside_each_word():
    # "Paris" (PROPN) and "big" (ADJ) are real words; "is" (AUX) is not; "big." contains "big"
    assert dragin_code.real_word_filter("Paris is big.", ["Paris", "is", "big."], [0, 1, 2]) == [0, 2]


# ---- the query (`keep_real_words`) ----------------------------------------------------------------

def test_word_attention_averages_each_tokens_previous_row_before_the_word_and_sums_per_word():
    matrix = np.array([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]])
    # word 1 = tokens 1-2, starting at 1: rows 0 and 1 cut to column 0 and renormalised: [1], [1] -> mean [1]
    # word 2 = token 3, starting at 3: row 2 cut to columns 0-2 (sum 1): [.2, .3, .5] -> words [.2, .8, 0]
    out = dragin_code.word_attention(matrix, [[0], [1, 2], [3]])
    assert np.allclose(out, [[0, 0, 0], [1, 0, 0], [0.2, 0.8, 0]])


WORDS = ["Who", "founded", "Acme?", "Bob", "founded", "it."]
TEXT = "Who founded Acme? Bob founded it."


def test_the_query_ranks_the_real_words_but_the_flagged_by_the_flagged_words_attention():
    attention = np.zeros((6, 6))
    attention[4] = [0.1, 0.1, 0.2, 0.6, 0.0, 0.0]  # the flagged "founded" (word 4) attends to Bob most
    # the fired range is the last three words; word 4 is flagged; real words: founded, Acme, Bob
    # candidates: founded (.1), Acme? (.2), Bob (.6) -> top 2 = Bob, Acme? -> in text order
    assert dragin_code.reference_query(WORDS, attention, 3, [False, True, False], TEXT, 2) == "Acme? Bob"
    assert dragin_code.reference_query(WORDS, attention, 3, [False, True, False], TEXT, 35) == "founded Acme? Bob"


def test_with_no_flagged_word_the_query_is_the_first_candidates_in_text_order():
    # 0/0: every key is NaN, which sorting leaves where it is
    attention = np.ones((6, 6))
    assert dragin_code.reference_query(WORDS, attention, 3, [False, False, False], TEXT, 2) == "founded Acme?"


# ---- DRAGIN with the reference's words ------------------------------------------------------------

LOOK = [" Paris", " is", " big", ".", " Lyon", " is", " old", "."]


class Tokenizer:
    """Token i of LOOK is id i; decode([i]) is its text; "\\n" has no token of its own here."""

    def decode(self, ids):
        return "".join(LOOK[i] for i in ids)

    def encode(self, text, add_special_tokens=True):
        return []


class WordsLM:
    tokenizer = Tokenizer()

    def __init__(self, later):
        self.later = later

    def received_attention(self, token_ids, layer=-1):
        zeros = [0.0] * len(self.later)
        return np.array([[self.later], [zeros]], dtype=np.float32)


def dragin(later, **params):
    from adaptive_rag.methods.base import Context

    settings = settings_of(DRAGIN, {"reference": "dragin-code", "theta": 0.8, "sentence_words": "dragin-code",
                                    **params}, "methods.dragin")
    return DRAGIN(settings, Context(lm=WordsLM(later), exemplars=[], prompt_format="raw", max_new_tokens=50))


def lookahead() -> LookAhead:
    return LookAhead(cont(LOOK, token_ids=list(range(len(LOOK))), entropies=[1.0] * len(LOOK)))


def test_dragin_scores_the_reference_words_of_each_sentence():
    # words Paris | is | big. (tokens 2-3) | Lyon | is | old.: attention .4, .1, .1 + 0 in sentence 0:
    # shares 2/3, 1/6, 1/6, times entropy 1 and 3 words: 2, .5, .5 -> "Paris" over .8, a real word
    method, la = dragin([0.4, 0.1, 0.1, 0.0, 0.5, 0.1, 0.2, 0.0]), lookahead()
    detection = method.detect(None, la, la.sentences[0])
    assert [u.text for u in detection.units] == ["Paris", "is", "big."]
    assert np.allclose(detection.scores, [2.0, 0.5, 0.5]) and detection.fire and detection.flagged == [0]
    assert [u.tokens for u in detection.units] == [(0,), (1,), (2, 3)]


def test_after_firing_fires_on_a_word_the_real_word_filter_then_clears():
    # sentence 0: "is" takes 2/3 of the attention -> 2.0 > .8, but "is" is no real word
    later = [0.1, 0.4, 0.1, 0.0, 0.1, 0.1, 0.1, 0.0]
    la = lookahead()
    after = dragin(later).detect(None, la, la.sentences[0])
    assert not after.fire and after.flagged == []
    firing = dragin(later, filter_order="after-firing", query_words="dragin-code").detect(None, la, la.sentences[0])
    assert firing.fire and firing.flagged == []


def test_after_firing_also_applies_to_the_words_within_each_sentences_characters():
    # the same scores from the project's alignment (`sentence_words: offsets`), queried from the whole sentence
    later = [0.1, 0.4, 0.1, 0.0, 0.1, 0.1, 0.1, 0.0]
    la = lookahead()
    method = dragin(later, sentence_words="offsets", filter_order="after-firing", query_words="whole-sentence")
    detection = method.detect(None, la, la.sentences[0])
    assert detection.fire and detection.flagged == [] and [u.text for u in detection.units] == ["Paris", "is", "big."]


@pytest.mark.parametrize("params, key, message", [
    ({"filter_order": "after-firing"}, "filter_order", "query_words: until-flagged cannot query from"),
    ({"query_words": "dragin-code"}, "query_words", "set sentence_words: dragin-code too"),
    ({"sentence_words": "dragin-code", "reference": "paper"}, "filter_order",
     "sentence_words: dragin-code scores the reference's words"),
])
def test_the_reference_switches_are_refused_without_the_ones_they_need(params, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        settings_of(DRAGIN, {"reference": "dragin-code", **params}, "methods.dragin")
    assert f"methods.dragin.{key}" in str(info.value)


def test_sentence_words_is_left_out_of_keys_at_its_default():
    settings = settings_of(DRAGIN, {"reference": "dragin-code"}, "methods.dragin")
    assert settings["sentence_words"] == "offsets" and "sentence_words" not in DRAGIN.settings_key(settings)


# ---- an empty query (`TokenRAG.inference` searches with "") -------------------------------------------

# FLARE (paper): every token below mask_theta .4, so the masked sentence is empty
DOUBTFUL = cont([" Rome", " is", " old", "."], [0.3] * 4)


@pytest.mark.parametrize("rule, searched, queries", [
    ("question", True, [("Where?", 3)]),  # the default: the question instead
    ("search", True, []),  # the reference: a search with "" finds nothing; the prompt keeps its context block
])
def test_an_empty_query_searches_the_question_or_nothing(rule, searched, queries):
    lm, retriever = ScriptedLM({(False, ""): DOUBTFUL, (True, ""): ANSWER}), RecordingRetriever()
    params = {} if rule == "question" else {"empty_query": rule}
    method = method_with(FLARE, params, lm, retriever)
    [answer] = method.answer_batch([Example("q1", "Where?", ["Paris"], "span")])
    assert retriever.queries == queries and answer.retrievals == 1
    assert lm.calls[1]["passages"] is searched
    assert answer.passages == ([] if rule == "search" else answer.passages)
    if rule == "search":
        assert "Context:\nAnswer in the same format" in lm.calls[1]["prompt"].text
    assert math.isclose(answer.steps[0]["detection"]["scores"][0], 0.3)


def test_empty_query_is_refused_outside_the_triggered_loop():
    from adaptive_rag.methods.fl_rag import FixedLengthRetrieval

    with pytest.raises(ConfigError, match="only a trigger's query can come out empty"):
        method_with(FixedLengthRetrieval, {"empty_query": "search"}, ScriptedLM({}))


def test_flares_token_range_stops_at_a_newline_token_as_on_llama():
    from adaptive_rag.methods.flare import reference_token_ranges

    tokens = [" It", " was", ".", "\n", "Then", " yes", "."]
    # `TokenRAG.modifier`: tokens are taken while each is found in "It was." from `pos`; "\n" is not, so
    # the range ends at index 3 (scored over tid..tr = 0..3) and the next sentence starts at index 4
    pieces = [dragin_code.decoded_piece(t) for t in tokens]
    assert reference_token_ranges(["It was.", "Then yes."], pieces) == [(0, 3), (4, 7)]
    # stripped of all leading whitespace the newline token is "", found everywhere: the first range runs on
    pieces = [dragin_code.decoded_piece(t, "decoded") for t in tokens]
    assert reference_token_ranges(["It was.", "Then yes."], pieces)[0] == (0, 4)
