"""`pinpoint rl prepare|rollout|dataset|filter` and `pinpoint bench rl`: arguments and printing only."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pinpoint.agent.commands import set_arg
from pinpoint.environments.cli import (
    BENCH_EXAMPLES,
    BENCH_HELP,
    add_command,
    json_arg,
    print_json,
    subcommand_group,
    workers_arg,
)
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import executor_args
from pinpoint.swebench_eval.cli import instance_arg

ROLLOUT_BACKENDS = ("llama.cpp", "vllm", "sglang", "openai")
SUSPECTS = ("none", "oracle")
POLICY_HELP = ("scripted-gold (a FAKE that replays the reference patch), noop, candidates (no model: edit candidates "
               "at the suspect lines, with --suspects oracle), embedded (the offline SmolLM2), or the URL of "
               "an OpenAI-compatible endpoint (with --model)")


def register(subparsers) -> None:
    rl = subcommand_group(subparsers, "rl", "the RL environment: prepare a tasks file's images, roll out episodes, "
                          "build a training parquet, filter rollouts", RL_EXAMPLES)
    prepare = add_command(rl, "prepare", "build (or find) the image of every task and start its warm container",
                          "pinpoint rl prepare --tasks tasks.jsonl\npinpoint rl prepare --tasks tasks.jsonl "
                          "--suspects oracle")
    _task_args(prepare)
    prepare.add_argument("--suspects", choices=SUSPECTS, default="none",
                         help="oracle: also compute and cache each task's oracle suspects in its box (docs/rl.md), so "
                         "the first resets of `rl rollout --suspects oracle` or a trainer's `suspects: oracle` read "
                         "them")
    prepare.set_defaults(func=_prepare)
    _rollout_parser(rl)
    dataset = add_command(rl, "dataset", "the training parquet of a tasks file, for verl's agent loop and SkyRL",
                          "pinpoint rl dataset --tasks tasks.jsonl -o train.parquet\n"
                          "pinpoint rl dataset --tasks tasks.jsonl -o train.parquet --curriculum rollouts.jsonl")
    _task_args(dataset)
    dataset.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                         help="the training file (.parquet)")
    dataset.add_argument("--curriculum", type=Path, metavar="ROLLOUTS",
                         help="order the tasks easy to hard by their pass rates in this earlier rollout dataset")
    dataset.add_argument("--hardest-first", action="store_true", help="with --curriculum: hard to easy")
    dataset.add_argument("--split", default="train", help="extra_info.split of every row")
    dataset.set_defaults(func=_dataset)
    drop = add_command(rl, "filter", "drop the GRPO groups of a rollout dataset whose rewards are all equal",
                       "pinpoint rl filter rollouts.jsonl -o kept.parquet")
    drop.add_argument("rollouts", type=Path, help="a `pinpoint rl rollout` dataset (.jsonl or .parquet)")
    drop.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                      help="the kept rows (.jsonl or .parquet)")
    drop.set_defaults(func=_filter)
    _synthesize_parser(rl)

    bench = subcommand_group(subparsers, "bench", BENCH_HELP, BENCH_EXAMPLES)
    rl_bench = add_command(bench, "rl", "warm pool vs a fresh container per episode; Ray workers; concurrency",
                           "pinpoint bench rl\npinpoint bench rl -i psf__requests-2317 --no-generator --json > rl.json")
    instance_arg(rl_bench, "the SWE-bench dev row to run episodes on (one; default psf__requests-1142)")
    rl_bench.add_argument("--repeats", type=int, default=30, help="hand-outs and resets timed")
    rl_bench.add_argument("--episodes", type=int, default=12, help="short episodes per throughput figure")
    rl_bench.add_argument("--no-generator", action="store_true", help="skip the embedded-model episodes")
    json_arg(rl_bench)
    rl_bench.set_defaults(func=_bench)


RL_EXAMPLES = """\
pinpoint rl prepare --tasks tasks.jsonl
pinpoint rl rollout --tasks tasks.jsonl --policy embedded -o rollouts.jsonl --samples-per-task 4
pinpoint rl filter rollouts.jsonl -o kept.parquet"""
ROLLOUT_EXAMPLES = """\
pinpoint rl rollout --tasks tasks.jsonl --policy scripted-gold -o rollouts.jsonl
pinpoint rl rollout --tasks tasks.jsonl --policy http://localhost:8000/v1 --model Qwen2.5-Coder-7B-Instruct \\
    --model-backend vllm --samples-per-task 8 -j 2 --concurrency 4 -o rollouts.parquet
