"""`pinpoint run | batch | fix | demo | show`: the agent's commands.

Configuration comes from `--config FILE` (YAML or TOML) plus `--set section.field=value` overrides and a few
shortcut flags; a bad value stops the command before any work, naming the field and what was expected.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.config import Config, ConfigError, load_config
from agent.predictions import append_prediction, read_predictions
from agent.runner import RunResult, run_task, safe_name
from agent.state import Task
from agent.trajectory import load_trajectory, render

console = Console(stderr=True)


# -- configuration -------------------------------------------------------------------------------------------------
def _config_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("configuration")
    group.add_argument("--config", help="YAML or TOML file with sections llm, budget, search, agent, runs")
    group.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override one field (repeatable), e.g. --set budget.max_steps=20")
    group.add_argument("--base-url", help="OpenAI-compatible endpoint (default: the embedded SmolLM2 model)")
    group.add_argument("--model", help="model name at the endpoint")
    group.add_argument("--max-steps", type=int, help="budget: model turns in the edit loop")
    group.add_argument("--search", choices=["none", "flare", "bester", "flare+bester"], help="search policy")
    group.add_argument("--output", help="folder for trajectories, checkpoints and predictions (default runs/)")


def config_from_args(args: argparse.Namespace, defaults: dict | None = None) -> Config:
    """Built-in defaults <- the command's `defaults` <- --config file <- --set <- shortcut flags."""
    flags = {"llm.base_url": args.base_url, "llm.model": args.model, "budget.max_steps": args.max_steps,
             "search.policy": args.search, "runs.output_dir": args.output}
    return load_config(args.config, list(args.overrides), defaults=defaults, **flags)


