"""`pinpoint-lab train diagnostic|fusion-data` and `pinpoint-lab bench lines|diagnostic|retrieval|localize|fusion`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pinpoint.environments.cli import run_guarded
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import executor_args, executor_for

TRAIN_HELP = "train the FLARE diagnostic model (CPU; scores are cached)"
LINES_HELP = "top-1/3/10 line accuracy vs baselines on held-out bugs"
SPEED_HELP = "diagnostic inference time on a 500-line file vs a test run"
LOCALIZE_HELP = ("every signal alone and fused on SWE-bench rows (issue text; + oracle failing tests in the "
                 "instance container): file/function/line hits vs BM25 and grep")
FUSION_HELP = ("the learned fusion on cached `bench localize` rows it never trained on (leave one repository out; "
               "a date split) beside every signal and reciprocal rank")
RETRIEVAL_HELP = "issue-text retrieval on SWE-bench rows: file Acc@k and line Hit@k vs grep"
FUSION_DATA_HELP = ("synthetic bugs in the offline repositories, run in their instance boxes with every oracle signal: "
                    "the learned fusion's training corpus; then its leave-one-repository-out table on the dev rows")


def register(bench: argparse._SubParsersAction, train: argparse._SubParsersAction) -> None:
    """Add the localization benches and trainers to the lab's `bench` and `train` groups."""
    for group, name, help_text, add in ((train, "diagnostic", TRAIN_HELP, _train_args),
                                        (train, "fusion-data", FUSION_DATA_HELP, _fusion_data_args),
                                        (bench, "lines", LINES_HELP, _lines_args),
                                        (bench, "diagnostic", SPEED_HELP, _speed_args),
                                        (bench, "retrieval", RETRIEVAL_HELP, _retrieval_args),
                                        (bench, "localize", LOCALIZE_HELP, _localize_args),
                                        (bench, "fusion", FUSION_HELP, _fusion_args)):
        add(group.add_parser(name, help=help_text))


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", choices=["small", "paper"], default="small")
    p.add_argument("--confidence", choices=["sum", "mean", "length", "all", "all+shift"], default=None,
                   help="confidence variant(s) the model reads (default: the config's); `all+shift` adds how much "
                        "reading the task's description moved each unit's confidence")
    p.add_argument("--out", type=Path, default=None, help="checkpoint path (default lab/results/checkpoints/diagnostic-CONFIG.pt)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--lr", type=float, default=None, help="default 1e-4 (paper, and --init-from) / 1e-3 (small)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget", type=float, default=None, help="stop after the epoch that passes N seconds")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--token-dropout", type=float, default=None,
                   help="chance an identifier or number is hidden in training (default: TrainConfig's)")
    p.add_argument("--line-loss", type=float, default=None, help="weight of the line-level loss (default: TrainConfig's)")
    p.add_argument("--ema", type=float, default=None, help="weight-average decay per step, 0 = off (default: TrainConfig's)")
    p.add_argument("--cached-only", action="store_true",
                   help="train on the programs whose confidences are already cached (no LLM scoring)")
    p.add_argument("--device", default="cpu", help="torch device to train on, e.g. cuda (default cpu)")
    p.add_argument("--pool", action="append", default=[], metavar="NAME=N", type=_pool_size,
                   help="take N programs from a training pool instead of the recipe's count; NAME is one of "
                        f"{', '.join(POOLS)}; `repository` (functions of the offline repositories, files SWE-bench "
                        "touches left out) is 0 unless given; repeatable")
    p.add_argument("--init-from", type=Path, default=None, metavar="CHECKPOINT",
                   help="start from this checkpoint's weights, keeping its config and vocabulary (fine-tuning, e.g. "
                        "on `--pool repository=N` alone; needs --out); --config and --confidence do not apply")
    p.add_argument("--save-examples", type=Path, default=None,
                   help="build the scored train/validation examples, write them here and stop (to train elsewhere)")
    p.add_argument("--examples", type=Path, default=None,
                   help="train on examples written by --save-examples instead of building them (no scorer needed)")
    p.set_defaults(func=_train)


