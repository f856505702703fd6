"""SUGAR's threshold search on hand-computed calibration splits (spec §1.5): the Acc-maximising
(t1, t2), its tie rule (fewer retrievals, then the larger thresholds), the paper's mean rule, and
where the grid puts its cuts."""

import math

import pytest

from adaptive_rag.methods.sugar.routing import (GRID_CUTS, best, cuts, mean_rule, mean_single_rule, quantiles,
                                                route, search)

# Four questions: SE, then Acc and retrievals of their none / single / multi answers.
#   q1 0.1: right without retrieval and with one, wrong with IRCoT (2 rounds)
#   q2 0.5: wrong without, right with one retrieval or IRCoT (2 rounds)
#   q3 0.8: right only with IRCoT (3 rounds)
#   q4 1.2: wrong everywhere (IRCoT 4 rounds)
VALUES = [0.1, 0.5, 0.8, 1.2]
ACC = [[1, 1, 0], [0, 1, 1], [0, 0, 1], [0, 0, 0]]
STEPS = [[0, 1, 2], [0, 1, 2], [0, 1, 3], [0, 1, 4]]


def test_grid_has_every_ordered_pair_of_cuts_and_infinity():
    rows = search(VALUES, ACC, STEPS)
    # cuts -0.9, 0.1, 0.5, 0.8, 1.2; t2 from t1 up, plus infinity: 6 + 5 + 4 + 3 + 2
    assert len(rows) == 20
    assert all(r["t2"] is None or r["t1"] <= r["t2"] for r in rows)
    assert all(r["none"] + r["single"] + r["multi"] == 4 for r in rows)


def test_the_acc_maximising_thresholds_by_hand():
    rows = search(VALUES, ACC, STEPS)
    # Acc 3/4 is the most (q4 is never right): q3 must go to IRCoT (t2 < 0.8), q2 to single or IRCoT
    # (t1 < 0.5). Of those routings, (0.1, 0.5) is cheapest: q1 none 0 + q2 single 1 + q3 3 + q4 4 = 8;
    # (0.1, 0.1) costs 9, (-0.9, 0.5) 9, (-0.9, 0.1) 10.
    by_pair = {(r["t1"], r["t2"]): r for r in rows}
    assert {pair: (r["acc"], r["steps"]) for pair, r in by_pair.items() if r["acc"] == 0.75} == {
        (0.1, 0.5): (0.75, 2.0), (0.1, 0.1): (0.75, 2.25), (-0.9, 0.5): (0.75, 2.25), (-0.9, 0.1): (0.75, 2.5)}
    assert best(rows) == [0.1, 0.5]
    assert max(r["acc"] for r in rows) == 0.75
    assert by_pair[(1.2, None)]["acc"] == 0.25 and by_pair[(1.2, None)]["steps"] == 0.0  # all none: only q1


def test_ties_go_to_fewer_retrievals_then_to_the_larger_thresholds():
    # Nothing is ever right: every routing has Acc 0, so the cheapest (nothing retrieves) wins, and of
    # the routings that retrieve nothing the largest t1 and t2 (.inf: no multi-step at all).
    rows = search([0.2, 0.7], [[0, 0, 0], [0, 0, 0]], [[0, 1, 2], [0, 1, 2]])
    assert best(rows) == [0.7, None]
    # equal Acc and cost but different cuts: t2 = 0.7 and t2 = inf route these values alike
    rows = search([0.2, 0.7], [[1, 0, 0], [0, 1, 0]], [[0, 1, 2], [0, 1, 2]])
    assert best(rows) == [0.2, None]


def test_the_mean_rule_is_table_three_with_multi_step():
    """Table III (SUGAR §IV-D) sets "the single-hop SUGAR thresholds to the average values", and its PE rows
    take 1.04 and 1.36 retrieval steps, more than single-step retrieval's 1.00: some questions went to
    multi-step. t1 = the mean; t2 as the paper finds thresholds (§IV-A: best effectiveness on held-out
    questions) with t1 held. By hand for 0.1, 0.5, 0.8, 1.2: mean 0.65, so q1 and q2 go to no retrieval
    (Acc 1 + 0). t2 = 0.65: q3 and q4 multi (Acc 1 + 0), Acc 2/4, steps 0 + 0 + 3 + 4 = 7; t2 = 0.8:
    q3 single, q4 multi, Acc 1/4; t2 = 1.2 or infinity: both single, Acc 1/4. Best: t2 = 0.65, 1.75 steps
    per question."""
    t1, t2 = mean_rule(VALUES, ACC, STEPS)
    assert (t1, t2) == (pytest.approx(0.65), pytest.approx(0.65))
    assert [route(v, t1, t2) for v in VALUES] == ["none", "none", "multi", "multi"]
    steps = sum(STEPS[i][["none", "single", "multi"].index(route(v, t1, t2))] for i, v in enumerate(VALUES))
    assert steps / len(VALUES) == 1.75  # above 1: the Step column Table III prints for its PE rows
    # an undefined value is left out of the mean (0.4); nothing is ever right, so the cheapest t2 wins: with
    # infinity both values above the mean take one retrieval (2), with t2 = 0.4 or 0.5 the undefined one two
    nothing = [[0, 0, 0]] * 3
    assert mean_rule([0.3, math.inf, 0.5], nothing, [[0, 1, 2]] * 3) == [pytest.approx(0.4), None]


def test_the_mean_single_rule_never_routes_to_multi_step():
    """The other reading (t1 = mean, no t2): at most one step per question, so Table III's 1.04 and
    1.36 are out of its reach (routed here: none, none, single, single: 2 steps over 4 questions)."""
    assert mean_single_rule(VALUES) == [pytest.approx(0.65), None]
    assert mean_single_rule([0.3, math.inf, 0.5]) == [pytest.approx(0.4), None]
    assert [route(v, 0.65, math.inf) for v in VALUES] == ["none", "none", "single", "single"]


def test_a_value_on_a_cut_routes_to_the_cheaper_branch():
    rows = {(r["t1"], r["t2"]): r for r in search(VALUES, ACC, STEPS)}
    assert (rows[(0.5, 0.8)]["none"], rows[(0.5, 0.8)]["single"], rows[(0.5, 0.8)]["multi"]) == (2, 1, 1)
    assert [route(v, 0.5, 0.8) for v in VALUES] == ["none", "none", "single", "multi"]


def test_cuts_are_observed_values_and_at_most_grid_cuts_of_them():
    assert cuts([0.3, 0.1, 0.3, math.inf]) == [-0.9, 0.1, 0.3]
    many = [i / 1000 for i in range(1000)]
    placed = cuts(many)
    assert len(placed) == GRID_CUTS and placed[1] == 0.0 and placed[-1] == 0.999
    assert set(placed[1:]) <= set(many)


def test_quantiles_of_the_finite_values():
    assert quantiles([0.0, 1.0, 2.0, 3.0, 4.0])["0.5"] == 2.0
    assert quantiles([math.inf]) == {}