pinpoint rl rollout --tasks tasks.jsonl --policy embedded --backend ray -j 8 --set llm.temperature=0.7 \\
    -o rollouts.jsonl"""


def _synthesize_parser(rl) -> None:
    """`pinpoint rl synthesize`'s arguments."""
    synth = add_command(rl, "synthesize", "RL tasks from working repositories: break non-test code with mutation "
                        "operators, keep a mutant when a passing test fails (docs/rl.md)",
                        "pinpoint rl synthesize -i psf__requests-1921 -i pallets__flask-5014 -o synth.jsonl -j 2\n"
                        "pinpoint rl synthesize --repo ./myproject --test-command 'python -m pytest -rA' "
                        "-o synth.jsonl")
    instance_arg(synth, "a SWE-bench row whose repository (made whole: its fix and tests applied) is broken, its "
                 "tests run in its image (repeatable)")
    synth.add_argument("--repo", type=Path, action="append", default=[], metavar="PATH",
                       help="a local git repository to break (repeatable; with --test-command)")
    synth.add_argument("--test-command", metavar="CMD", help="with --repo: runs its tests and prints pytest's -rA "
                       "summary; test ids are appended to it")
    synth.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                       help="the tasks file (.jsonl; the tasks' repositories go to FILE.repos/)")
    synth.add_argument("--max-mutants", type=int, default=100, help="mutants tried per repository")
    synth.add_argument("--budget", type=float, default=3600.0, metavar="S",
                       help="seconds of trying mutants per repository (the tasks found so far are kept)")
    synth.add_argument("--timeout", type=float, default=300.0, metavar="S",
                       help="bound on one test run (a mutant that hangs the tests is dropped)")
    synth.add_argument("--seed", type=int, default=0, help="which mutants are drawn")
    executor_args(synth)
    workers_arg(synth, "repositories at once")
    synth.set_defaults(func=_synthesize)


def _synthesize(args: argparse.Namespace) -> int:
    from pinpoint.rl.synth_run import run_synthesis
    from pinpoint.rl.synthesize import SynthSettings

    if bool(args.repo) != bool(args.test_command):
        raise UsageError("--repo and --test-command go together")
    if not (args.repo or args.instances):
        raise UsageError("give -i/--instance ID or --repo PATH --test-command CMD")
    if min(args.max_mutants, args.workers) < 1 or min(args.budget, args.timeout) <= 0:
        raise UsageError("--max-mutants and --workers must be >= 1, --budget and --timeout > 0")
    specs = [{"instance_id": i} for i in args.instances or []] + [
        {"repo": str(repo), "test_command": args.test_command} for repo in args.repo]
    settings = SynthSettings(max_mutants=args.max_mutants, timeout_s=args.timeout, seed=args.seed,
                             budget_s=args.budget)

    def report(stats: dict) -> None:
        if stats.get("error"):
            print(f"{stats['source']}: FAILED: {stats['error']}", flush=True)
            return
        hours = max(stats["seconds"] + stats.get("prepare_s", 0.0), 1e-9) / 3600
        print(f"{stats['source']}: {stats['kept']} task(s) of {stats['tried']} mutant(s) tried "
              f"({stats['equivalent']} equivalent, {stats['unreached']} unreached, {stats['hung']} hung), "
              f"{stats['baseline_tests']} baseline test(s), {stats['kept'] / hours:.0f} tasks/hour"
              + (" (finished by an earlier run with this output)" if stats.get("resumed") else ""), flush=True)

    results = run_synthesis(specs, args.output, settings, args.backend, args.address, args.workers, report)
    kept = sum(r.get("kept", 0) for r in results)
    print(f"{kept} task(s) in {args.output}")
    return 1 if any(r.get("error") for r in results) else 0