def _lines_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=Path, default=None)
    p.add_argument("--sets", default="humanevalfix,humanevalfix_docs,pdb_multi,condefects",
                   help="humanevalfix_docs: HumanEvalFix with each function's docstring read before its code")
    p.add_argument("--limit", type=int, default=None, help="at most N programs per set (first N, fixed order)")
    p.add_argument("--no-sbfl", action="store_true", help="skip running HumanEvalFix's tests")
    p.add_argument("--repair-sets", default="humanevalfix_docs",
                   help="sets that also get the repair-likelihood rows (the LLM scores each line's one-edit repairs: "
                        "about 20 CPU s per HumanEvalFix program, cached); empty for none")
    p.add_argument("--repair-top", type=int, default=None, metavar="N",
                   help="score repairs only on the diagnostic's top N lines, description read first (what "
                        "agent.repair does; a fraction of the cost)")
    p.add_argument("--json", type=Path, default=None, help="also write the table as JSON here")
    p.set_defaults(func=_eval)


def _retrieval_args(p: argparse.ArgumentParser) -> None:
    from pinpoint.swebench_eval.cli import dataset_args

    dataset_args(p)
    p.add_argument("--limit", type=int, help="at most this many rows")
    p.add_argument("--every", type=int, help="take every N-th row (a sample across repositories)")
    p.add_argument("--json", help="also write per-row results and totals to this file")
    p.add_argument("--quiet", action="store_true", help="only the table")
    p.set_defaults(func=_retrieval)


def _retrieval(args) -> int:
    from pinpoint.swebench_eval.cli import selection_from_args

    from pinpoint_lab.localization.retrieval_bench import evaluate, format_table

    instances = selection_from_args(args).instances
    if not instances:
        raise UsageError("no SWE-bench rows with an offline repository source (see --repos-dir)")
    result = evaluate(instances, log=(lambda _: None) if args.quiet else print)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def _localize_args(p: argparse.ArgumentParser) -> None:
    from pinpoint.swebench_eval.cli import dataset_args

    dataset_args(p)
    p.add_argument("--limit", type=int, help="at most this many rows")
    p.add_argument("--every", type=int, help="take every N-th row (a sample across repositories)")
    p.add_argument("--settings", default="issue,oracle", help="issue, oracle, or both (default)")
    p.add_argument("--budget", type=float, default=300.0, help="seconds for each traced test run (default 300)")
    p.add_argument("--cache", type=Path, help="per-row results (default lab/results/localize, committed, so a later "
                   "session resumes); a run resumes")
    p.add_argument("--json", type=Path, help="also write every row and the totals here")
    p.add_argument("--mbfl", action="store_true", help="oracle rows also run the targeted execution signals "
                   "(MBFL, predicate switching, insertion points; each alone, as the spectrum's tie-break and fused: "
                   "mbfl, predicates, insertion, spectrum_mbfl/ps/ins/split, fused_split/ps/ins/all/...; cached in "
                   "<cache>/oracle-mbfl-v<N>)")
    p.add_argument("--peer", action="append", choices=PEERS, default=[],
                   help="oracle rows also get another tool's ranking as a baseline column, scored as every signal "
                   "(fauxpy: FauxPy's SBFL in the same box, its rows cached in lab/results/fauxpy-peer/rows; a row it "
                   "cannot run on is a miss, with why); repeatable")
    p.add_argument("--workers", type=int, default=1, help="rows computed at once (default 1: each row's costs are "
                   "measured alone)")
    executor_args(p)
    p.set_defaults(func=_localize)


#: `bench localize --peer` names
PEERS = ("fauxpy",)


def _peers(names: list[str]) -> list:
    """The peers asked for, each once (their modules load only when asked)."""
    from pinpoint_lab.localization import fauxpy_peer

    known = {"fauxpy": fauxpy_peer.PEER}
    return [known[name] for name in dict.fromkeys(names)]


