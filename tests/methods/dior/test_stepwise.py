"""DioR's stepwise retrieval (spec §1.4, acceptance test 5) with fake retrievers whose rankings are fixed.

Paper §3.3.2 (unnumbered): from the candidate area take the top n/2 (n = documents still to retrieve),
extract new keywords from them, merge them into the query, retrieve again, until n are selected."""

from __future__ import annotations

import math
import re

import pytest

from adaptive_rag.methods.dior.chunking import relevance
from adaptive_rag.methods.dior.stepwise import (StepwiseSettings, new_keywords, round_size, single_retrieve,
                                                 stepwise_retrieve)
from adaptive_rag.retrieval import Hit
from conftest import RecordingRetriever

WORDS = ["quarry", "river", "stone", "wheel", "ferry", "quay", "harbour", "glass", "oven", "press", "chart", "map"]


class OverlapRetriever:
    """A deterministic ranking over a fixed corpus: score = how many of the query's words the text
    holds; ties by corpus order. Records every (query, k)."""

    def __init__(self, texts: list[str]):
        self.hits = [Hit(f"d{i:02d}", f"T{i}", text, 0.0) for i, text in enumerate(texts)]
        self.calls = []

    def search(self, query, k):
        self.calls.append((query, k))
        words = set(re.findall(r"\w+", query.lower()))
        scored = [(sum(w in words for w in re.findall(r"\w+", h.text.lower())), i) for i, h in enumerate(self.hits)]
        order = sorted(range(len(self.hits)), key=lambda i: (-scored[i][0], i))[:k]
        return [Hit(self.hits[i].id, self.hits[i].title, self.hits[i].text, float(scored[i][0])) for i in order]


def corpus(n=40):
    """n passages, each a different mix of WORDS, so every search has more than enough candidates."""
    return [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 2 + i % 5)) + f" item{i}" for i in range(n)]


class Scripted:
    """Search number n returns the n-th scripted list (the last one again after that)."""

    def __init__(self, *results):
        self.results = results
        self.calls = []

    def search(self, query, k):
        self.calls.append((query, k))
        return list(self.results[min(len(self.calls), len(self.results)) - 1])[:k]


@pytest.mark.parametrize("docs, sizes", [(5, [2, 1, 1, 1]), (3, [1, 1, 1]), (1, [1]), (8, [4, 2, 1, 1])])
def test_rounds_take_half_of_what_is_missing(docs, sizes):
    """Acceptance test 5: 5 documents come in rounds of 2, 1, 1, 1 (4 searches), 3 in rounds of 1, 1, 1."""
    retriever = OverlapRetriever(corpus())
    result = stepwise_retrieve("quarry river", retriever.search, StepwiseSettings(docs=docs))
    assert [len(r["chosen"]) for r in result.rounds] == sizes
    assert result.searches == len(sizes) == len(retriever.calls) == len(result.queries)
    assert [q for q, _ in retriever.calls] == result.queries == [r["query"] for r in result.rounds]
    assert all(k == 15 for _, k in retriever.calls)
    ids = [h.id for h in result.hits]
    assert len(ids) == docs == len(set(ids))
    assert ids == [i for r in result.rounds for i in r["chosen"]]
    assert not any(r["fallback"] for r in result.rounds)


def test_round_size_is_the_floor_of_the_fraction_and_at_least_one():
    assert [round_size(n, 0.5) for n in (5, 3, 2, 1)] == [2, 1, 1, 1]
    assert round_size(100, 0.29) == 29 and round_size(4, 1.0) == 4 and round_size(2, 0.1) == 1


