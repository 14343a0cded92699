"""Training the diagnostic model: cross-entropy over unit positions, target the first buggy unit.

Best checkpoint by validation exact match (the argmax unit is the first buggy unit). Seeds are fixed; data comes
from `examples` (synthetic bugs over correct code plus real labelled bugs), split by base task.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from pinpoint.localization.features import Vocabulary, collate, featurize
from pinpoint.localization.model import CONFIGS, Checkpoint, DiagnosticModel, ModelConfig, line_scores
from pinpoint.localization.scorer import LocalScorer
from pinpoint.localization.units import UNIT_TYPES
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from pinpoint_lab.localization.examples import (
    DataConfig,
    Example,
    build_examples,
    build_synthetic,
    training_programs,
)


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
    #: where the model trains ("cpu", "cuda", ...); checkpoints always hold CPU tensors
    device: str = "cpu"
    #: chance that an identifier's or number's token is replaced by its type's unknown token in training, so the
    #: model cannot lean on the names of the training programs (held-out code names things differently)
    token_dropout: float = 0.15
    #: weight of a second cross-entropy over line scores (max over a line's units, as at inference), target the
    #: target unit's line: line top-1 is what localization reports, and it does not care which unit of the line wins
    line_loss: float = 1.0
    #: when above 0, validate and keep an exponential moving average of the weights (decay per step) instead of the
    #: last step's weights: smoother than one step's, so the validation pick is less a matter of luck
    ema: float = 0.99


def _window(feats: dict[str, torch.Tensor], target: int, size: int, rng: random.Random) -> tuple[dict, int]:
    """Crop a long program to `size` units around its target (training only; inference reads all windows)."""
    n = len(feats["tokens"])
    if n <= size:
        return feats, target
    lo = rng.randint(max(0, target - size + 1), min(target, n - size))
    return {k: v[lo : lo + size] for k, v in feats.items()}, target - lo


#: the unit types token dropout may hide (their names and values differ between programs)
_DROPPABLE_TYPES = torch.tensor([UNIT_TYPES.index(t) for t in ("identifier", "integer", "float")])


def _drop_tokens(tokens: torch.Tensor, types: torch.Tensor, mask: torch.Tensor, unknown_of_type: torch.Tensor,
                 p: float) -> torch.Tensor:
    """Token ids with each real identifier or number replaced by its type's unknown token with probability `p`."""
    if p <= 0:
        return tokens
    droppable = torch.isin(types, _DROPPABLE_TYPES.to(types.device))
    drop = (torch.rand(tokens.shape, device=tokens.device) < p) & mask & droppable
    return torch.where(drop, unknown_of_type[types], tokens)


