"""Hit@k in expectation over ties, on hand-made rankings whose probabilities can be counted by hand."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from pinpoint.localization.suspects import Suspect
from pinpoint_lab.localization import localize_bench as bench
from pinpoint_lab.localization.ties import expected_all, expected_any, tie_runs, top_tie


def test_tie_runs_and_top_tie():
    assert tie_runs([3.0, 3.0, 2.0, 1.0, 1.0, 1.0]) == [(0, 2), (2, 3), (3, 6)]
    assert top_tie([3.0, 3.0, 2.0]) == 2
    assert top_tie([0.1 + 0.2, 0.3, 0.1]) == 2  # float sums that differ in the last bit still tie
    assert top_tie([]) == 0


def test_no_ties_is_the_plain_hit():
    gold = [False, False, True, False]
    scores = [4.0, 3.0, 2.0, 1.0]
    assert [expected_any(gold, scores, k) for k in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 1.0]


def test_one_gold_in_a_tie_straddling_k_counts_its_share_of_the_slots():
    # positions 1-4 tie; k = 3 leaves 2 of the 4 tied slots within the cut
    gold = [False, False, False, True, False]
    scores = [9.0, 5.0, 5.0, 5.0, 5.0]
    assert expected_any(gold, scores, 3) == pytest.approx(2 / 4)
    assert expected_any(gold, scores, 1) == 0.0  # the tie starts after k
    assert expected_any(gold, scores, 5) == 1.0  # the tie ends within k
    # the list's own order put gold at rank 4: a tie-break can make it look like anything from 0 to 1 at k = 3


def test_gold_before_the_tie_is_a_hit_whatever_the_order():
    assert expected_any([True, False, True], [2.0, 1.0, 1.0], 2) == 1.0


def test_two_gold_in_the_tie_match_a_count_over_every_order():
    scores = [1.0] * 6
    gold = [True, False, True, False, False, False]
    for k in range(1, 7):
        orders = list(itertools.permutations(gold))
        counted = Fraction(sum(any(o[:k]) for o in orders), len(orders))
        assert expected_any(gold, scores, k) == pytest.approx(float(counted))
        all_in = Fraction(sum(sum(o[:k]) == 2 for o in orders), len(orders))
        assert expected_all(gold, scores, k, total=2) == pytest.approx(float(all_in))


def test_all_gold_needs_every_gold_item_ranked():
    assert expected_all([True, False], [2.0, 1.0], 5, total=2) == 0.0  # one gold item is not in the list
    assert expected_all([True, True, False], [3.0, 2.0, 1.0], 2, total=2) == 1.0
    assert expected_all([True, False, True], [3.0, 2.0, 1.0], 2, total=2) == 0.0
    assert expected_all([], [], 5, total=0) == 0.0


def test_the_bench_counts_a_tied_gold_file_in_expectation():
    # three whole files tie at the top; the gold one is listed first, so today's Acc@1 says 1, expectation 1/3
    suspects = [Suspect(p, 1, 200, 1.0, "sig") for p in ("gold.py", "b.py", "c.py")]
    gold = bench.Gold({"gold.py": {10}}, frozenset({("gold.py", "<module>")}))
    sources = bench.row_sources({"spans": {}})
    plain = bench.score(bench.ranked_views(suspects, sources), gold)
    fair = bench.tie_scores(bench.scored_views(suspects, sources), gold)
    assert plain["file@1"] is True
    assert fair["file@1~"] == pytest.approx(1 / 3)
    assert fair["file@3~"] == 1.0
    assert fair["ties_file"] == 3