def test_the_query_grows_only_by_new_keywords_space_separated():
    """Round 1 takes A (bm25: the highest score). A's terms by TF-IDF (one document: idf 1, so by
    count): quay 2, ferry 1, harbour 1; "quay" is in the query already (case aside), ferry and harbour
    tie and keep their order in A. The reference code would have sent "Dunmarrow Quayferry harbour"."""
    a = Hit("A", "", "Quay quay ferry harbour", 3.0)
    b = Hit("B", "", "ferry timetable", 2.0)
    c = Hit("C", "", "harbour wall", 5.0)
    search = Scripted([a, b], [a, b, c])
    result = stepwise_retrieve("Dunmarrow Quay", search.search,
                               StepwiseSettings(docs=2, new_keywords=2, candidate_pool=3, relevance="bm25"))
    assert result.queries == ["Dunmarrow Quay", "Dunmarrow Quay ferry harbour"]
    assert [h.id for h in result.hits] == ["A", "C"]
    assert result.rounds[1]["pool"] == ["B", "C"]  # A, chosen before, is not a candidate again


def test_each_round_adds_the_next_new_keywords_of_everything_chosen():
    chosen = Hit("A", "", "zeta eta theta iota kappa lambda", 1.0)
    search = Scripted([chosen], [])
    result = stepwise_retrieve("start", search.search,
                               StepwiseSettings(docs=2, new_keywords=2, candidate_pool=1, max_rounds=3,
                                                relevance="bm25"))
    # six terms of equal weight: their order in the text, never a set's order
    assert result.queries[:3] == ["start", "start zeta eta", "start zeta eta theta iota"]
    assert result.queries[3] == "start" and result.rounds[3]["fallback"]


def test_keywords_sum_tfidf_over_the_chosen_documents():
    """idf over the two texts: alpha (in both) 1, beta and gamma ln(3/2) + 1 = 1.405465. Rows, L2-normed:
    [alpha .5797, beta .8148] and [alpha .3352, gamma .9422] (gamma counted twice). Sums: gamma .9422,
    alpha .9149, beta .8148."""
    texts = ["alpha beta", "alpha gamma gamma"]
    idf = math.log(3 / 2) + 1
    first, second = math.hypot(1, idf), math.hypot(1, 2 * idf)
    sums = {"alpha": 1 / first + 1 / second, "beta": idf / first, "gamma": 2 * idf / second}
    assert sorted(sums, key=lambda t: -sums[t]) == ["gamma", "alpha", "beta"]
    assert new_keywords(texts, "", 3) == ["gamma", "alpha", "beta"]
    assert new_keywords(texts, "GAMMA rays", 5) == ["alpha", "beta"]
    assert new_keywords(texts, "", 0) == [] and new_keywords([], "q", 3) == []
    assert new_keywords(["the of and"], "q", 3) == []  # stop words only


def test_no_document_is_selected_twice():
    """A search that ignores the query and returns the same 15 hits (one of them twice) every time:
    each round chooses among the ones not chosen yet."""
    hits = [Hit(f"h{i}", "", f"text {i}", float(i)) for i in range(15)]
    search = Scripted([hits[14]] + hits)
    result = stepwise_retrieve("q", search.search, StepwiseSettings(docs=5, candidate_pool=20, relevance="bm25"))
    assert [h.id for h in result.hits] == ["h14", "h13", "h12", "h11", "h10"]
    assert [r["chosen"] for r in result.rounds] == [["h14", "h13"], ["h12"], ["h11"], ["h10"]]
    assert result.rounds[0]["pool"].count("h14") == 1


def test_after_max_rounds_a_plain_search_fills_the_rest():
    retriever = OverlapRetriever(corpus())
    result = stepwise_retrieve("quarry river", retriever.search, StepwiseSettings(docs=5, max_rounds=1))
    assert [len(r["chosen"]) for r in result.rounds] == [2, 3]
    assert [r["fallback"] for r in result.rounds] == [False, True]
    assert result.searches == 2 and result.queries[-1] == "quarry river"
    assert retriever.calls[-1] == ("quarry river", 5)
    plain = [h.id for h in retriever.search("quarry river", 5)]
    first = result.rounds[0]["chosen"]
    assert result.rounds[1]["chosen"] == [i for i in plain if i not in first][:3]
    assert len({h.id for h in result.hits}) == 5


def test_an_empty_index_ends_after_one_round_and_the_fallback():
    search = Scripted([])
    result = stepwise_retrieve("q", search.search, StepwiseSettings(docs=3))
    assert result.hits == [] and result.searches == 2 and result.queries == ["q", "q"]
    assert [r["fallback"] for r in result.rounds] == [False, True]


