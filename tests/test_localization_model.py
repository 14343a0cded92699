"""The diagnostic model: shapes, padding, line max-pooling, long inputs, checkpoints, and that training learns."""

from dataclasses import replace

import pytest
import torch
from pinpoint.localization.confidence import TokenLogprob
from pinpoint.localization.features import Vocabulary, collate, featurize
from pinpoint.localization.model import PAPER, Checkpoint, DiagnosticModel, ModelConfig, line_scores
from pinpoint.localization.units import UNIT_TYPES, lexical_units
from pinpoint_lab.localization.cli import main as localization_cli
from pinpoint_lab.localization.corpora import bigcodebench_solutions
from pinpoint_lab.localization.examples import (
    DataConfig,
    Example,
    example_from,
    load_examples,
    mutant_programs,
    save_examples,
)
from pinpoint_lab.localization.training import TrainConfig, _drop_tokens, _line_loss, evaluate_examples, train

TINY = ModelConfig(layers=1, heads=2, token_dim=16, type_dim=8, conf_dim=8, ff_dim=32, max_units=64, confidence="all")


def _feats(code: str, vocab: Vocabulary):
    units = lexical_units(code)
    values = [-1.0 - i % 5 if i % 3 else None for i in range(len(units))]
    return featurize(units, {"sum": values, "mean": values, "length": values}, vocab, "all")


def test_forward_gives_one_logit_per_unit_and_masks_padding():
    programs = [p.code for p in bigcodebench_solutions()[:2]]
    vocab = Vocabulary.build(lexical_units(c) for c in programs)
    batch = collate([_feats(c[:300], vocab) for c in programs])
    model = DiagnosticModel(TINY, len(vocab)).eval()
    logits = model(batch["tokens"], batch["types"], batch["conf"], batch["mask"])
    assert logits.shape == batch["tokens"].shape
    assert torch.isinf(logits[~batch["mask"]]).all() and torch.isfinite(logits[batch["mask"]]).all()
    assert PAPER.width == 512 and (PAPER.layers, PAPER.heads) == (6, 8)


def test_line_score_is_the_max_over_its_units():
    logits = torch.tensor([0.25, 2.0, -1.0, 0.5, 0.75])
    lines = torch.tensor([1, 1, 2, 4, 4])
    assert line_scores(logits, lines) == {1: 2.0, 2: -1.0, 4: 0.75}


def test_long_programs_are_read_in_windows_that_cover_every_unit():
    code = "\n".join(p.code for p in bigcodebench_solutions()[:6])
    vocab = Vocabulary.build([lexical_units(code)])
    feats = _feats(code, vocab)
    assert len(feats["tokens"]) > 3 * TINY.max_units
    model = DiagnosticModel(TINY, len(vocab)).eval()
    logits = model.score_units(feats)
    assert logits.shape == feats["tokens"].shape and torch.isfinite(logits).all()
    short = {k: v[:TINY.max_units] for k, v in feats.items()}
    m = torch.ones(1, TINY.max_units, dtype=torch.bool)
    direct = model(short["tokens"][None], short["types"][None], short["conf"][None], m)[0]
    assert torch.allclose(model.score_units(short), direct, atol=1e-5)


def test_checkpoint_round_trip_keeps_config_vocabulary_and_metrics(tmp_path):
    vocab = Vocabulary.build([lexical_units(bigcodebench_solutions()[0].code)])
    model = DiagnosticModel(TINY, len(vocab)).eval()
    ckpt = Checkpoint(TINY, vocab, model.state_dict(), {"val": {"exact_match": 0.25}, "epoch": 3}, {"note": "x"})
    ckpt.save(tmp_path / "m.pt")
    back = Checkpoint.load(tmp_path / "m.pt")
    assert back.config == TINY and back.vocab.tokens == vocab.tokens
    assert back.metrics["val"]["exact_match"] == 0.25 and back.training == {"note": "x"}
    feats = _feats(bigcodebench_solutions()[0].code[:400], vocab)
    assert torch.allclose(back.model().score_units(feats), model.score_units(feats), atol=2e-2)  # fp16 storage


def _standin_examples(channel: str = "all") -> list[Example]:
    """Real mutants of real code, with stand-in confidences that mark the edited unit (see the test below)."""
    examples = []
    for i, base in enumerate(bigcodebench_solutions()[:40]):
        for program, start, end in mutant_programs(base, 2, seed=i):
            code = program.code
            units = lexical_units(code)
            edited = [u.end > start and u.start < max(end, start + 1) for u in units]
            if channel == "all":
                told, plain = [TokenLogprob(u.start, u.end, -8.0 if e else -0.5) for u, e in zip(units, edited,
                                                                                                  strict=True)], None
            else:
                told = [TokenLogprob(u.start, u.end, -2.0) for u in units]
                plain = [TokenLogprob(u.start, u.end, -0.5 if e else -8.0) for u, e in zip(units, edited, strict=True)]
            target = next(k for k, u in enumerate(units) if u.end > start)
            examples.append(example_from(program, told, target, undescribed=plain))
    return examples