def _guard(handler):
    """Turn expected failures (bad config, bad input, endpoint down) into one clear line and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        from agent.embedded_model import EmbeddedModelError
        from environments.images import BuildError
        from environments.runtime import RuntimeFailure

        try:
            return handler(args)
        except (ConfigError, ValueError, FileNotFoundError) as exc:
            console.print(f"[red]pinpoint {args.command}:[/] {exc}")
            return 2
        except (BuildError, RuntimeFailure, EmbeddedModelError) as exc:
            console.print(f"[red]pinpoint {args.command}: {type(exc).__name__}:[/] {exc}")
            return 1

    return run


def _print_result(result: RunResult) -> None:
    table = Table.grid(padding=(0, 2))
    for key, value in (("instance", result.instance_id), ("status", result.status), ("detail", result.detail),
                       ("steps", result.steps), ("tokens", f"{result.prompt_tokens} in / {result.completion_tokens} out"),
                       ("edited lines", result.edited_lines["total"]), ("wall", f"{result.elapsed_s:.1f}s"),
                       ("trajectory", str(result.trajectory))):
        if value != "":
            table.add_row(f"[bold]{key}[/]", str(value))
    console.print(table)


def trajectory_dir(out: Path, instance_id: str) -> Path:
    """Where one run keeps its trajectory and checkpoint: `<output>/trajectories/<instance>/`."""
    return out / "trajectories" / safe_name(instance_id)


# -- SWE-bench: run and batch ----------------------------------------------------------------------------------------
def _solve_instance(instance, config: Config, out: Path, evaluate: bool, sources=None) -> dict:
    """Build the instance image, run the agent in a container, and (optionally) grade the patch."""
    from environments.docker_runtime import DockerRuntime
    from swebench_eval.evaluate import evaluate_patch
    from swebench_eval.images import build_instance_image

    record = build_instance_image(instance, sources)
    task = Task(instance.instance_id, instance.problem_statement, repo=instance.repo)
    run_dir = trajectory_dir(out, instance.instance_id)
    with DockerRuntime(record.tag, workdir="/testbed", network=False) as runtime:
        result = run_task(task, runtime, config, run_dir=run_dir, meta={"image": record.tag})
    row = {"status": result.status, "edited_lines": result.edited_lines["total"]}
    if evaluate:
        from swebench_eval.evaluate import write_report
        from swebench_eval.metrics import edit_metrics

        eval_dir = out / "eval" / instance.instance_id
        verdict = evaluate_patch(instance, result.patch, image=record.tag, out_dir=eval_dir,
                                 model_name=config.llm.model)
        verdict.edit = edit_metrics(result.patch, instance.patch).to_json()
        write_report(verdict, eval_dir)
        row.update(resolved=verdict.resolved, outcome=verdict.outcome, edit=verdict.edit)
    return {"result": result, **row}


def _cmd_run(args: argparse.Namespace) -> int:
    from swebench_eval.datasets import load_instances

    config = config_from_args(args)
    out = Path(config.runs.output_dir)
    (instance,) = load_instances(args.dataset, ids=[args.instance_id])
    done = _solve_instance(instance, config, out, args.evaluate)
    result: RunResult = done.pop("result")
    append_prediction(out / "preds.jsonl", instance.instance_id, result.patch, config.llm.model, **done)
    _print_result(result)
    if args.evaluate:
        console.print(f"[bold]verdict[/] {done['outcome']} (edit F1 vs gold: {done['edit'].get('f1')})")
    return 0


def _load_batch_tasks(args: argparse.Namespace) -> list[tuple[str, object]]:
    """(id, item) pairs: SWE-bench instances, or local tasks from a JSONL file (--tasks)."""
    if args.tasks:
        items = []
        for number, line in enumerate(Path(args.tasks).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                items.append((row["instance_id"], row))
                for key in ("problem_statement", "repo_path"):
                    if not isinstance(row.get(key), str):
                        raise KeyError(key)
            except (json.JSONDecodeError, KeyError) as exc:
                raise ValueError(f"{args.tasks}:{number}: expected a JSON object with instance_id, problem_statement "
                                 f"and repo_path (optional base_commit, test_command); problem: {exc}") from None
        return items
    from swebench_eval.datasets import load_instances

    instances = load_instances(args.dataset, ids=args.ids or None, repos=args.repos or None)
    return [(i.instance_id, i) for i in instances[: args.limit or None]]


def _solve_local(row: dict, config: Config, out: Path) -> dict:
    from environments.local import LocalRuntime

    task = Task(row["instance_id"], row["problem_statement"], repo=row.get("repo", ""),
                test_command=row.get("test_command"))
    with LocalRuntime(row["repo_path"], row.get("base_commit")) as runtime:
        result = run_task(task, runtime, config, run_dir=trajectory_dir(out, task.instance_id))
    return {"result": result, "status": result.status, "edited_lines": result.edited_lines["total"]}


def _cmd_batch(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    out = Path(config.runs.output_dir)
    preds_path = out / "preds.jsonl"
    items = _load_batch_tasks(args)
    done = read_predictions(preds_path)
    todo = [(i, item) for i, item in items if i not in done]
    console.print(f"pinpoint batch: {len(items)} tasks, {len(items) - len(todo)} already in {preds_path}, "
                  f"{len(todo)} to run with {args.workers} worker(s)")
    summary = {"submitted": 0, "other": 0, "failed": 0, "resolved": 0}
    lock = threading.Lock()

    def one(item_id: str, item) -> None:
        try:
            if isinstance(item, dict):
                done_row = _solve_local(item, config, out)
            else:
                done_row = _solve_instance(item, config, out, args.evaluate)
        except Exception as exc:  # one task's failure must not stop the batch; it is retried on the next run
            with lock:
                summary["failed"] += 1
            console.print(f"[red]{item_id}: {type(exc).__name__}: {exc}[/]")
            return
        result: RunResult = done_row.pop("result")
        append_prediction(preds_path, item_id, result.patch, config.llm.model, **done_row)
        with lock:
            summary["submitted" if result.submitted else "other"] += 1
            summary["resolved"] += int(bool(done_row.get("resolved")))

    columns = (TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=console, disable=args.no_progress) as progress:
        bar = progress.add_task("", total=len(todo))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            futures = {pool.submit(one, i, item): i for i, item in todo}
            for future in concurrent.futures.as_completed(futures):
                future.result()
                progress.update(bar, advance=1, description=futures[future])
    line = (f"pinpoint batch: {summary['submitted']} submitted, {summary['other']} ended otherwise, "
            f"{summary['failed']} failed (rerun to retry)")
    if args.evaluate:
        line += f", {summary['resolved']} resolved"
    console.print(line + f"; predictions in {preds_path}")
    return 1 if summary["failed"] else 0


# -- a team's own repository ---------------------------------------------------------------------------------------
def _cmd_fix(args: argparse.Namespace) -> int:
    from agent.fix import build_fix_image, create_branch, head_commit, read_issue

    config = config_from_args(args)
    issue_id, text = read_issue(args.issue)
    is_local = Path(args.repo).is_dir()
    if args.branch and not is_local:
        raise ValueError("--branch needs a local repository path (a git URL has no working copy to branch in)")
    out = Path(config.runs.output_dir)
    task = Task(safe_name(f"{Path(args.repo.rstrip('/')).name}-{issue_id}"), text, repo=args.repo,
                test_command=args.test_cmd)
    with tempfile.TemporaryDirectory(prefix="pinpoint-src-") as tmp:
        source = args.repo
        if not is_local:  # a URL: clone once so the image and the branch agree on the commit
            from environments.local import clone_checkout

            source = str(Path(tmp) / "repo")
            clone_checkout(args.repo, source)
        commit = head_commit(source)
        if args.local:
            from environments.local import LocalRuntime

            runtime = LocalRuntime(source, commit)
        else:
            from environments.docker_runtime import DockerRuntime

            image = build_fix_image(source, commit, args.python, network=not args.offline)
            runtime = DockerRuntime(image, workdir="/testbed", network=False)
        with runtime:
            result = run_task(task, runtime, config, run_dir=trajectory_dir(out, task.instance_id),
                              meta={"repo": args.repo, "commit": commit})
    patch_path = out / f"{task.instance_id}.patch"
    patch_path.parent.mkdir(parents=True, exist_ok=True)
    patch_path.write_text(result.patch)
    _print_result(result)
    console.print(f"[bold]patch[/] {patch_path} ({result.edited_lines['total']} edited lines)")
    if args.branch:
        if not result.patch.strip():
            console.print("[yellow]no branch created: the patch is empty[/]")
            return 1
        sha = create_branch(args.repo, args.branch, commit, result.patch,
                            f"pinpoint: fix {issue_id}\n\nstatus: {result.status}")
        console.print(f"[bold]branch[/] {args.branch} at {sha[:12]} in {args.repo}")
    return 0 if result.patch.strip() else 1


# -- demo and show ---------------------------------------------------------------------------------------------------
#: small enough to finish in a few minutes on 2 CPUs with the embedded model
DEMO_DEFAULTS = {"budget.max_steps": 2, "search.k": 3, "search.rounds": 1, "llm.max_tokens": 128,
                 "llm.timeout_s": 600.0, "budget.max_wall_s": 900.0, "agent.show_suspects": 3}


def _cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import build_demo_repo, line_rank
    from agent.patches import apply_patch, run_test_command
    from environments.local import LocalRuntime

    config = config_from_args(args, DEMO_DEFAULTS)
    out = Path(config.runs.output_dir)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pinpoint-demo-") as tmp:
        demo = build_demo_repo(Path(tmp) / "numeric-helpers", args.bug)
        console.rule("[bold]pinpoint demo")
        console.print(f"A real bug from HumanEvalFix ({args.bug}) in a small repository; model: "
                      f"{config.llm.base_url or 'embedded SmolLM2-135M-Instruct (offline; too small to be expected to fix it)'}")
        console.print(f"[bold]issue[/]\n{demo.task.problem_statement}\n")
        with LocalRuntime(demo.path) as runtime:
            result = run_task(demo.task, runtime, config, run_dir=trajectory_dir(out, demo.task.instance_id), fresh=True)
            apply_patch(runtime, result.patch)
            runtime.run("git checkout -- tests", timeout=60)  # the verdict uses the original tests, whatever the run did
            verdict = run_test_command(runtime, demo.task.test_command, config.agent.test_timeout_s)
    trajectory = load_trajectory(result.trajectory)
    render(trajectory, Console(), full=False)
    rank = line_rank(trajectory.get("suspects") or [], demo.buggy_path, demo.buggy_lines)
    console.rule("[bold]verdict")
    console.print(f"localization: the known buggy line {demo.buggy_path}:{demo.buggy_lines} ranks "
                  f"{'#' + str(rank) if rank else 'outside the suspects'} among suspect lines")
    console.print(f"run status: {result.status} {result.detail}".rstrip())
    console.print(f"search candidates: {len(trajectory.get('candidates') or [])}, "
                  f"edited lines: {result.edited_lines['total']}")
    console.print(f"tests on the final patch: [{'green' if verdict.ok else 'red'}]"
                  f"{'PASS' if verdict.ok else 'FAIL'}[/] ({verdict.passed} passed, {verdict.failed} failed)")
    console.print(f"trajectory: {result.trajectory}  (pinpoint show {result.trajectory})")
    console.print(f"demo took {time.monotonic() - started:.0f}s")
    return 0


def _cmd_bench_retrieval(args: argparse.Namespace) -> int:
    from agent.retrieval_bench import run_cli

    return run_cli(args)


def _cmd_show(args: argparse.Namespace) -> int:
    data = load_trajectory(args.trajectory)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        render(data, Console(), full=args.full)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="repair one SWE-bench instance in its container")
    run.add_argument("instance_id")
    run.add_argument("--dataset", help="SWE-bench rows (.jsonl/.jsonl.gz/.parquet; default: the dev set)")
    run.add_argument("--evaluate", action="store_true", help="grade the patch with the official harness logic")
    _config_args(run)
    run.set_defaults(func=_guard(_cmd_run))

    batch = subparsers.add_parser("batch", help="repair many instances; resumable; appends to preds.jsonl")
    batch.add_argument("--dataset")
    batch.add_argument("--ids", nargs="*", help="instance ids (default: all)")
    batch.add_argument("--repos", nargs="*", help="only these repositories (owner/name)")
    batch.add_argument("--limit", type=int, help="at most this many instances")
    batch.add_argument("--tasks", help="JSONL of local tasks {instance_id, problem_statement, repo_path, "
                       "base_commit?, test_command?} run on local checkouts instead of SWE-bench containers")
    batch.add_argument("--workers", type=int, default=1)
    batch.add_argument("--evaluate", action="store_true", help="grade each prediction as it is made")
    batch.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    _config_args(batch)
    batch.set_defaults(func=_guard(_cmd_batch))

    fix = subparsers.add_parser("fix", help="repair your own repository from an issue")
    fix.add_argument("repo", help="local repository path or git URL")
    fix.add_argument("--issue", required=True, help="GitHub issue URL or a text file with the issue")
    fix.add_argument("--test-cmd", help="command whose success means fixed (e.g. 'python -m pytest -q tests')")
    fix.add_argument("--local", action="store_true", help="run on a local checkout instead of a container")
    fix.add_argument("--branch", help="also commit the patch to this new branch of the (local) repository")
    fix.add_argument("--python", default="3.11", help="Python version of the container (default 3.11)")
    fix.add_argument("--offline", action="store_true", help="build the container without network access")
    _config_args(fix)
    fix.set_defaults(func=_guard(_cmd_fix))

    demo = subparsers.add_parser("demo", help="offline demo: embedded model on a real HumanEvalFix bug")
    demo.add_argument("--bug", default="Python/2", help="HumanEvalFix task id (Python/2, Python/23, Python/45, ...)")
    _config_args(demo)
    demo.set_defaults(func=_guard(_cmd_demo))

    from environments.cli import subcommand_group

    bench = subcommand_group(subparsers, "bench", "benchmarks (figures beside a baseline from the same run)")
    retrieval = bench.add_parser("retrieval", help="issue-text retrieval: file Acc@k and line Hit@k vs grep")
    retrieval.add_argument("--dataset")
    retrieval.add_argument("--repos", nargs="*", help="only these repositories (owner/name)")
    retrieval.add_argument("--limit", type=int, help="at most this many rows")
    retrieval.add_argument("--every", type=int, help="take every N-th row (a sample across repositories)")
    retrieval.add_argument("--json", help="also write per-row results and totals to this file")
    retrieval.add_argument("--quiet", action="store_true", help="only the table")
    retrieval.set_defaults(func=_guard(_cmd_bench_retrieval))

    show = subparsers.add_parser("show", help="render a trajectory file")
    show.add_argument("trajectory")
    show.add_argument("--full", action="store_true", help="do not shorten long messages")
    show.add_argument("--json", action="store_true", help="print the raw JSON")
    show.set_defaults(func=_guard(_cmd_show))

