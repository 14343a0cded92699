"""`pinpoint run | batch | fix | demo | show`: the agent's commands.

Configuration comes from `--config FILE` (YAML or TOML) plus `--set section.field=value` overrides and a few
shortcut flags; a bad value stops the command before any work, naming the field and what was expected.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pinpoint.agent.config import Config, load_config, user_config_path
from pinpoint.environments.cli import add_command, output_arg, workers_arg
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import executor_args
from pinpoint.environments.registry import registry_arg, use_registry
from pinpoint.swebench_eval.cli import dataset_args, selection_from_args, sources_from_args
from pinpoint.swebench_eval.layout import dataset_run_id
from pinpoint.swebench_eval.predictions import read_predictions
from pinpoint.swebench_eval.selection import select_one
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from pinpoint.agent.runner import RunResult

console = Console(stderr=True)
#: results (what a script reads); `console` has the notices and progress
stdout = Console()


# -- configuration -------------------------------------------------------------------------------------------------
def _config_args(parser: argparse.ArgumentParser, results: tuple[str, ...] = ("output", "run_id")) -> None:
    """The configuration flags every agent command shares; `results`: which of the results flags it has (the
    others stay reachable as --set runs.output_dir=DIR and --set runs.run_id=NAME)."""
    group = parser.add_argument_group("configuration")
    group.add_argument("--config", help="YAML or TOML file with sections llm, budget, search, agent, runs")
    set_arg(group)
    group.add_argument("--base-url", help="OpenAI-compatible endpoint (default: the embedded SmolLM2 model)")
    group.add_argument("--model", help="model name at the endpoint")
    if "output" in results:
        output_arg(group)
    if "run_id" in results:
        group.add_argument("--run-id", help="the run's name under the results root (default: the dataset, tasks "
                           "file, 'fix' or 'demo')")


def set_arg(parser) -> None:
    """`--set SECTION.FIELD=VALUE`, the same on every command that reads a config."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override one config field (repeatable), e.g. --set budget.max_steps=20 --set "
                        "search.policy=flare")


def _fresh_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fresh", action="store_true",
                        help="start over: ignore the checkpoint (and, for batch, predictions) of an earlier run")


#: environment variables read as settings: the OpenAI SDK's own, and pinpoint's for the model name
ENV_SETTINGS = {"OPENAI_BASE_URL": "llm.base_url", "PINPOINT_MODEL": "llm.model"}
ENV_HELP = ("environment: OPENAI_BASE_URL (the endpoint; unset: the embedded model), OPENAI_API_KEY (its key), "
            "PINPOINT_MODEL (the model name; unset: the server's first model), PINPOINT_RUNS (the runs root); "
            "below them, the user config $XDG_CONFIG_HOME/pinpoint/config.yaml (pinpoint config init). ")
EXIT_HELP = ("Exit codes: 0 a patch, 1 no patch (or an unexpected error: --debug shows its traceback), 2 bad input "
             "or an infrastructure failure.")
BATCH_EXIT_HELP = ("Exit codes: 0 every task ended, with a patch or without; 1 a task failed (its own error, or its "
                   "infrastructure: a rerun retries it) or an unexpected error (--debug shows its traceback); 2 bad "
                   "input.")


def config_from_args(args: argparse.Namespace, defaults: dict | None = None) -> Config:
    """Built-in defaults <- the command's `defaults` <- the user config file (XDG) <- OPENAI_BASE_URL /
    PINPOINT_MODEL <- --config file <- --set <- shortcut flags."""
    environment = {key: os.environ[var] for var, key in ENV_SETTINGS.items() if os.environ.get(var)}
    output = getattr(args, "output", None)
    flags = {"llm.base_url": args.base_url, "llm.model": args.model, "runs.output_dir": str(output) if output else None,
             "runs.run_id": getattr(args, "run_id", None)}
    return load_config(args.config, list(args.overrides), defaults=defaults, user_file=user_config_path(),
                       environment=environment, **flags)


