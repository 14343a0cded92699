"""The text-only fusion never loses to its file-level anchor (BM25) at any k, by construction: pinned on random
synthetic rankings, where reciprocal rank alone does lose."""

from __future__ import annotations

import random

from pinpoint.localization.fusion import FusionRule, fuse, reciprocal_rank_fusion
from pinpoint.localization.suspects import Placement, Suspect

FILES = [f"pkg/m{i}.py" for i in range(12)]
#: the rule's earlier defaults: MBFL at half weight, every switch fused, the spectrum's top three lines leading
EARLIER = FusionRule(weights=(("mbfl", 0.5),), floors=(), spectrum_lead=3)


def _files_view(suspects: list[Suspect]) -> list[str]:
    return list(dict.fromkeys(s.path for s in suspects))


def _members(rng: random.Random, bm25_ties: bool = False) -> dict[str, list[Suspect]]:
    """retrieval: function and line spans in a few files; lexical and bm25: whole files, each its own order."""
    retrieval = []
    for rank, path in enumerate(rng.sample(FILES, 4)):
        start = rng.randrange(1, 150)
        retrieval.append(Suspect(path, start, start + rng.choice([0, 0, 20]), 2.0 - rank * 0.3, "retrieval"))
        retrieval.append(Suspect(path, start + 40, start + 40, 1.9 - rank * 0.3, "retrieval"))
    lexical = [Suspect(p, 1, 300, 50.0 - i, "lexical") for i, p in enumerate(rng.sample(FILES, 8))]
    scores = [round(100.0 - i * (5 if not bm25_ties else 0.5), 0) for i in range(8)]  # rounding makes ties
    bm25 = [Suspect(p, 1, 301, s, "bm25") for p, s in zip(rng.sample(FILES, 8), scores, strict=True)]
    return {"retrieval": retrieval, "lexical": lexical, "bm25": bm25}


def _hit(view: list[str], gold: str, k: int) -> bool:
    return gold in view[:k]


def test_fused_file_order_is_bm25s_where_bm25_orders_strictly():
    rng = random.Random(7)
    for _ in range(300):
        members = _members(rng)
        fused = fuse(members)
        bm25 = _files_view(members["bm25"])
        assert _files_view(fused)[: len(bm25)] == bm25
        assert all(a.score >= b.score for a, b in zip(fused, fused[1:], strict=False))  # still in score order
        assert {(s.path, s.start_line, s.end_line) for s in fused} == {
            (s.path, s.start_line, s.end_line) for s in reciprocal_rank_fusion(members)}  # same spans, reordered


def test_fused_never_loses_to_bm25_at_any_k_where_plain_rrf_does():
    rng = random.Random(11)
    rrf_lost = 0
    for _ in range(300):
        members = _members(rng)
        fused_view, bm25_view = _files_view(fuse(members)), _files_view(members["bm25"])
        rrf_view = _files_view(reciprocal_rank_fusion(members))
        for gold in FILES:
            for k in range(1, len(FILES) + 1):
                assert _hit(fused_view, gold, k) or not _hit(bm25_view, gold, k)
                rrf_lost += _hit(bm25_view, gold, k) and not _hit(rrf_view, gold, k)
    assert rrf_lost > 0  # not vacuous: reciprocal rank alone loses to bm25 on these rankings


def test_bm25_ties_are_the_only_place_the_others_reorder_its_files():
    rng = random.Random(5)
    for _ in range(300):
        members = _members(rng, bm25_ties=True)
        score = {s.path: s.score for s in members["bm25"]}
        view = _files_view(fuse(members))
        ranked = view[: len(score)]
        assert set(ranked) == set(score)  # bm25's files first, then the others' files
        assert [score[p] for p in ranked] == sorted(score.values(), reverse=True)  # in bm25's score order
        rrf_order = [p for p in _files_view(reciprocal_rank_fusion(members)) if p in score]
        for a, b in zip(ranked, ranked[1:], strict=False):
            if score[a] == score[b]:  # a bm25 tie is ordered as reciprocal rank orders those files
                assert rrf_order.index(a) < rrf_order.index(b)


def test_with_execution_signals_the_fusion_stays_reciprocal_rank():
    rng = random.Random(3)
    members = _members(rng)
    members["traceback"] = [Suspect(FILES[0], 5, 5, 1.0, "traceback")]
    assert fuse(members) == reciprocal_rank_fusion(members)


