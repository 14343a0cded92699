"""The `pinpoint-lab` console script: `bench` and `train` commands that measure and train the product.

Kept apart from `pinpoint` so a user's install holds none of it; each command reads the checkout's development data
(`paths.use_dev_data`) and writes under the lab's results folder.
"""

from __future__ import annotations

import argparse
import sys

from pinpoint.environments.cli import run_guarded

from pinpoint_lab import repair_cli, suites_cli
from pinpoint_lab.localization import cli as localization_cli
from pinpoint_lab.paths import use_dev_data

EXAMPLES = """examples:
  pinpoint-lab bench localize -i psf__requests-1142 --settings oracle
  pinpoint-lab bench fusion --settings issue,oracle
  pinpoint-lab train diagnostic --cached-only
  pinpoint-lab bench soak --resets 100 --commands 100 --concurrent 8"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinpoint-lab", description="pinpoint's benches and trainers",
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error (also "
                        "accepted after the command)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench = commands.add_parser("bench", help="benchmarks (figures beside a baseline from the same run)")
    bench_commands = bench.add_subparsers(dest="bench_command", metavar="COMMAND", required=True)
    train = commands.add_parser("train", help="train localization models")
    train_commands = train.add_subparsers(dest="train_command", metavar="COMMAND", required=True)
    localization_cli.register(bench_commands, train_commands)
    suites_cli.register(bench_commands)
    repair_cli.register(bench_commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one lab command; `--debug` anywhere on the line shows an unexpected error's traceback, as in `pinpoint`."""
    use_dev_data()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args([arg for arg in argv if arg != "--debug"])
    args.debug = "--debug" in argv
    return run_guarded(args)


if __name__ == "__main__":
    sys.exit(main())
