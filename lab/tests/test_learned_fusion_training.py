"""The learned fusion's trainer: the stacked listwise loss equals the per-row definition, and training on real
dev rows (the bench's committed oracle rows) reaches a minimum: a loss below the untrained model's and a gradient
near zero (the fixed-step gradient descent it replaced ended above where it started)."""

from __future__ import annotations

import numpy as np
import pytest
from pinpoint.localization.learned_fusion import _Batch, _listwise_loss, train
from pinpoint_lab.localization import localize_bench as bench


def _per_row_loss(w: np.ndarray, groups, l2: float) -> float:
    """-log P(gold | row) averaged over rows, written out row by row (P: softmax over the row's candidates)."""
    total = 0.0
    for x, y in groups:
        s = x @ w
        total -= np.log(np.exp(s[y > 0]).sum() / np.exp(s).sum())
    return total / len(groups) + 0.5 * l2 * float(w @ w)


def test_the_stacked_loss_and_its_gradient_are_the_per_row_definition():
    rng = np.random.default_rng(0)
    groups = []
    for n in (3, 8, 2, 5):
        y = np.zeros(n)
        y[rng.choice(n, size=min(2, n - 1), replace=False)] = 1.0  # rows with one and with two gold lines
        groups.append((rng.normal(size=(n, 4)), y))
    w = rng.normal(size=4)
    loss, grad = _listwise_loss(w, groups, 0.1)
    assert loss == pytest.approx(_per_row_loss(w, groups, 0.1), rel=1e-12)
    step = 1e-6
    numeric = [(_per_row_loss(w + step * e, groups, 0.1) - _per_row_loss(w - step * e, groups, 0.1)) / (2 * step)
               for e in np.eye(4)]
    assert grad == pytest.approx(numeric, abs=1e-6)


def test_training_on_real_rows_reaches_a_minimum():
    rows = bench.learnable(bench.cached_folder(bench.ROWS_DIR, "oracle"))
    rows = [r for r in rows if r["repo"] in ("psf/requests", "pallets/flask", "pytest-dev/pytest")]
    examples = [bench.row_examples(r) for r in rows]
    model = train(examples)
    kept = [(x, y) for x, y in examples if 0 < y.sum() < len(y)]
    assert len(kept) >= 10
    batch = _Batch.of([((x - np.array(model.mean)) / np.array(model.scale), y) for x, y in kept])
    loss, grad = batch.loss(np.array(model.weights), 0.1)
    untrained, _ = batch.loss(np.zeros(len(model.weights)), 0.1)
    assert loss < untrained - 0.5
    assert np.linalg.norm(grad) < 1e-4