def test_interleaved_file_order_keeps_bm25s_top_half_at_every_k():
    rng = random.Random(13)
    for _ in range(300):
        members = _members(rng)
        view, bm25 = _files_view(fuse(members, files="interleave")), _files_view(members["bm25"])
        assert view[0] == bm25[0]
        for k in range(1, len(bm25) + 1):
            assert set(bm25[: (k + 1) // 2]) <= set(view[:k])


def test_predicates_whose_switch_makes_failing_tests_pass_lead_the_top_file_ahead_of_the_spectrum():
    spectrum = [Suspect("a.py", n, n, 1.0 - n / 100, "spectrum") for n in (3, 4, 5)] + [
        Suspect("b.py", 9, 9, 0.5, "spectrum")]
    predicates = [Suspect("a.py", 7, 7, 1.0, "predicates"), Suspect("a.py", 7, 12, 0.5, "predicates"),
                  Suspect("b.py", 2, 2, 1.0, "predicates"),  # not in the top file: no lead
                  Suspect("a.py", 8, 8, 0.1, "predicates")]  # changed the failure but none passed: no lead

    led = EARLIER  # a rule with the spectrum's lead (3 lines): the switches lead ahead of it
    fused = fuse({"spectrum": spectrum, "predicates": predicates}, rule=led)
    assert [(s.path, s.start_line, s.end_line) for s in fused[:4]] == [
        ("a.py", 7, 7), ("a.py", 3, 3), ("a.py", 4, 4), ("a.py", 5, 5)]
    assert fused[0].placements[-1] == Placement("predicates lead", 1, fused[0].placements[-1].fused)
    assert fused[0].describe().startswith("[predicates lead #1")  # what the prompt quotes
    assert all(a.score >= b.score for a, b in zip(fused, fused[1:], strict=False))
    without = fuse({"spectrum": spectrum, "predicates": predicates[3:]}, rule=led)
    assert [s.start_line for s in without[:3]] == [3, 4, 5]  # the spectrum's lead, as before
    default = fuse({"spectrum": spectrum, "predicates": predicates})  # no spectrum lead; the switch still leads
    assert (default[0].path, default[0].start_line) == ("a.py", 7)


def test_the_default_rule_fuses_passing_switches_only_and_mbfl_at_half_weight():
    from pinpoint.localization.fusion import PLAIN_RULE
    from pinpoint.localization.predicates import CHANGED_WEIGHT

    spectrum = [Suspect("a.py", n, n, 1.0 - n / 100, "spectrum") for n in (3, 4, 5)]
    changed_only = Suspect("b.py", 8, 8, CHANGED_WEIGHT, "predicates")  # changed the failure, undid it nowhere
    passing = Suspect("b.py", 9, 9, 0.3, "predicates")
    mbfl = [Suspect("c.py", 2, 2, 0.9, "mbfl")]
    members = {"spectrum": spectrum, "predicates": [passing, changed_only], "mbfl": mbfl}
    fused = {(s.path, s.start_line): s.score for s in fuse(members)}
    assert ("b.py", 8) not in fused and ("b.py", 9) in fused  # the floor: a switch that made a failing test pass
    assert fused[("c.py", 2)] == 0.5 / 61  # MBFL's rank 1 at half weight
    every = {(s.path, s.start_line) for s in fuse(members, rule=EARLIER)}
    assert ("b.py", 8) in every and ("b.py", 9) in every  # the previous default: every switch
    plain = {(s.path, s.start_line): s.score for s in fuse(members, rule=PLAIN_RULE)}
    assert ("b.py", 8) in plain and plain[("c.py", 2)] == 1 / 61  # the earlier rule: every switch, full weight


def test_without_the_spectrums_lead_the_top_file_keeps_reciprocal_rank_order():

    spectrum = [Suspect("a.py", 9, 9, 1.0, "spectrum"), Suspect("a.py", 1, 30, 0.5, "spectrum")]
    ldb = [Suspect("a.py", 1, 30, 1.0, "ldb"), Suspect("a.py", 2, 2, 0.9, "ldb")]
    led = fuse({"spectrum": spectrum, "ldb": ldb}, rule=EARLIER)
    assert led[0].start_line == 9 and led[0].describe().startswith("[spectrum lead #1")
    plain = fuse({"spectrum": spectrum, "ldb": ldb})  # the default: no lead (with `mentions` fused it pays more)
    assert plain == reciprocal_rank_fusion({"spectrum": spectrum, "ldb": ldb}, weights={"mbfl": 0.5})
