"""The `pinpoint` console script: one argparse tree; each package registers its own subcommands.

Each package's command module exposes `register(subparsers)`, which adds its commands and sets `func` on each
parser (`func(args) -> int` returns the exit code); `pinpoint X Y` groups come from
`environments.cli.subcommand_group`. This module is the top floor of the import order, so it is the only place
that wires them, and `main` is the one guard (`environments.cli.run_guarded`): pinpoint's own expected failures
print `pinpoint <command>: <message>` and exit 2; a bug prints one line that says so and exits 1, and `--debug`
(anywhere on the line) prints its traceback.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import signal
import sys
import threading

from pinpoint.agent import commands as agent_commands
from pinpoint.agent import config_commands
from pinpoint.environments import cli as environments_cli
from pinpoint.environments.cli import command_name, run_guarded
from pinpoint.environments.labels import checked_run_id
from pinpoint.environments.reaper import release_own_boxes
from pinpoint.inspector import cli as inspector_cli
from pinpoint.rl import cli as rl_cli
from pinpoint.swebench_eval import cli as swebench_cli

#: modules that contribute subcommands, in the order they appear in --help
COMMAND_MODULES = (agent_commands, swebench_cli, inspector_cli, config_commands, environments_cli, rl_cli)


#: commands that start boxes (a group's name: all its commands): each says its run id first
BOX_COMMANDS = ("run", "batch", "eval", "fix", "demo", "rollout", "rl rollout", "images build", "bench")


def _version() -> str:
    """The installed distribution's version (pyproject), or 'unknown' when run from an uninstalled tree."""
    try:
        return importlib.metadata.version("pinpoint-repair")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinpoint", description="Agentic repository repair with line-level localization.")
    parser.add_argument("--version", action="version", version=f"pinpoint {_version()}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error (also "
                        "accepted after the command)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args([arg for arg in argv if arg != "--debug"])
    args.debug = "--debug" in argv
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if command_name(args).split(" ")[0] in BOX_COMMANDS or command_name(args) in BOX_COMMANDS:
        args.func = _with_run_id(args.func)
    stops = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {stop: signal.getsignal(stop) for stop in stops}
    for stop in stops:  # `kill` ends a run as Ctrl-C does: trajectory "interrupted", temp folders removed
        signal.signal(stop, _terminated)
    try:
        return run_guarded(args)
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)


def _with_run_id(func):
    """`func`, after saying the run's id first (stderr, one line: the id `pinpoint env prune --label` takes);
    a bad `PINPOINT_RUN_ID` is one line, through `run_guarded` like any bad input."""
    def run(args: argparse.Namespace) -> int:
        print(f"run id: {checked_run_id()}", file=sys.stderr, flush=True)
        return func(args)
    return run


def _terminated(signum: int, frame: object) -> None:
    """Ctrl-C and SIGTERM: this process's boxes go at once (its worker threads would hold them until their
    commands end), then KeyboardInterrupt, so every `with` and `finally` on the way out runs."""
    release_own_boxes()
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