def result_table() -> Table:
    """A key/value grid whose values wrap (fold) instead of being cut with an ellipsis: full paths always."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _print_result(result: RunResult) -> None:
    """The run's results on stdout (notices and progress stay on stderr)."""
    table = result_table()
    for key, value in (("instance", result.instance_id), ("status", result.status), ("detail", result.detail),
                       ("steps", result.steps), ("tokens", f"{result.prompt_tokens} in / {result.completion_tokens} out"),
                       ("edited lines", result.edited_lines["total"]), ("wall", f"{result.elapsed_s:.1f}s"),
                       ("trajectory", str(result.trajectory))):
        if value != "":
            table.add_row(f"[bold]{key}[/]", Text(str(value)))
    stdout.print(table)


# -- SWE-bench: run and batch ----------------------------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    from pinpoint.agent.solve import claim_run_folder, layout_for, solve_instance

    config = config_from_args(args)
    use_registry(None)
    sources = sources_from_args(args)
    instance = select_one(args.instance_id, args.dataset, sources)
    _endpoint_preflight(config)
    layout = layout_for(config, dataset_run_id(args.dataset))
    claim_run_folder(layout, config, args.fresh)
    with status_line(args) as status:
        solved = solve_instance(instance, config, layout, evaluate=args.evaluate, sources=sources,
                                fresh=args.fresh, on_progress=status)
    _print_result(solved.result)
    stdout.print(f"[bold]prediction[/] {layout.predictions}", soft_wrap=True)
    if args.evaluate:
        stdout.print(f"[bold]verdict[/] {solved.graded['outcome']} ({edit_summary(solved.graded['edit'])}; "
                     f"report in {layout.eval_dir(instance.instance_id)})", soft_wrap=True)
    return 0


def status_line(args: argparse.Namespace):
    """The run's live status line on stderr (agent.status.StatusLine), off with --quiet."""
    from pinpoint.agent.status import StatusLine

    return StatusLine(console, enabled=not args.quiet)


def _quiet_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help=f"no {what} on stderr (results and errors are still printed)")


def edit_summary(edit: dict) -> str:
    """The edit against the gold patch in words: an empty patch has no F1 (not "None")."""
    if edit.get("f1") is not None:
        return f"edit F1 vs gold: {edit['f1']:g}"
    return f"edit F1 not computed: {edit['error']}" if edit.get("error") else "no edit to compare with the gold patch"


def _batch_items(args: argparse.Namespace) -> tuple[list[tuple[str, object]], str, object]:
    """(id, item) pairs (SWE-bench instances, or local task rows from --tasks), the default run id, the sources."""
    from pinpoint.agent.solve import load_local_tasks

    if args.tasks:
        rows = load_local_tasks(Path(args.tasks))
        return [(row["instance_id"], row) for row in rows], Path(args.tasks).stem, None
    selection = selection_from_args(args)
    return [(i.instance_id, i) for i in selection.instances], dataset_run_id(args.dataset), selection.sources


def _cmd_batch(args: argparse.Namespace) -> int:
    from pinpoint.agent.batch import run_batch
    from pinpoint.agent.solve import claim_run_folder, layout_for
    from pinpoint.environments.executor import executor_for

    config = config_from_args(args)
    use_registry(args.registry)
    items, default_id, sources = _batch_items(args)
    _endpoint_preflight(config)
    layout = layout_for(config, default_id)
    claim_run_folder(layout, config, args.fresh)
    done = {} if args.fresh else read_predictions(layout.predictions)
    todo = [(i, item) for i, item in items if i not in done]
    with executor_for(args.backend, args.address, args.workers, env_names=[config.llm.api_key_env]) as executor:
        console.print(f"pinpoint batch: {len(items)} tasks, {len(items) - len(todo)} already in "
                      f"{layout.predictions}, {len(todo)} to run with {executor.describe()}")
        counts = run_batch(todo, executor, config, layout, evaluate=args.evaluate, sources=sources,
                           fresh=args.fresh, console=console, quiet=args.quiet)
    line = (f"pinpoint batch: {counts.submitted} submitted, {counts.other} ended otherwise, "
            f"{counts.failed} failed ({counts.infrastructure} of them infrastructure; rerun to retry)")
    if args.evaluate:
        line += f", {counts.resolved} resolved"
    console.print(line + f"; predictions in {layout.predictions}")
    return 1 if counts.failed else 0