@pytest.mark.parametrize("channel", ["all", "all+shift"])
def test_tiny_training_run_beats_its_start_on_real_mutants(channel):
    """Real code, real mutation operators; the confidence here is a stand-in (the edited unit is improbable), so
    the test checks that training learns to use the confidence channel together with tokens and types. With
    `all+shift` the bug shows only in the shift: every unit is equally probable after the description, and the
    edited one alone was more probable without it."""
    examples = _standin_examples(channel)
    train_set, val_set = examples[:60], examples[60:]
    cfg = TrainConfig(epochs=5, batch_size=8, lr=3e-3, seed=0, ema=0.7)  # 40 steps: a short average
    ckpt = train(train_set, val_set, replace(TINY, confidence=channel), cfg, log=lambda _: None)
    start, best = ckpt.training["history"][0], ckpt.metrics["val"]
    assert best["exact_match"] > start["exact_match"] + 0.2
    assert evaluate_examples(ckpt.model(), val_set, ckpt.vocab)["top1"] >= best["exact_match"]


def test_confidence_features_carry_value_rank_and_missing_flag():
    units = lexical_units("x = 1\n")
    confs = {"sum": [-1.0, None, -3.0], "mean": [-1.0, None, -1.5], "length": [-1.0, None, -3.0]}
    vocab = Vocabulary.build([units], min_count=1)
    one = featurize(units, confs, vocab, "sum")["conf"]
    # value/5, rank among the units (0 = least confident), missing flag
    assert torch.allclose(one, torch.tensor([[-0.2, 0.5, 0.0], [0.0, 1.0, 1.0], [-0.6, 0.0, 0.0]]))
    assert featurize(units, confs, vocab, "all")["conf"].shape == (3, 7)
    shifted = featurize(units, confs | {"shift": [40.0, None, -2.0]}, vocab, "all+shift")["conf"]
    assert shifted.shape == (3, 9)
    assert torch.allclose(shifted[:, 6:8], torch.tensor([[6.0, 0.5], [0.0, 1.0], [-0.4, 0.0]]))  # clipped at +30


def test_token_dropout_hides_only_names_and_numbers_of_real_units():
    units = lexical_units("total = count + 1\n")
    vocab = Vocabulary.build([units], min_count=1)
    batch = collate([featurize(units, {"sum": [-1.0] * len(units)}, vocab, "sum")])
    unknown_of_type = torch.tensor([vocab.index[f"<unk:{t}>"] for t in UNIT_TYPES])
    dropped = _drop_tokens(batch["tokens"], batch["types"], batch["mask"], unknown_of_type, p=1.0)
    assert [vocab.tokens[i] for i in dropped[0]] == ["<unk:identifier>", "=", "<unk:identifier>", "+", "<unk:integer>"]
    assert torch.equal(_drop_tokens(batch["tokens"], batch["types"], batch["mask"], unknown_of_type, p=0.0),
                       batch["tokens"])


def test_line_loss_is_cross_entropy_over_max_pooled_lines():
    logits = torch.tensor([[1.0, 5.0, 0.0, float("-inf")]])
    lines = torch.tensor([[1, 1, 2, 0]])
    mask = torch.tensor([[True, True, True, False]])
    # the target unit (index 2) sits on line 2, whose score is 0.0 against line 1's max of 5.0
    expected = -torch.log_softmax(torch.tensor([5.0, 0.0]), 0)[1]
    assert torch.isclose(_line_loss(logits, lines, mask, torch.tensor([2])), expected)
    # which unit of the gold line is the target does not matter
    assert torch.isclose(_line_loss(logits, lines, mask, torch.tensor([0])),
                         _line_loss(logits, lines, mask, torch.tensor([1])))