def _localize(args) -> int:
    from pinpoint.swebench_eval.cli import selection_from_args

    from pinpoint_lab.localization import localize_bench as bench

    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not settings or set(settings) - set(bench.SETTINGS):
        raise UsageError(f"--settings {args.settings!r}: expected issue, oracle or issue,oracle")
    if args.peer and "oracle" not in settings:
        raise UsageError("--peer adds a column to the oracle rows: add oracle to --settings")
    instances = selection_from_args(args).instances
    if not instances:
        raise UsageError("no SWE-bench rows with an offline repository source (see --repos-dir)")
    peers = _peers(args.peer)
    report = {}
    with executor_for(args.backend, args.address, args.workers) as executor:
        for setting, rows in bench.setting_rows(instances, settings, args.cache or bench.ROWS_DIR, args.budget,
                                                log=_log, mbfl=args.mbfl, executor=executor, peers=peers):
            print(bench.format_table(setting, rows))
            print(bench.per_repo(rows))
            report[setting] = {"rows": rows, "totals": bench.totals(rows)}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def _fusion_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--settings", default="issue,oracle", help="issue, oracle, or both (default)")
    p.add_argument("--cache", type=Path, help="the rows `bench localize` cached (default lab/results/localize)")
    p.add_argument("--save", action="store_true",
                   help="then train on every row of each setting and write lab/results/checkpoints/fusion-<setting>.json "
                   "(copy it to localization/checkpoints to ship it)")
    p.set_defaults(func=_fusion)


def _fusion(args) -> int:
    from pinpoint_lab.localization import localize_bench as bench
    from pinpoint_lab.paths import results_dir

    cache = args.cache or bench.ROWS_DIR
    for setting in [s.strip() for s in args.settings.split(",") if s.strip()]:
        if setting not in bench.SETTINGS:
            raise UsageError(f"--settings {args.settings!r}: expected issue, oracle or issue,oracle")
        rows = bench.cached_folder(cache, setting)
        print(bench.fusion_report(setting, rows), end="\n\n")
        if args.save:
            out = results_dir() / "checkpoints" / f"fusion-{setting}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            model = bench.train_shipped(rows, setting, out)
            print(f"wrote {out}: trained on {model.trained_on}")
    return 0


def _fusion_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repos", nargs="+", metavar="OWNER/NAME", default=[],
                   help="repositories to mutate (offline ones with dev rows), in turn")
    p.add_argument("--per-repo", type=int, default=100, help="kept mutants wanted per repository (default 100)")
    p.add_argument("--budget-s", type=float, default=1800.0,
                   help="wall seconds per repository for screening and running mutants (default 1800)")
    p.add_argument("--mbfl", action="store_true", help="kept mutants also run MBFL, predicate switching and insertion points (as `bench localize --mbfl`; slower)")
    p.add_argument("--out", type=Path, help="the corpus folder (default lab/results/fusion-data, committed); a run "
                   "resumes")
    p.add_argument("--dev-cache", type=Path, help="the `bench localize` rows validated on (default lab/results/localize)")
    p.add_argument("--json", type=Path, help="also write the validation table here")
    p.set_defaults(func=_fusion_data)


def _fusion_data(args) -> int:
    from pinpoint.swebench_eval.datasets import load_instances

    from pinpoint_lab.localization import fusion_data as corpus
    from pinpoint_lab.localization import localize_bench as bench

    if args.per_repo < 1 or args.budget_s <= 0:
        raise UsageError("--per-repo and --budget-s must be positive")
    dev = load_instances()
    unknown = [r for r in args.repos if not any(i.repo == r for i in dev)]
    if unknown:
        raise UsageError(f"--repos {' '.join(unknown)}: no dev rows for it (expected OWNER/NAME, e.g. psf/requests)")
    config = corpus.CorpusConfig(per_repo=args.per_repo, budget_s=args.budget_s, mbfl=args.mbfl)
    out = args.out or corpus.CORPUS_DIR
    for repo in args.repos:
        print(corpus.build_repo(repo, [i for i in dev if i.repo == repo], config, out, log=_log).summary(), flush=True)
    rows = corpus.corpus_rows(out)
    print(corpus.corpus_summary(out))
    if rows:
        report = corpus.validate(rows, bench.cached_folder(args.dev_cache or bench.ROWS_DIR, "oracle"))
        print(corpus.format_validation(report))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _speed_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lines", type=int, default=500)
    p.add_argument("--checkpoint", type=Path, default=None)
    p.set_defaults(func=_bench)


#: `--pool` names and the `DataConfig` count each one sets
POOLS = {"bigcodebench": "bigcodebench_bases", "livecodebench": "livecodebench_bases", "debugbench": "debugbench",
         "condefects": "condefects_train", "repository": "repository_bases"}