# -- a team's own repository ---------------------------------------------------------------------------------------
def _cmd_fix(args: argparse.Namespace) -> int:
    """Exit 0 with a patch, 1 without one, 2 on bad input or an infrastructure failure (the guard's)."""
    from pinpoint.agent.fix import (
        FixRequest,
        check_branch,
        create_branch,
        fix_layout,
        fix_repository,
        read_issue,
    )
    from pinpoint.agent.preflight import dirty_paths
    from pinpoint.agent.runner import INFRA_STATUSES, RunInterrupted

    config = config_from_args(args)
    if args.test_cmd is not None and not args.test_cmd.strip():
        raise UsageError("--test-cmd is empty; give the command that runs your tests, or leave the flag out")
    if config.budget.max_steps < 1:
        raise UsageError(f"budget.max_steps {config.budget.max_steps}: give at least 1 model turn")
    issue_id, text = read_issue(args.issue)
    request = FixRequest(args.repo, issue_id, text, args.test_cmd, args.local, args.python, args.offline,
                         dirty=args.allow_dirty, extras=_names(args.extras), groups=_names(args.group))
    if args.branch and not request.is_local:
        raise UsageError("--branch needs a local repository path (a git URL has no working copy to branch in)")
    if args.branch:
        check_branch(args.repo, args.branch)
    dirty = dirty_paths(args.repo) if request.is_local else []
    if dirty and not args.allow_dirty:
        raise UsageError(f"{args.repo} has uncommitted changes ({', '.join(dirty[:3])}{' …' if len(dirty) > 3 else ''})"
                         "; commit or stash them, or pass --allow-dirty to work on the working tree as it is")
    if dirty and args.branch:
        raise UsageError("--branch with --allow-dirty: the patch is relative to your uncommitted changes; commit "
                         "them first")
    if dirty:
        _log(f"pinpoint fix: --allow-dirty: working on the working tree of {args.repo} ({len(dirty)} changed files)")
    _endpoint_preflight(config)
    with status_line(args) as status:
        outcome = fix_repository(request, config, fix_layout(config, request, _log), fresh=args.fresh, log=_log,
                                 on_progress=status)
    result = outcome.result
    _print_fix(request.title, outcome)
    if result.status in INFRA_STATUSES:
        raise RunInterrupted(f"infrastructure failure ({result.status}): {result.detail}; the trajectory is kept "
                             "and the same command resumes from the step that failed")
    if args.branch:
        if not result.patch.strip():
            _log("pinpoint fix: no branch created: the patch is empty")
            return 1
        sha = create_branch(args.repo, args.branch, outcome.commit, result.patch,
                            f"{request.title[:72]}\n\nPatch by pinpoint fix (status: {result.status}, issue "
                            f"{issue_id}).")
        print(f"branch: {args.branch} at {sha[:12]} in {Path(args.repo).resolve()}")
    return 0 if result.patch.strip() else 1


def _names(values: list[str] | None) -> tuple[str, ...] | None:
    """`--extras a,b --extras c` as ('a', 'b', 'c'); None when not given."""
    names = tuple(n.strip() for value in values or [] for n in value.split(",") if n.strip())
    return names or None


def _print_fix(title: str, outcome) -> None:
    """The results, on stdout and unwrapped (full paths a script can read): verdict, files, what to run next."""
    result, tests = outcome.result, outcome.final_tests
    untested = ("not run (no --test-cmd)" if not outcome.test_command else
                f"not run (the run ended with {result.status})")
    verdict = (untested if tests is None else
               f"{'PASS' if tests.ok else 'FAIL'} ({tests.passed} passed, {tests.failed} failed)")
    rows = [("issue", title), ("run", outcome.began), ("status", f"{result.status} {result.detail}".strip()),
            ("steps", result.steps), ("tokens", f"{result.prompt_tokens} in / {result.completion_tokens} out"),
            ("edited lines", result.edited_lines["total"]), ("tests on the final patch", verdict),
            ("patch", outcome.patch_file.resolve()), ("trajectory", Path(result.trajectory).resolve()),
            ("inspect", f"pinpoint inspect {shlex.quote(str(outcome.run_dir.resolve()))}")]
    for key, value in rows:
        print(f"{key}: {value}")


