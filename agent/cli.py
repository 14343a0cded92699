"""The `pinpoint` console script: one argparse tree; each package registers its own subcommands.

Each package's `cli.py` exposes `register(subparsers)`, which adds its commands and sets `func` on each parser
(`func(args) -> int` returns the exit code); `pinpoint X Y` groups come from `environments.cli.subcommand_group`.
The agent sits on top, so it is the only place that wires them, and `main` is the one guard: an expected failure
(`PinpointError`, bad input as ValueError, a missing file) prints `pinpoint <command>: <message>` and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from environments.cli import run_guarded

#: modules that contribute subcommands, in the order they appear in --help
COMMAND_MODULES = (
    "environments.cli",
    "swebench_eval.cli",
    "localization.cli",
    "agent.commands",
    "agent.inspector.cli",
    "environments.rl.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinpoint", description="Agentic repository repair with line-level localization.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module: surface it
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_guarded(args)


if __name__ == "__main__":
    sys.exit(main())