def _line_loss(logits: torch.Tensor, lines: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the lines of each program, a line's logit being the max over its units."""
    lines = lines.masked_fill(~mask, 0)  # padding joins line 0, which holds no unit (lines count from 1)
    pooled = torch.full((logits.shape[0], int(lines.max()) + 1), float("-inf"), device=logits.device).scatter_reduce(
        1, lines, logits, reduce="amax")
    target_lines = lines.gather(1, targets[:, None])[:, 0]
    present = torch.isfinite(pooled)
    return nn.functional.cross_entropy(pooled.masked_fill(~present, -1e9), target_lines)


def _batches(items: list, batch_size: int, rng: random.Random) -> list[list]:
    """Shuffled batches of programs of similar length: a random batch pads every program to its longest one, which
    made epochs over 4x slower. Sorting within shuffled pools of 50 batches keeps the batches' order random."""
    order = list(range(len(items)))
    rng.shuffle(order)
    pool = batch_size * 50
    batches = []
    for k in range(0, len(order), pool):
        chunk = sorted(order[k : k + pool], key=lambda i: len(items[i][0]["tokens"]))
        batches += [[items[i] for i in chunk[j : j + batch_size]] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


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
    init: Checkpoint | None = None,
) -> Checkpoint:
    """Train from scratch, or from `init`'s weights and vocabulary (fine-tuning; `model_config` must be its config:
    a new vocabulary or shape would void the weights). Its first candidate is `init` itself, scored on `val_examples`,
    so fine-tuning that does not help keeps the weights it started from."""
    if init and init.config != model_config:
        raise ValueError("fine-tuning keeps the checkpoint's config; pass init.config as model_config")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    torch.set_num_threads(cfg.threads)
    usable = [ex for ex in train_examples if ex.target >= 0]
    if not usable:
        raise ValueError("no training example has a buggy unit; nothing to learn from")
    if not any(ex.target >= 0 for ex in val_examples):
        raise ValueError("no validation example has a buggy unit; the best checkpoint could not be chosen")
    vocab = init.vocab if init else Vocabulary.build((ex.units for ex in usable), min_count=cfg.min_count)
    items = [(featurize(ex.units, ex.confidences, vocab, model_config.confidence), ex.target) for ex in usable]
    device = torch.device(cfg.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # ~3e-4 relative error in matmuls: far below what training moves
    model = DiagnosticModel(model_config, len(vocab))
    if init:
        model.load_state_dict(init.state_dict)
    model = model.to(device)
    unknown_of_type = torch.tensor([vocab.index[f"<unk:{t}>"] for t in UNIT_TYPES], device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema)) if cfg.ema > 0 else None
    scored = averaged.module if averaged else model
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
            inputs = {k: v.to(device) for k, v in collate([f for f, _ in cropped]).items()}
            tokens = _drop_tokens(inputs["tokens"], inputs["types"], inputs["mask"], unknown_of_type, cfg.token_dropout)
            logits = model(tokens, inputs["types"], inputs["conf"], inputs["mask"])
            targets = torch.tensor([t for _, t in cropped], device=device)
            loss = loss_fn(logits, targets)
            if cfg.line_loss > 0:
                loss = loss + cfg.line_loss * _line_loss(logits, inputs["lines"], inputs["mask"], targets)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if averaged:
                averaged.update_parameters(model)
            total += loss.item()
            steps += 1
        metrics = evaluate_examples(scored, val_examples, vocab)
        history.append({"epoch": epoch, "train_loss": total / max(1, steps), **metrics})
        log(f"epoch {epoch}: loss {total / max(1, steps):.3f} val {_fmt(metrics)}")
        if metrics["exact_match"] > best.metrics["val"]["exact_match"] or (best.metrics["epoch"] == 0 and not init):
            best = Checkpoint(model_config, vocab, _state(scored), {"val": metrics, "epoch": epoch})
        if cfg.time_budget_s is not None and time.monotonic() - start > cfg.time_budget_s:
            log(f"time budget of {cfg.time_budget_s:.0f}s reached after epoch {epoch}")
            break
    best.training = {"train_config": asdict(cfg), "history": history, "train_examples": len(usable),
                     "val_examples": initial["n"], "seconds": round(time.monotonic() - start, 1)}
    return best


def scored_splits(cfg: DataConfig, log: Callable[[str], None] = print,
                  cached_only: bool = False) -> dict[str, list[Example]]:
    """The train and validation examples of `cfg` (`pinpoint-lab train diagnostic`): synthetic bugs over each split's
    correct programs plus its real bugs, every program scored by the local scorer (cached)."""
    scorer = LocalScorer()
    splits = {}
    for split in ("train", "val"):
        bases, real = training_programs(split, cfg)
        log(f"{split}: {len(bases)} correct programs to mutate, {len(real)} real bugs (scoring, cached)")
        splits[split] = build_synthetic(bases, scorer, cfg, log, cached_only) + build_examples(
            real, scorer, log, cached_only)
        log(f"{split}: {len(splits[split])} examples")
    return splits


def model_config_for(name: str, confidence: str | None = None, init: Checkpoint | None = None) -> ModelConfig:
    """What a run trains: `init`'s own config when fine-tuning (its weights need it), else the named config,
    reading the `confidence` variant(s) when given."""
    model_config = init.config if init else CONFIGS[name]
    if confidence and not init:
        model_config = replace(model_config, confidence=confidence)
    return model_config


def train_diagnostic(splits: dict[str, list[Example]], data_config: DataConfig, model_config: ModelConfig,
                     tcfg: TrainConfig, *, init: Checkpoint | None = None, init_from: Path | None = None,
                     cached_only: bool = False, log: Callable[[str], None] = print) -> Checkpoint:
    """`train` on the splits; the checkpoint records the data it was trained from (`pinpoint-lab train diagnostic`)."""
    checkpoint = train(splits["train"], splits["val"], model_config, tcfg, log=log, init=init)
    checkpoint.training["data_config"] = data_config.__dict__
    checkpoint.training["cached_only"] = cached_only
    checkpoint.training["device"] = tcfg.device
    checkpoint.training["init_from"] = str(init_from) if init else None
    return checkpoint


def _state(model: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _fmt(m: dict) -> str:
    return " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items())
