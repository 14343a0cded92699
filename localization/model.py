"""The FLARE diagnostic model: per-unit suspiciousness from token identity, syntactic type and LLM confidence.

token embedding ⊕ type embedding ⊕ projected confidence → bidirectional Transformer encoder → linear head per unit;
a line's score is the max over its units. Checkpoints carry the config, the vocabulary and the metrics they scored.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from pinpoint.environments.errors import UsageError
from pinpoint.localization.features import Vocabulary, conf_features
from pinpoint.localization.units import UNIT_TYPES
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 2
    heads: int = 4
    token_dim: int = 96
    type_dim: int = 32
    conf_dim: int = 32
    ff_dim: int = 256
    dropout: float = 0.1
    #: longest unit sequence one forward pass sees; longer programs are read in overlapping windows
    max_units: int = 768
    #: which confidence the model reads: one of `confidence.VARIANTS` (the paper's is `sum`) or `all`
    confidence: str = "all"

    @property
    def width(self) -> int:
        return self.token_dim + self.type_dim + self.conf_dim


#: the paper's configuration (6 layers, 8 heads, 256 + 128 + 128 = 512)
PAPER = ModelConfig(layers=6, heads=8, token_dim=256, type_dim=128, conf_dim=128, ff_dim=2048, max_units=1024)
#: what trains on two busy CPU cores in minutes
SMALL = ModelConfig()
CONFIGS = {"paper": PAPER, "small": SMALL}


class DiagnosticModel(nn.Module):
    def __init__(self, config: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = config
        self.token_emb = nn.Embedding(vocab_size, config.token_dim, padding_idx=0)
        self.type_emb = nn.Embedding(len(UNIT_TYPES), config.type_dim)
        self.conf_proj = nn.Sequential(nn.Linear(conf_features(config.confidence), config.conf_dim), nn.GELU(), nn.Linear(config.conf_dim, config.conf_dim))
        layer = nn.TransformerEncoderLayer(
            config.width, config.heads, config.ff_dim, config.dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, 1)
        self.register_buffer("positions", _sinusoid(config.max_units, config.width), persistent=False)

    def forward(self, tokens: torch.Tensor, types: torch.Tensor, conf: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit logits [batch, units]; padding positions get -inf."""
        x = torch.cat([self.token_emb(tokens), self.type_emb(types), self.conf_proj(conf)], dim=-1)
        pos = self.positions if x.shape[1] <= len(self.positions) else _sinusoid(x.shape[1], x.shape[-1]).to(x.device)
        x = x + pos[: x.shape[1]]
        x = self.encoder(x, src_key_padding_mask=~mask)
        logits = self.head(self.norm(x)).squeeze(-1)
        return logits.masked_fill(~mask, float("-inf"))

    @torch.no_grad()
    def score_units(self, feats: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits for every unit of one program of any length: overlapping windows, each unit from the window
        where it sits farthest from an edge."""
        device = self.head.weight.device
        feats = {k: v.to(device) for k, v in feats.items()}
        n = len(feats["tokens"])
        size = self.config.max_units
        out = torch.full((n,), float("-inf"))
        best_margin = torch.full((n,), -1)
        starts = [0] if n <= size else list(range(0, n - size, size // 2)) + [n - size]
        for s in starts:
            sl = slice(s, min(n, s + size))
            m = torch.ones(1, sl.stop - s, dtype=torch.bool, device=device)
            logits = self(feats["tokens"][None, sl], feats["types"][None, sl], feats["conf"][None, sl], m)[0].cpu()
            idx = torch.arange(s, sl.stop)
            left = idx - s if s > 0 else torch.full_like(idx, n)  # the file's own ends are no window edges
            right = sl.stop - 1 - idx if sl.stop < n else torch.full_like(idx, n)
            margin = torch.minimum(left, right)
            better = margin > best_margin[sl]
            out[sl] = torch.where(better, logits, out[sl])
            best_margin[sl] = torch.where(better, margin, best_margin[sl])
        return out


def line_scores(unit_logits: torch.Tensor, unit_lines: torch.Tensor) -> dict[int, float]:
    """A line's score is the max over its units."""
    lines = torch.unique(unit_lines)
    pooled = torch.full((int(unit_lines.max()) + 1,), float("-inf")).scatter_reduce(
        0, unit_lines, unit_logits, reduce="amax"
    )
    return {int(line): float(pooled[line]) for line in lines}


def _sinusoid(length: int, width: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


@dataclass
class Checkpoint:
    config: ModelConfig
    vocab: Vocabulary
    state_dict: dict
    metrics: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)

    def model(self) -> DiagnosticModel:
        model = DiagnosticModel(self.config, len(self.vocab))
        model.load_state_dict(self.state_dict)
        return model.eval()

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(
            {
                "format": "pinpoint-diagnostic/1",
                "config": asdict(self.config),
                "vocab": self.vocab.tokens,
                "state_dict": {k: v.half() if v.is_floating_point() else v for k, v in self.state_dict.items()},
                "metrics": self.metrics,
                "training": self.training,
            },
            tmp,
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        try:
            blob = torch.load(Path(path), map_location="cpu", weights_only=True)
        except FileNotFoundError as exc:
            raise UsageError(
                f"no diagnostic checkpoint at {path}; train one with `pinpoint-lab train diagnostic`"
            ) from exc
        except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            raise UsageError(f"{path} is not a pinpoint diagnostic checkpoint ({exc})") from exc
        if not isinstance(blob, dict) or blob.get("format") != "pinpoint-diagnostic/1":
            raise UsageError(f"{path} is not a pinpoint diagnostic checkpoint")
        state = {k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()}
        return cls(ModelConfig(**blob["config"]), Vocabulary(blob["vocab"]), state, blob["metrics"], blob["training"])
