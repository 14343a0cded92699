"""Training the diagnostic model: cross-entropy over unit positions, target the first buggy unit.

Best checkpoint by validation exact match (the argmax unit is the first buggy unit). Seeds are fixed; data comes
from `dataset` (synthetic bugs over correct code plus real labelled bugs), split by base task.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from localization.dataset import Example
from localization.features import Vocabulary, collate, featurize
from localization.model import Checkpoint, DiagnosticModel, ModelConfig, line_scores


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 15
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.01
    seed: int = 0
    min_count: int = 2
    #: stop early (keeping the best checkpoint) when the wall clock passes this many seconds
    time_budget_s: float | None = None
    threads: int = 1


def _window(feats: dict[str, torch.Tensor], target: int, size: int, rng: random.Random) -> tuple[dict, int]:
    """Crop a long program to `size` units around its target (training only; inference reads all windows)."""
    n = len(feats["tokens"])
    if n <= size:
        return feats, target
    lo = rng.randint(max(0, target - size + 1), min(target, n - size))
    return {k: v[lo : lo + size] for k, v in feats.items()}, target - lo


def _batches(items: list, batch_size: int, rng: random.Random) -> list[list]:
    order = list(range(len(items)))
    rng.shuffle(order)
    return [[items[i] for i in order[k : k + batch_size]] for k in range(0, len(order), batch_size)]


def evaluate_examples(model: DiagnosticModel, examples: Sequence[Example], vocab: Vocabulary) -> dict[str, float]:
    """Unit exact match and line top-1/3/10 on examples with a target."""
    model.eval()
    hits = {"exact_match": 0, "top1": 0, "top3": 0, "top10": 0}
    n = 0
    for ex in examples:
        if ex.target < 0:
            continue
        feats = featurize(ex.units, ex.confidences, vocab, model.config.confidence)
        logits = model.score_units(feats)
        hits["exact_match"] += int(int(torch.argmax(logits)) == ex.target)
        ranked = sorted(line_scores(logits, feats["lines"]).items(), key=lambda kv: -kv[1])
        lines = [line for line, _ in ranked]
        gold = set(ex.gold_lines)
        for k in (1, 3, 10):
            hits[f"top{k}"] += int(bool(gold & set(lines[:k])))
        n += 1
    return {k: v / max(1, n) for k, v in hits.items()} | {"n": n}


def train(
    train_examples: Sequence[Example],
    val_examples: Sequence[Example],
    model_config: ModelConfig,
    cfg: TrainConfig = TrainConfig(),
    log: Callable[[str], None] = print,
) -> Checkpoint:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    torch.set_num_threads(cfg.threads)
    usable = [ex for ex in train_examples if ex.target >= 0]
    if not usable:
        raise ValueError("no training example has a buggy unit; nothing to learn from")
    if not any(ex.target >= 0 for ex in val_examples):
        raise ValueError("no validation example has a buggy unit; the best checkpoint could not be chosen")
    vocab = Vocabulary.build((ex.units for ex in usable), min_count=cfg.min_count)
    items = [(featurize(ex.units, ex.confidences, vocab, model_config.confidence), ex.target) for ex in usable]
    model = DiagnosticModel(model_config, len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    start = time.monotonic()
    initial = evaluate_examples(model, val_examples, vocab)
    best = Checkpoint(model_config, vocab, _state(model), {"val": initial, "epoch": 0})
    log(f"epoch 0: val {_fmt(initial)}")
    history = [{"epoch": 0, **initial}]
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        total, steps = 0.0, 0
        for batch in _batches(items, cfg.batch_size, rng):
            cropped = [_window(f, t, model_config.max_units, rng) for f, t in batch]
            inputs = collate([f for f, _ in cropped])
            logits = model(inputs["tokens"], inputs["types"], inputs["conf"], inputs["mask"])
            loss = loss_fn(logits, torch.tensor([t for _, t in cropped]))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total += loss.item()
            steps += 1
        metrics = evaluate_examples(model, val_examples, vocab)
        history.append({"epoch": epoch, "train_loss": total / max(1, steps), **metrics})
        log(f"epoch {epoch}: loss {total / max(1, steps):.3f} val {_fmt(metrics)}")
        if metrics["exact_match"] > best.metrics["val"]["exact_match"] or best.metrics["epoch"] == 0:
            best = Checkpoint(model_config, vocab, _state(model), {"val": metrics, "epoch": epoch})
        if cfg.time_budget_s is not None and time.monotonic() - start > cfg.time_budget_s:
            log(f"time budget of {cfg.time_budget_s:.0f}s reached after epoch {epoch}")
            break
    best.training = {"train_config": asdict(cfg), "history": history, "train_examples": len(usable),
                     "val_examples": initial["n"], "seconds": round(time.monotonic() - start, 1)}
    return best


def _state(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _fmt(m: dict) -> str:
    return " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items())
