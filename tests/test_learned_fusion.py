"""The learned fusion: its features on a hand-made row, that it learns a planted feature, held-out splits that keep
repositories and dates apart, the model file, and the agent's `agent.fusion` option."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pinpoint.agent import nodes
from pinpoint.agent.config import load_config
from pinpoint.localization.learned_fusion import (
    FEATURES,
    LearnedFusion,
    LineRecord,
    candidates,
    features,
    train,
)
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint_lab.localization import localize_bench as bench


def record(line: int, *, ef: int = 1, ep: int = 3, rank: int = 0, depth: int | None = None,
           path: str = "pkg/mod.py") -> LineRecord:
    return LineRecord(path, line, ef, ep, 1, 4, round(ef / (ef + ep) ** 0.5, 6), ef**2 / max(ep, 0.5), rank, depth)


def hand_row(instance_id: str = "o__r-1", repo: str = "o/r", created_at: str = "2020-01-01") -> dict:
    """An oracle row: spectrum lines 10-14 of pkg/mod.py (13 in the deepest frame), retrieval naming f (lines
    9-20), bm25 naming the file, gold line 13."""
    suspects = {
        "retrieval": [Suspect("pkg/mod.py", 9, 20, 1.0, "retrieval", "f named")],
        "bm25": [Suspect("pkg/mod.py", 1, 300, 5.0, "bm25", "file"), Suspect("pkg/other.py", 1, 200, 4.0, "bm25")],
        "spectrum": [Suspect("pkg/mod.py", n, n, 0.5, "spectrum") for n in (10, 11, 12, 13, 14)],
    }
    lines = [record(n, rank=i, depth=0 if n == 13 else None) for i, n in enumerate((10, 11, 12, 13, 14))]
    return {"instance_id": instance_id, "repo": repo, "created_at": created_at, "setting": "oracle",
            "gold_files": ["pkg/mod.py"], "gold_functions": [["pkg/mod.py", "f"]], "gold_lines": {"pkg/mod.py": [13]},
            "signals": {n: {"suspects": [s.to_dict() for s in v]} for n, v in suspects.items()},
            "lines": [r.to_dict() for r in lines], "spans": {"pkg/mod.py": [["f", 9, 9, 20]], "pkg/other.py": []}}


def test_features_of_a_hand_made_row():
    x, y = bench.row_examples(hand_row())
    signals, records = bench.row_inputs(hand_row())
    lines = candidates(signals, records)
    assert x.shape == (len(lines), len(FEATURES)) and lines[:5] == [("pkg/mod.py", n) for n in range(10, 15)]
    assert y.tolist() == [float(line == ("pkg/mod.py", 13)) for line in lines]
    at = {name: i for i, name in enumerate(FEATURES)}
    thirteen, nine = x[lines.index(("pkg/mod.py", 13))], x[lines.index(("pkg/mod.py", 9))]
    assert thirteen[at["spectrum_has"]] == 1 and thirteen[at["frame_deepest"]] == 1 and thirteen[at["ochiai"]] == 0.5
    assert thirteen[at["ties_log"]] == pytest.approx(np.log1p(5))  # all five lines share their counts
    assert thirteen[at["retrieval_rr"]] == 1 and thirteen[at["spectrum_line"]] == 1 and thirteen[at["bm25_file_rr"]] == 1
    assert thirteen[at["signals_holding"]] == 3  # retrieval's function, bm25's file, spectrum's line
    assert nine[at["spectrum_has"]] == 0 and nine[at["frame_has"]] == 0 and nine[at["signals_holding"]] == 2


def planted(seed: int) -> tuple[list[Suspect], list[LineRecord], int]:
    """Thirty tied spectrum lines in random order; the gold one alone is a deepest frame."""
    rng = random.Random(seed)
    numbers = rng.sample(range(1, 200), 30)
    gold = numbers[rng.randrange(30)]
    records = [record(n, rank=i, depth=0 if n == gold else rng.choice([None, 3, 5])) for i, n in enumerate(numbers)]
    return [Suspect("pkg/mod.py", n, n, 0.5, "spectrum") for n in numbers], records, gold


def planted_model():
    """The ranker trained on twenty planted rows."""
    groups = []
    for seed in range(20):
        suspects, records, gold = planted(seed)
        lines = candidates({"spectrum": suspects}, records)
        groups.append((features({"spectrum": suspects}, records, lines),
                       np.array([float(n == gold) for _, n in lines])))
    return train(groups)


def test_the_ranker_learns_a_planted_feature_and_ranks_its_line_first():
    model = planted_model()
    suspects, records, gold = planted(99)
    fused = LearnedFusion(model).fuse({"spectrum": suspects}, records)
    assert (fused[0].path, fused[0].start_line, fused[0].signal) == ("pkg/mod.py", gold, "learned")
    assert model.weights[FEATURES.index("frame_deepest")] > 0


def test_leading_orders_lines_only_inside_reciprocal_ranks_top_file_and_keeps_its_files():
    from pinpoint.localization.fusion import fuse

    model = planted_model()
    suspects, records, gold = planted(99)
    signals = {"spectrum": suspects, "bm25": [Suspect("pkg/other.py", 1, 300, 9.0, "bm25"),
                                             Suspect("pkg/mod.py", 1, 300, 5.0, "bm25")]}
    plain = fuse(signals)
    led = LearnedFusion(model, lead=3).fuse(signals, records)
    assert [s.signal for s in led[:3]] == ["learned"] * 3 and led[3:] == plain
    assert (led[0].path, led[0].start_line) == ("pkg/mod.py", gold)
    assert all(a.score >= b.score for a, b in zip(led, led[1:], strict=False))
    top_file = next(s.path for s in plain)
    assert {s.path for s in led[:3]} == {top_file}


def test_held_out_splits_never_share_a_repository_or_a_date():
    rows = [hand_row(f"{repo.replace('/', '__')}-{i}", repo, f"20{18 + i}-0{1 + i % 9}-01")
            for repo in ("a/x", "b/y", "c/z") for i in range(4)]
    for train_rows, test_rows in bench.repository_folds(rows):
        assert {r["repo"] for r in train_rows}.isdisjoint({r["repo"] for r in test_rows}) and test_rows
    [(before, after)] = bench.date_folds(rows, "2020-01-01")
    assert max(r["created_at"] for r in before) < "2020-01-01" <= min(r["created_at"] for r in after)
    tested = bench.held_out(rows, bench.repository_folds(rows))
    assert sorted(r["instance_id"] for r in tested) == sorted(r["instance_id"] for r in rows)
    assert all(r["signals"]["learned"]["line@1"] for r in tested)  # the frame line, learned from other repos


def test_a_saved_model_loads_back_and_scores_the_same(tmp_path):
    model = train([bench.row_examples(hand_row())], trained_on="one row")
    path = tmp_path / "fusion.json"
    model.save(path)
    loaded = type(model).load(path)
    x, _ = bench.row_examples(hand_row())
    assert loaded == model and np.allclose(loaded.score(x), model.score(x))


class _Fixed:
    """A localizer that always answers the same suspects."""

    def __init__(self, name: str, suspects: list[Suspect]) -> None:
        self.name, self.suspects = name, suspects

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return list(self.suspects)


@pytest.mark.parametrize(("fusion", "signal"), [("rrf", "fusion"), ("learned", "learned")])
def test_the_agent_fusion_option_selects_the_ranker(fusion, signal):
    cfg = load_config(**{"llm.base_url": "http://127.0.0.1:9", "llm.model": "fake", "agent.fusion": fusion})
    localizers = [_Fixed("retrieval", [Suspect("pkg/mod.py", 9, 20, 1.0, "retrieval")]),
                  _Fixed("lexical", [Suspect("pkg/mod.py", 1, 300, 3.0, "lexical")])]
    fused, per_signal = nodes.fused_suspects(localizers, None, cfg, LocalizationRequest(problem_statement="f is wrong"))
    assert fused[0].signal == signal and set(per_signal) == {"retrieval", "lexical"}


def test_the_loss_of_a_gold_line_far_behind_stays_finite():
    """A gold line 1000 nats behind its row's best candidate has a probability below float range: the loss is
    computed in log space (a crash of the whole benchmark table before)."""
    from pinpoint.localization.learned_fusion import _listwise_loss

    width = len(FEATURES)
    x = np.zeros((2, width))
    x[0, 0] = 1000.0  # the non-gold candidate
    w = np.zeros(width)
    w[0] = 1.0
    loss, grad = _listwise_loss(w, [(x, np.array([0.0, 1.0]))], 0.0)
    assert loss == pytest.approx(1000.0) and np.all(np.isfinite(grad))