def test_saved_examples_train_elsewhere_through_the_cli(tmp_path, capsys):
    """`--save-examples` on the machine with the scorer, `--examples` on another (e.g. one with a GPU): the file
    keeps every example and the data config, and training from it needs no LLM."""
    examples = _standin_examples()
    cfg = DataConfig(seed=3, mutants_per_base=2)
    save_examples(tmp_path / "ex.pkl.gz", {"train": examples[:60], "val": examples[60:]}, cfg)
    back = load_examples(tmp_path / "ex.pkl.gz")
    assert back["data_config"]["mutants_per_base"] == 2
    assert [(e.code, e.target, e.confidences) for e in back["splits"]["train"]] == [
        (e.code, e.target, e.confidences) for e in examples[:60]]
    out = tmp_path / "m.pt"
    # the localization commands alone (`python -m pinpoint_lab.localization.cli`): what a GPU machine without the agent's
    # dependencies runs
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "ex.pkl.gz"), "--epochs", "1", "--out",
                             str(out)]) == 0
    ckpt = Checkpoint.load(out)
    assert ckpt.training["device"] == "cpu" and ckpt.training["data_config"]["seed"] == 3
    assert ckpt.training["train_examples"] == 60


def test_a_file_that_is_not_saved_examples_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "x.pkl.gz").write_bytes(b"not gzip")
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "x.pkl.gz")]) == 2
    assert "is not a pinpoint examples file" in capsys.readouterr().err
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "none.pkl.gz")]) == 2
    assert "no examples at" in capsys.readouterr().err


def test_fine_tuning_starts_from_the_checkpoint_and_keeps_it_unless_validation_improves():
    """`init`: the start is the trained checkpoint (its validation score, not a random model's), its vocabulary
    is kept, and a run that cannot improve on it (lr 0) returns its weights unchanged."""
    examples = _standin_examples()
    train_set, val_set = examples[:60], examples[60:]
    trained = train(train_set, val_set, TINY, TrainConfig(epochs=5, batch_size=8, lr=3e-3, seed=0, ema=0.7),
                    log=lambda _: None)
    tuned = train(train_set, val_set, TINY, TrainConfig(epochs=1, batch_size=8, lr=0.0, seed=1, ema=0.0),
                  log=lambda _: None, init=trained)
    assert tuned.training["history"][0]["exact_match"] == trained.metrics["val"]["exact_match"]
    assert tuned.training["history"][0]["exact_match"] > trained.training["history"][0]["exact_match"] + 0.2
    assert tuned.metrics["epoch"] == 0 and tuned.vocab.tokens == trained.vocab.tokens
    assert all(torch.equal(tuned.state_dict[k], v) for k, v in trained.state_dict.items())
    with pytest.raises(ValueError, match="keeps the checkpoint's config"):
        train(train_set, val_set, replace(TINY, layers=2), TrainConfig(epochs=1), log=lambda _: None, init=trained)


def test_cli_fine_tunes_a_saved_checkpoint_and_refuses_to_overwrite_it(tmp_path, capsys):
    examples = _standin_examples()
    save_examples(tmp_path / "ex.pkl.gz", {"train": examples[:60], "val": examples[60:]}, DataConfig())
    start = tmp_path / "start.pt"
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "ex.pkl.gz"), "--epochs", "1",
                             "--out", str(start)]) == 0
    tuned = tmp_path / "tuned.pt"
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "ex.pkl.gz"), "--epochs", "1",
                             "--init-from", str(start), "--out", str(tuned)]) == 0
    before, after = Checkpoint.load(start), Checkpoint.load(tuned)
    assert after.training["init_from"] == str(start) and after.vocab.tokens == before.vocab.tokens
    assert after.training["train_config"]["lr"] == 1e-4  # fine-tuning's default rate
    capsys.readouterr()
    assert localization_cli(["diagnostic", "--examples", str(tmp_path / "ex.pkl.gz"),
                             "--init-from", str(start)]) == 2
    assert "--init-from needs --out" in capsys.readouterr().err
    assert localization_cli(["diagnostic", "--init-from", str(tmp_path / "none.pt"), "--out", str(tuned)]) == 2
    assert "no diagnostic checkpoint at" in capsys.readouterr().err


def test_pool_sizes_reach_the_data_config_and_unknown_pools_are_rejected(tmp_path, monkeypatch, capsys):
    """`--pool NAME=N` sets that pool's count; with an empty cache and `--cached-only` nothing is scored, so the
    saved file shows the recipe the flags made."""
    monkeypatch.setenv("PINPOINT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ex.pkl.gz"
    assert localization_cli(["diagnostic", "--cached-only", "--save-examples", str(out),
                             "--pool", "bigcodebench=3", "--pool", "livecodebench=0", "--pool", "debugbench=0",
                             "--pool", "condefects=0"]) == 0
    saved = load_examples(out)["data_config"]
    assert (saved["bigcodebench_bases"], saved["livecodebench_bases"], saved["debugbench"],
            saved["condefects_train"], saved["repository_bases"]) == (3, 0, 0, 0, 0)
    with pytest.raises(SystemExit) as exited:
        localization_cli(["diagnostic", "--pool", "github=5"])
    assert exited.value.code == 2 and "NAME one of bigcodebench" in capsys.readouterr().err