def _rollout_parser(rl) -> None:
    """`pinpoint rl rollout`'s arguments."""
    rollout = add_command(rl, "rollout", "episodes (here or on Ray) into a dataset file that resumes after a kill",
                          ROLLOUT_EXAMPLES)
    _task_args(rollout)
    rollout.add_argument("--policy", required=True, help=POLICY_HELP)
    rollout.add_argument("--model", default="default", help="model name at --policy URL")
    executor_args(rollout)
    rollout.add_argument("--model-backend", choices=ROLLOUT_BACKENDS, default="llama.cpp",
                         help="how --policy URL is spoken to: llama.cpp (default), vllm or sglang (token-exact, "
                         "through the recording gateway; sglang needs --tokenizer), openai (any OpenAI-compatible "
                         "server: no token ids recorded); the sampling temperature is --set llm.temperature=T")
    rollout.add_argument("--seed", type=int, help="sampling seed: each turn's seed is a hash of (SEED, task, "
                         "sample, turn), so the same command samples the same replies and turns are independent")
    rollout.add_argument("--tokenizer", metavar="PATH",
                         help="a local Hugging Face tokenizer of the served model: needed by --model-backend sglang "
                         "(its chat template); with --model-backend openai, calls are recorded retokenized")
    rollout.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                         help="dataset file: .jsonl, or .parquet")
    rollout.add_argument("--samples-per-task", type=int, default=1, help="G: samples of each task (a GRPO group)")
    workers_arg(rollout, "episode workers, each with its own warm pool (a task's samples all go to one)")
    rollout.add_argument("--concurrency", type=int, default=1, help="episodes at once per worker")
    rollout.add_argument("--containers-per-worker", type=int,
                         help="the bound on live containers per worker (default: --concurrency + 1); the engine "
                         "sees at most workers x this")
    rollout.add_argument("--reward", choices=["unit", "precise", "localization"], default="unit")
    rollout.add_argument("--max-steps", type=int, default=30, help="steps per episode (then truncated and graded)")
    rollout.add_argument("--suspects", choices=SUSPECTS, default="none",
                         help="oracle: the first observation lists the task's oracle suspects, computed once per "
                         "task and cached (`rl prepare --suspects oracle` computes them ahead); none: the default")
    rollout.add_argument("--grader", choices=["fresh", "pooled"], default="pooled",
                         help="grade in a pooled box of the instance image reset in place (default; the same "
                         "verdicts as fresh, `pinpoint bench grading`) or a fresh container per grading (as the harness)")
    rollout.add_argument("--on-failure", choices=["retry", "mask", "raise"], default="retry",
                         help="an episode ended by an infrastructure failure: retry (the default: --retries tries in "
                         "all, each on a fresh box, after waiting up to --server-wait for a model server that went "
                         "down; then masked), mask (its row says `masked`; a rerun retries it) or raise (stop the "
                         "run at the first one)")
    rollout.add_argument("--retries", type=int, default=3, help="tries in all under --on-failure retry")
    rollout.add_argument("--retry-wait", type=float, default=5.0, metavar="S",
                         help="seconds before the second try under retry, doubling after")
    rollout.add_argument("--server-wait", type=float, default=180.0, metavar="S",
                         help="under retry, how long to wait for a model server that went down to answer its health "
                         "check again before the next try (a vLLM restart takes 2 min; the wait is in the row)")
    rollout.set_defaults(func=_rollout)


def _task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, required=True, metavar="FILE",
                        help="JSONL: instance ids, SWE-bench rows or local tasks")
    parser.add_argument("--dataset", help="SWE-bench rows that instance ids are looked up in (default: the dev rows)")
    parser.add_argument("--config", help="YAML or TOML config; its `runtime` (and `llm`) sections apply")
    set_arg(parser)


def _config(args: argparse.Namespace):
    from pinpoint.agent.config import load_config

    return load_config(args.config, list(args.overrides))