def _log(line: str) -> None:
    """Progress and notices go to stderr, so `pinpoint fix ... > out` captures only the results."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _endpoint_preflight(config: Config) -> None:
    """The endpoint answers before any container or model call; the server's model is used when none was named."""
    from pinpoint.agent.preflight import check_endpoint

    config.llm = check_endpoint(config.llm)


# -- demo and show ---------------------------------------------------------------------------------------------------
#: small enough to finish in a few minutes on 2 CPUs with the embedded model
DEMO_DEFAULTS = {"budget.max_steps": 2, "search.k": 3, "search.rounds": 1, "llm.max_tokens": 128,
                 "llm.timeout_s": 600.0, "budget.max_wall_s": 900.0, "agent.show_suspects": 3}


def _cmd_demo(args: argparse.Namespace) -> int:
    from pinpoint.agent.demo import build_demo_repo, repair_summary, run_demo
    from pinpoint.agent.solve import layout_for
    from pinpoint.agent.trajectory import render

    config = config_from_args(args, DEMO_DEFAULTS)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pinpoint-demo-") as tmp:
        demo = build_demo_repo(Path(tmp) / "numeric-helpers", args.bug)
        console.rule("[bold]pinpoint demo")
        console.print(f"A real bug from HumanEvalFix ({args.bug}) in a small repository; model: "
                      f"{config.llm.base_url or 'embedded SmolLM2-135M-Instruct (offline)'}")
        console.print(f"[bold]issue[/]\n{demo.task.problem_statement}\n")
        shown = run_demo(demo, config, layout_for(config, "demo"))
    render(shown.trajectory, Console(), full=False)
    result, verdict = shown.result, shown.verdict
    console.rule("[bold]verdict")
    console.print(f"localization: the known buggy line {demo.buggy_path}:{demo.buggy_lines} ranks "
                  f"{'#' + str(shown.rank) if shown.rank else 'outside the suspects'} among suspect lines")
    console.print(f"run status: {result.status} {result.detail}".rstrip())
    console.print(f"search candidates: {len(shown.trajectory.get('candidates') or [])}, "
                  f"edited lines: {result.edited_lines['total']}")
    console.print(f"repair: {repair_summary(shown.trajectory)}", markup=False, highlight=False)
    console.print(f"tests on the final patch: [{'green' if verdict.ok else 'red'}]"
                  f"{'PASS' if verdict.ok else 'FAIL'}[/] ({verdict.passed} passed, {verdict.failed} failed)")
    console.print(f"trajectory: {result.trajectory}  (pinpoint show {result.trajectory})")
    console.print(f"demo took {time.monotonic() - started:.0f}s")
    console.print(f"see it in a browser: pinpoint inspect {shlex.quote(str(Path(result.trajectory).parent))}",
                  soft_wrap=True)
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from pinpoint.agent.trajectory import load_trajectory, render

    data = load_trajectory(args.trajectory)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        render(data, Console(), full=args.full)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    run = add_command(subparsers, "run", "repair one SWE-bench instance in its container", RUN_EXAMPLES,
                      ENV_HELP + EXIT_HELP)
    run.add_argument("instance_id", help="the SWE-bench instance id")
    dataset_args(run, many=False)
    run.add_argument("--evaluate", action="store_true", help="grade the patch with the official harness logic")
    _quiet_arg(run, "live status line")
    _fresh_arg(run)
    _config_args(run)
    run.set_defaults(func=_cmd_run)

    batch = add_command(subparsers, "batch", "repair many instances; resumable; appends to preds.jsonl",
                        BATCH_EXAMPLES, ENV_HELP + BATCH_EXIT_HELP)
    dataset_args(batch)
    batch.add_argument("-n", "--limit", type=int, help="at most this many instances")
    batch.add_argument("--tasks", type=Path, metavar="FILE", help="JSONL of local tasks {instance_id, "
                       "problem_statement, repo_path, base_commit?, test_command?} run on local checkouts instead of "
                       "SWE-bench containers")
    workers_arg(batch, "tasks at once")
    executor_args(batch)
    registry_arg(batch)
    batch.add_argument("--evaluate", action="store_true", help="grade each prediction as it is made")
    _quiet_arg(batch, "per-instance status table")
    _fresh_arg(batch)
    _config_args(batch)
    batch.set_defaults(func=_cmd_batch)
    _fix_parser(subparsers)

    demo = add_command(subparsers, "demo", "offline demo: embedded model on a real HumanEvalFix bug",
                       "pinpoint demo\npinpoint demo --bug Python/23\n"
                       "pinpoint demo --base-url http://localhost:8000/v1 --model Qwen2.5-Coder-32B-Instruct")
    demo.add_argument("--bug", default="Python/2", help="HumanEvalFix task id (Python/2, Python/23, Python/45, ...)")
    _config_args(demo, results=("output",))
    demo.set_defaults(func=_cmd_demo)

    show = add_command(subparsers, "show", "render a trajectory file",
                       "pinpoint show runs/fix/default/trajectory.json\n"
                       "pinpoint show runs/fix/default/trajectory.json --full\n"
                       "pinpoint show trajectory.json --json | jq .events")
    show.add_argument("trajectory", help="a trajectory.json file")
    show.add_argument("--full", action="store_true", help="do not shorten long messages")
    show.add_argument("--json", action="store_true", help="print the trajectory as JSON on stdout instead of the "
                      "rendering")
    show.set_defaults(func=_cmd_show)