def test_bm25_relevance_uses_the_hit_scores_and_tfidf_the_text():
    unrelated = Hit("u", "", "The weather report for Tuesday.", 9.0)
    about = Hit("g", "", "Gideon Quarrel was a glassblower in Yarrowick.", 1.0)
    query = "Gideon Quarrel glassblower"
    by_score = stepwise_retrieve(query, Scripted([unrelated, about]).search,
                                 StepwiseSettings(docs=1, relevance="bm25"))
    by_text = stepwise_retrieve(query, Scripted([unrelated, about]).search, StepwiseSettings(docs=1))
    assert [h.id for h in by_score.hits] == ["u"] and [h.id for h in by_text.hits] == ["g"]


def test_tfidf_relevance_is_scored_against_the_original_query():
    """Round 2's pool comes from the grown query; it is still ranked by the original one."""
    a = Hit("A", "", "quarry quarry wheel", 1.0)
    drift = Hit("D", "", "wheel wheel wheel", 9.0)
    kept = Hit("K", "", "the quarry pond", 1.0)
    search = Scripted([a], [drift, kept])
    result = stepwise_retrieve("quarry", search.search, StepwiseSettings(docs=2, candidate_pool=2))
    assert search.calls[1][0] == "quarry wheel"
    assert [h.id for h in result.hits] == ["A", "K"]


def test_the_reference_codes_stop_words_apply():
    """scikit-learn's English list, which the reference code uses, holds content words such as "mill",
    "fire" and "found": they are never keywords and never count for relevance."""
    assert new_keywords(["mill fire found granary"], "", 5) == ["granary"]
    assert relevance("The mill burned.", "mill") == 0.0 and relevance("The granary burned.", "granary") > 0


@pytest.mark.parametrize("relevance", ["bm25", "tfidf"])
def test_ties_keep_the_retrieval_rank(relevance):
    hits = [Hit(f"t{i}", "", "same text about mills", 2.0) for i in range(4)]
    result = stepwise_retrieve("mills", Scripted(hits).search, StepwiseSettings(docs=4, relevance=relevance))
    assert [h.id for h in result.hits] == ["t0", "t1", "t2", "t3"]


def test_single_retrieve_is_one_search_of_docs():
    retriever = RecordingRetriever()
    result = single_retrieve("where?", retriever.search, 3)
    assert retriever.queries == [("where?", 3)]
    assert [h.id for h in result.hits] == ["d1.1", "d1.2", "d1.3"]
    assert result.searches == 1 and result.queries == ["where?"]
    assert result.rounds == [{"query": "where?", "pool": ["d1.1", "d1.2", "d1.3"],
                              "chosen": ["d1.1", "d1.2", "d1.3"], "fallback": False}]
    with pytest.raises(ValueError, match="docs must be an integer >= 1; got 0"):
        single_retrieve("where?", retriever.search, 0)


@pytest.mark.parametrize("field, value, message", [
    ("docs", 0, "docs must be an integer >= 1; got 0"),
    ("step_fraction", 0.0, r"step_fraction must be a number in \(0, 1\]; got 0.0"),
    ("step_fraction", 1.5, r"step_fraction must be a number in \(0, 1\]; got 1.5"),
    ("new_keywords", -1, "new_keywords must be an integer >= 0; got -1"),
    ("candidate_pool", 0, "candidate_pool must be an integer >= 1; got 0"),
    ("max_rounds", 0, "max_rounds must be an integer >= 1; got 0"),
    ("relevance", "bm42", "relevance must be one of tfidf, bm25; got 'bm42'"),
    ("docs", True, "docs must be an integer >= 1; got True"),
])
def test_settings_are_checked(field, value, message):
    with pytest.raises(ValueError, match=message):
        StepwiseSettings(**{field: value})


def test_defaults_are_the_specs():
    assert StepwiseSettings() == StepwiseSettings(docs=3, step_fraction=0.5, new_keywords=10, candidate_pool=15,
                                                  max_rounds=10, relevance="tfidf")