def _pool_size(text: str) -> tuple[str, int]:
    name, _, count = text.partition("=")
    if name not in POOLS or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=N with NAME one of {', '.join(POOLS)}, got {text!r}")
    return POOLS[name], int(count)


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _train(args) -> int:
    from pinpoint.localization.model import Checkpoint

    from pinpoint_lab.localization.examples import DataConfig, load_examples, save_examples
    from pinpoint_lab.localization.training import (
        TrainConfig,
        model_config_for,
        scored_splits,
        train_diagnostic,
    )
    from pinpoint_lab.paths import results_dir

    init = None
    if args.init_from:
        if not args.out:
            raise UsageError("--init-from needs --out (the checkpoint it starts from stays as it is)")
        try:
            init = Checkpoint.load(args.init_from)  # before scoring: a bad path should not cost an hour first
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    cfg = DataConfig(seed=args.seed, **dict(args.pool))
    if args.examples:
        try:
            saved = load_examples(args.examples)
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        splits, cfg = saved["splits"], DataConfig(**saved["data_config"])
        _log(f"{args.examples}: " + ", ".join(f"{len(v)} {k} examples" for k, v in splits.items()))
    else:
        splits = scored_splits(cfg, _log, args.cached_only)
    if args.save_examples:
        save_examples(args.save_examples, splits, cfg)
        print(json.dumps({"examples": str(args.save_examples), **{k: len(v) for k, v in splits.items()}}))
        return 0
    lr = args.lr if args.lr is not None else (1e-4 if init or args.config == "paper" else 1e-3)
    tcfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=lr, seed=args.seed,
                       time_budget_s=args.time_budget, threads=args.threads, device=args.device,
                       **{k: v for k in ("token_dropout", "line_loss", "ema") if (v := getattr(args, k)) is not None})
    checkpoint = train_diagnostic(splits, cfg, model_config_for(args.config, args.confidence, init), tcfg, init=init,
                                  init_from=args.init_from, cached_only=args.cached_only, log=_log)
    out = args.out or results_dir() / "checkpoints" / f"diagnostic-{args.config}.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(out)
    print(json.dumps({"checkpoint": str(out), "best_epoch": checkpoint.metrics["epoch"], "val": checkpoint.metrics["val"]}))
    return 0


def _eval(args) -> int:
    from pinpoint.localization.diagnostic import DEFAULT_CHECKPOINT
    from pinpoint.localization.model import Checkpoint
    from pinpoint.localization.scorer import LocalScorer

    from pinpoint_lab.localization.evaluation import format_table, line_accuracy
    from pinpoint_lab.localization.examples import EVALUATION_SETS, DataConfig, evaluation_programs

    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    repair_sets = {s.strip() for s in args.repair_sets.split(",") if s.strip()}
    unknown = [s for s in [*sets, *repair_sets] if s not in EVALUATION_SETS]
    if unknown:
        raise UsageError(f"unknown evaluation set(s) {unknown}; choose from {list(EVALUATION_SETS)}")
    if args.repair_top is not None and args.repair_top < 1:
        raise UsageError(f"--repair-top must be at least 1, got {args.repair_top}")
    checkpoint_path = args.checkpoint or DEFAULT_CHECKPOINT
    try:
        checkpoint = Checkpoint.load(checkpoint_path)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    scorer = LocalScorer()
    table = {}
    for name in sets:
        programs = evaluation_programs(name, DataConfig())
        if args.limit:
            programs = programs[: args.limit]
        _log(f"{name}: {len(programs)} programs (scoring, cached)")
        table[name] = line_accuracy(name, programs, checkpoint, scorer, repair=name in repair_sets,
                                    repair_top=args.repair_top, sbfl=not args.no_sbfl, log=_log)
    print(f"checkpoint: {checkpoint_path}")
    print(format_table(table))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"checkpoint": str(checkpoint_path), "results": table}, indent=2))
    return 0


def _bench(args) -> int:
    from pinpoint_lab.localization.diagnostic_bench import run_benchmark

    print(run_benchmark(lines=args.lines, checkpoint=args.checkpoint))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m pinpoint_lab.localization.cli diagnostic ...`: training alone, for a machine that has torch but not
    the agent's dependencies (a GPU machine training from `train diagnostic --examples`)."""
    parser = argparse.ArgumentParser(prog="python -m pinpoint_lab.localization.cli")
    train = parser.add_subparsers(dest="train_command", required=True)
    _train_args(train.add_parser("diagnostic", help=TRAIN_HELP))
    return run_guarded(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