RUN_EXAMPLES = """\
pinpoint run psf__requests-2317
pinpoint run psf__requests-2317 --evaluate --base-url http://localhost:8000/v1 --model Qwen2.5-Coder-32B-Instruct
pinpoint run django__django-11099 --source django/django=~/src/django --set budget.max_steps=20 -o ~/runs"""
BATCH_EXAMPLES = """\
pinpoint batch -i psf__requests-2317 -i psf__requests-1142 --evaluate
pinpoint batch --repos psf/requests -n 10 -j 4 -o ~/runs --run-id requests-10
pinpoint batch --tasks my_tasks.jsonl --backend ray -j 8"""
FIX_EXAMPLES = """\
pinpoint fix . --issue issue.txt --test-cmd "python -m pytest -q tests"
pinpoint fix https://github.com/OWNER/REPO --issue OWNER/REPO#42
pinpoint fix ~/src/app --issue issue.md --local --branch pinpoint/fix-42 --set budget.max_steps=20"""


def _fix_parser(subparsers: argparse._SubParsersAction) -> None:
    """`pinpoint fix`'s arguments."""
    fix = add_command(subparsers, "fix", "repair your own repository from an issue", FIX_EXAMPLES,
                      ENV_HELP + EXIT_HELP)
    fix.add_argument("repo", help="local repository path or git URL")
    fix.add_argument("--issue", required=True, help="a text file, a `gh issue view N --json title,body` export, "
                     "a GitHub issue URL or OWNER/REPO#N (GITHUB_TOKEN or GH_TOKEN for private ones)")
    fix.add_argument("--test-cmd", help="command whose success means fixed (e.g. 'python -m pytest -q tests')")
    fix.add_argument("--local", action="store_true", help="run on a local checkout instead of a container")
    fix.add_argument("--branch", help="also commit the patch to this new branch of the (local) repository")
    fix.add_argument("--python", default="3.11", help="Python version of the container (default 3.11)")
    fix.add_argument("--offline", action="store_true", help="build the container without network access")
    fix.add_argument("--extras", action="append", metavar="NAME[,NAME]", help="the project's extras that hold its "
                     "test dependencies (default: test, tests, testing, else dev, when declared)")
    fix.add_argument("--group", action="append", metavar="NAME", help="a dependency group (PEP 735, PDM or Poetry) "
                     "that holds test dependencies (repeatable; default: test, tests, testing, else dev)")
    fix.add_argument("--allow-dirty", action="store_true", help="work on the working tree's uncommitted changes "
                     "(default: refuse a repository with uncommitted changes to tracked files)")
    _quiet_arg(fix, "live status line")
    _fresh_arg(fix)
    _config_args(fix)
    fix.set_defaults(func=_cmd_fix)