def _prepare(args: argparse.Namespace) -> int:
    from pinpoint.rl.env import box_for
    from pinpoint.rl.tasks import load_tasks

    config = _config(args)
    failed = 0
    for task in load_tasks(args.tasks, args.dataset):
        try:
            box = box_for(task, config.runtime)
            suspects, ok = "", True
            with box.factory() as runtime:  # proves the box starts, and leaves the image warm in the engine's cache
                if args.suspects == "oracle":
                    suspects, ok = _prepare_suspects(task, box.image or "", runtime)
            print(f"{task.task_id}: ready ({box.image or task.repo_path}){suspects}", flush=True)
            failed += not ok
        except Exception as exc:  # noqa: BLE001 - one line per task that cannot be prepared, then go on
            failed += 1
            print(f"{task.task_id}: FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
    return 1 if failed else 0


def _prepare_suspects(task, image: str, runtime) -> tuple[str, bool]:
    """(the tail of a task's `rl prepare` line, whether its suspects are cached now): cached already, computed now,
    or why not. Computed as the env computes them (its default timeout and agent settings), so its resets find
    them."""
    from pinpoint.rl.env import EnvSettings
    from pinpoint.rl.suspects import oracle_suspects

    if task.instance is None:
        return "; no suspects (a local task has no FAIL_TO_PASS tests)", True
    found = oracle_suspects(task, image, runtime, EnvSettings().suspects_timeout_s)
    if found.failure:
        return f"; suspects FAILED: {found.failure.removeprefix('suspects: ')}", False
    if found.cached:
        waited = f" (waited {found.seconds:.1f} s for another process computing them)" if found.seconds >= 0.1 else ""
        return f"; suspects cached{waited}", True
    return f"; suspects computed in {found.seconds:.1f} s ({len(found.suspects)} lines)", True


def _dataset(args: argparse.Namespace) -> int:
    from pinpoint.rl.dataset import curriculum, write_training_parquet
    from pinpoint.rl.tasks import load_tasks

    if args.output.suffix != ".parquet":
        raise UsageError(f"--output {args.output}: the training file is Parquet (name it *.parquet)")
    if args.hardest_first and not args.curriculum:
        raise UsageError("--hardest-first needs --curriculum ROLLOUTS")
    tasks = load_tasks(args.tasks, args.dataset)
    if args.curriculum:
        tasks = curriculum(tasks, _rollout_rows(args.curriculum), hardest_first=args.hardest_first)
    print(f"{write_training_parquet(tasks, args.output, args.split)} task row(s) in {args.output}")
    return 0


def _rollout_rows(path: Path) -> list[dict]:
    from pinpoint.rl.dataset import load_rollouts

    if not path.is_file():
        raise UsageError(f"{path}: no such rollout dataset")
    try:
        return load_rollouts(path)
    except (OSError, ValueError) as exc:  # a Parquet file that is not one, JSON text that is not JSON
        raise UsageError(f"{path}: not a rollout dataset ({str(exc).splitlines()[0][:200]})") from None


def _filter(args: argparse.Namespace) -> int:
    from pinpoint.rl.dataset import drop_equal_groups
    from pinpoint.rl.rollout import _write_parquet

    out = args.output
    if out.suffix not in (".jsonl", ".parquet"):
        raise UsageError(f"--output {out}: name it *.jsonl or *.parquet")
    if out.resolve() == args.rollouts.resolve():
        raise UsageError("--output must not be the rollout dataset itself")
    rows = _rollout_rows(args.rollouts)
    kept, dropped = drop_equal_groups(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        _write_parquet(kept, out, like=rows)
    else:
        out.write_text("".join(json.dumps(row) + "\n" for row in kept))
    print(f"kept {len(kept)} of {len(rows)} row(s) in {out}: dropped {len(dropped)} group(s) whose rewards "
          "were all equal")
    return 0


def _rollout(args: argparse.Namespace) -> int:
    from pinpoint.rl.env import EnvSettings
    from pinpoint.rl.rollout import RolloutSpec, pending, run_rollout
    from pinpoint.rl.tasks import load_tasks

    if min(args.samples_per_task, args.workers, args.concurrency, args.max_steps, args.retries) < 1:
        raise UsageError("--samples-per-task, --workers, --concurrency, --max-steps and --retries must be >= 1")
    if min(args.retry_wait, args.server_wait) < 0:
        raise UsageError("--retry-wait and --server-wait must be >= 0")
    config = _config(args)
    settings = EnvSettings(reward=args.reward, max_steps=args.max_steps, grader=args.grader, suspects=args.suspects,
                           runtime=config.runtime)
    containers = args.containers_per_worker or args.concurrency + 1
    if containers < 1:
        raise UsageError("--containers-per-worker must be >= 1")
    _check_backend(args)
    spec = RolloutSpec(load_tasks(args.tasks, args.dataset), args.policy, args.output, args.samples_per_task,
                       args.workers, args.concurrency, args.address, args.backend, settings, _llm(args, config),
                       containers, backend=args.model_backend.replace("llama.cpp", "llamacpp"), seed=args.seed,
                       tokenizer=args.tokenizer, on_failure=args.on_failure, retries=args.retries,
                       retry_wait_s=args.retry_wait, server_wait_s=args.server_wait)
    todo = len(pending(spec))
    total = len(spec.tasks) * spec.samples_per_task
    rows = _with_progress(spec, todo, total, run_rollout)
    rewards = [r["reward"] for r in rows if r.get("reward") is not None]
    failed = [r for r in rows if r.get("status") == "infra_failure"]
    mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "n/a"
    print(f"{len(rows)}/{total} episodes in {args.output} ({todo} run now): mean reward {mean}, "
          f"{len(failed)} infrastructure failure(s)")
    if rows and len(failed) == len(rows):
        reason = str((failed[-1].get("reward_info") or {}).get("reason", "no reason given")).splitlines()[0][:300]
        print(f"pinpoint rl rollout: every episode was an infrastructure failure (last: {reason})")
        return 1
    return 0


def _check_backend(args: argparse.Namespace) -> None:
    """One-line errors for what --backend and --model-backend cannot do."""
    if args.address and args.backend != "ray":
        raise UsageError("--address names a Ray cluster: use it with --backend ray")
    if args.model_backend == "sglang" and not args.tokenizer:
        raise UsageError("--model-backend sglang needs --tokenizer PATH (a local Hugging Face tokenizer of the served "
                         "model): SGLang serves token ids but no chat template")
    if args.policy == "embedded" and args.model_backend != "llama.cpp":
        raise UsageError(f"--model-backend {args.model_backend}: the embedded model is a llama.cpp server; drop "
                         "--model-backend")
    if args.seed is not None and args.model_backend == "openai" and not args.tokenizer:
        raise UsageError("--seed with --model-backend openai needs --tokenizer: the seed reaches the server through the "
                         "recording gateway, which an untokenized openai rollout does not use")
    if args.model_backend == "openai" and not args.tokenizer and args.policy not in ("scripted-gold", "noop"):
        print("pinpoint rl rollout: --model-backend openai without --tokenizer: the rows carry no token ids", file=sys.stderr)


def _llm(args: argparse.Namespace, config):
    from pinpoint.rl.episodes import SCRIPTED_POLICIES

    if args.policy in SCRIPTED_POLICIES:
        return None
    if args.policy == "embedded":
        from pinpoint.agent.embedded_model import start_embedded_model

        return start_embedded_model(config.llm)
    if "://" not in args.policy:
        raise UsageError(f"--policy {args.policy!r}: expected {POLICY_HELP}")
    from pinpoint.agent.llm_config import LLMConfig

    return LLMConfig(**{**config.llm.__dict__, "base_url": args.policy, "model": args.model})


def _with_progress(spec, todo: int, total: int, run):
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        bar = progress.add_task("episodes", total=total, completed=total - todo)
        return run(spec, on_row=lambda row: progress.advance(bar))


def _bench(args: argparse.Namespace) -> int:
    from pinpoint.rl.bench import run_bench
    from pinpoint.rl.tasks import RlTask
    from pinpoint.swebench_eval.selection import select_one
    from rich.console import Console
    from rich.table import Table

    if args.repeats < 2 or args.episodes < 3:
        raise UsageError("--repeats must be >= 2 and --episodes >= 3")
    instances = args.instances or ["psf__requests-1142"]
    if len(instances) > 1:
        raise UsageError(f"-i/--instance: bench rl runs on one instance, got {len(instances)}")
    task = RlTask.swebench(select_one(instances[0], None))
    f = run_bench(task, args.repeats, args.episodes, with_generator=not args.no_generator)
    if args.json:
        print_json(f)
        return 0
    table = Table(title=f"pinpoint bench rl ({f['task']}; scripted gold policy = a fake)")
    for column in ("measure", "pinpoint", "baseline", "ratio"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for row in _bench_rows(f):
        table.add_row(*row)
    Console(width=max(Console().width, 120)).print(table)
    return 0


def _bench_rows(f: dict) -> list[tuple[str, str, str, str]]:
    p, ep, fr = f["pool"], f["episodes_pool"], f["episodes_fresh"]
    rows = [("pooled container hand-out ms p50 / p95", f"{p['handout_ms_p50']} / {p['handout_ms_p95']}",
             f"{p['fresh_container_ms_p50']} / {p['fresh_container_ms_p95']} (fresh container)",
             f"{p['handout_speedup_p50']}x"),
            ("reset() between episodes ms p50 / p95", f"{p['reset_ms_p50']} / {p['reset_ms_p95']}", "", ""),
            ("short episodes per minute", str(ep["episodes_per_min"]),
             f"{fr['episodes_per_min']} (fresh container per episode)", f"{f['episodes_speedup']}x"),
            ("step ms p50 / p95", f"{ep['step_ms_p50']} / {ep['step_ms_p95']}",
             f"{fr['step_ms_p50']} / {fr['step_ms_p95']}", "")]
    one, two = f["ray"]
    rows.append((f"Ray: episodes per minute, {two['workers']} workers", str(two["episodes_per_min"]),
                 f"{one['episodes_per_min']} (1 worker)",
                 f"{round(two['episodes_per_min'] / max(one['episodes_per_min'], 1e-6), 2)}x"))
    for c in f["concurrent"]:
        rows.append((f"{c['concurrent']} concurrent episodes: per minute / infra failures",
                     f"{c['episodes_per_min']} / {c['infra_failures']}", f"step ms p50 {c['step_ms_p50']}, "
                     f"p95 {c['step_ms_p95']}", ""))
    if "generator" in f:
        g = f["generator"]
        rows.append(("embedded model episodes per minute (llm s / env s per episode)", str(g["episodes_per_min"]),
                     f"{g['llm_s_mean']} / {g['env_s_mean']}", ""))
    return rows
