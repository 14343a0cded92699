"""The guard every `pinpoint` command runs under, the helpers that give each command its examples, and
`pinpoint env up|prune`, `pinpoint bench env|sandbox`."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import traceback
from pathlib import Path

from pinpoint.environments.errors import PinpointError, UsageError, is_storage_failure


def run_guarded(args: argparse.Namespace) -> int:
    """Run the parsed command. pinpoint's own expected failures (PinpointError: bad input, an engine down) print
    `pinpoint <command>: <message>` and exit 2; anything else is a bug: one line that says so and exit 1, or the
    traceback with `--debug`."""
    debug = bool(getattr(args, "debug", False))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("pinpoint: interrupted; results already written are kept", file=sys.stderr)
        return 130
    except PinpointError as exc:
        if debug:
            traceback.print_exc()
        print(f"pinpoint {command_name(args)}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the one place a bug becomes one line instead of a traceback
        if debug:
            traceback.print_exc()
        if is_storage_failure(exc):  # a full or failing disk is the machine's trouble, not a bug: say so
            print(f"pinpoint {command_name(args)}: {_one_line(exc)} (free space or fix the disk, then rerun the same "
                  "command: results already written are kept and it resumes)", file=sys.stderr)
            return 2
        if not debug:
            print(f"pinpoint {command_name(args)}: unexpected error: {type(exc).__name__}: {_text(exc)} (rerun with "
                  "--debug for the traceback)", file=sys.stderr)
        return 1


def command_name(args: argparse.Namespace) -> str:
    """`bench grading` for `pinpoint bench grading ...`: the command and its group's subcommand."""
    subs = [value for key, value in vars(args).items() if key.endswith("_command") and isinstance(value, str)]
    return " ".join([str(getattr(args, "command", "") or ""), *subs]).strip()


def _text(exc: BaseException) -> str:
    """The message of `exc` on one line (a YAML or apply log spans several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _one_line(exc: BaseException) -> str:
    """The message of `exc` on one line, prefixed with its kind where that says more than the text (SpecError,
    BuildError)."""
    kind = type(exc).__name__
    return _text(exc) if kind in ("UsageError", "ConfigError", "DatasetError") else f"{kind}: {_text(exc)}"


def epilog(examples: str, notes: str = "") -> str:
    """A command's `--help` tail: its examples, then any notes, wrapped to the terminal's usual width."""
    parts = ["examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  ")] if examples.strip() else []
    return "\n\n".join(parts + ([textwrap.fill(notes, 100)] if notes else []))


def add_command(subparsers, name: str, help: str, examples: str, notes: str = "") -> argparse.ArgumentParser:
    """`pinpoint ... <name>`, whose --help says what it does and ends with its examples."""
    return subparsers.add_parser(name, help=help, description=help, epilog=epilog(examples, notes),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


BENCH_HELP = "benchmarks (figures beside a baseline from the same run)"


def subcommand_group(subparsers, name: str, help: str, examples: str = "") -> argparse._SubParsersAction:
    """The sub-subparsers of `name`, created on first use, so several packages can add `pinpoint <name> X`."""
    parser = subparsers.choices.get(name) or add_command(subparsers, name, help, examples)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    parser.set_defaults(func=lambda args: parser.print_help() or 2)  # `pinpoint <name>` alone: its commands
    return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")


def register(subparsers) -> None:
    env = subcommand_group(subparsers, "env", "Docker engine and containers", "pinpoint env up\npinpoint env prune")
    up = add_command(env, "up", "make sure a Docker engine answers (installs docker.io and starts dockerd as root)",
                     "pinpoint env up\npinpoint env up --timeout 300 --save-base")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a started dockerd")
    up.add_argument("--save-base", action="store_true", help="also save the base images this engine has as tarballs "
                    "under $PINPOINT_CACHE/images (the builder saves the ones it builds; `env up` loads them)")
    up.set_defaults(func=_up)
    prune = add_command(env, "prune", "remove your pinpoint containers whose run has ended (--all: everyone's, "
                        "running or not)", "pinpoint env prune\npinpoint env prune --label 3f2a9c1b7d4e\n"
                        "pinpoint env prune --all")
    prune.add_argument("--label", metavar="ID", help="every container whose pinpoint.run label is ID (the `run id:` "
                       "a command that starts boxes prints first), running or not")
    prune.add_argument("--all", action="store_true", dest="every",
                       help="every pinpoint container on this engine, any user's, running runs' too")
    prune.set_defaults(func=_prune)

    bench = subcommand_group(subparsers, "bench", BENCH_HELP, BENCH_EXAMPLES)
    env_bench = add_command(bench, "env", "container start, reset, command round trip, concurrency vs baseline",
                            "pinpoint bench env\npinpoint bench env --concurrency 4 --repeats 10 --json > env.json")
    json_arg(env_bench)
    env_bench.add_argument("--concurrency", type=int, default=8, help="environments started at once (default 8)")
    env_bench.add_argument("--repeats", type=int, default=20, help="samples per timed operation (default 20)")
    env_bench.add_argument("--image", help="repository image to use (default: psf/requests, built if missing)")
    env_bench.set_defaults(func=_bench)
    sandbox = add_command(bench, "sandbox", "the adversarial suite: each attack and whether it was contained",
                          "pinpoint bench sandbox\npinpoint bench sandbox --command-user 1000 --json > sandbox.json")
    json_arg(sandbox)
    sandbox.add_argument("--image", help="repository image to attack (default: psf/requests, built if missing)")
    sandbox.add_argument("--disk-limit", default="512m", help="disk bound for the run (default 512m: fillers hit it fast)")
    sandbox.add_argument("--mem-limit", default="1g", help="memory bound for the run (default 1g)")
    sandbox.add_argument("--pids-limit", type=int, default=256, help="process bound for the run (default 256)")
    sandbox.add_argument("--command-user", default="root", help="who commands run as: root (default) or a uid")
    sandbox.set_defaults(func=_bench_sandbox)


BENCH_EXAMPLES = """\
pinpoint bench env
pinpoint bench grading -i psf__requests-2931
pinpoint bench rl --json > rl.json"""


def json_arg(parser: argparse.ArgumentParser) -> None:
    """`--json`, the same switch on every command that has it: the results as JSON on stdout, nothing else there."""
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object on stdout (the "
                        "table goes to stderr)")


def workers_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """`-j/--workers N`, the same on every command that fans out."""
    parser.add_argument("-j", "--workers", type=int, default=1, help=f"{what} (local, default 1); docker slots "
                        "of a new local Ray instance (ray)")


def output_arg(parser: argparse.ArgumentParser) -> None:
    """`-o/--output DIR`, the results root of every command that writes a run folder."""
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", help="results root: a run's results go to "
                        "<output>/<run-id>/ (default: $PINPOINT_RUNS, else runs/ in the working directory)")


def print_json(value: object) -> None:
    """The results as `--json` prints them."""
    print(json.dumps(value, indent=2))


def _up(args) -> int:
    from pinpoint.environments.engine import ensure_engine

    client = ensure_engine(timeout=args.timeout)  # EngineUnavailable: the guard prints it, exit 2
    version = client.version()
    print(f"Docker engine ready: server {version.get('Version')} (API {version.get('ApiVersion')})")
    from pinpoint.environments import image_cache
    from pinpoint.environments.images import BASE_REPOSITORY

    loaded = image_cache.load_all()
    if loaded:
        print(f"loaded {len(loaded)} cached image(s) from {image_cache.tarball_dir()}: {', '.join(loaded)}")
    if args.save_base:
        for image in client.images.list(name=BASE_REPOSITORY):
            for tag in image.tags:
                if not image_cache.tarball_path(tag).exists():
                    print(f"saved {tag} to {image_cache.save_image(tag)}")
    return 0


def _prune(args) -> int:
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import prune_containers

    named = args.every or bool(args.label)  # a run named by its id is pruned whole, whoever started it
    removed = prune_containers(client(), args.label, every_user=named, orphans_only=not named)
    print(f"removed {removed} pinpoint container(s)")
    return 0


def _bench(args) -> int:
    from pinpoint.environments.bench import run_bench
    from rich.console import Console
    from rich.table import Table

    if args.repeats < 2 or args.concurrency < 1:
        raise UsageError("--repeats must be >= 2 and --concurrency >= 1")
    figures = run_bench(repeats=args.repeats, concurrency=args.concurrency, image=args.image)
    load = " / ".join(str(x) for x in figures["load_average_before"]) or "unknown"
    table = Table(title=f"pinpoint bench env ({figures['image']}, {figures['repeats']} repeats; load {load} "
                        f"on {figures['cpu_count']} cores)")
    for column in ("measure", "pinpoint", "baseline", "ratio"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    f = figures
    for q in ("p50", "p95"):
        table.add_row(f"reset() ms {q}", str(f[f"reset_ms_{q}"]),
                      f"{f[f'baseline_fresh_container_reset_ms_{q}']} (fresh container)", f"{f[f'reset_speedup_{q}']}x faster")
    table.add_row("reset() left the tree dirty", str(f["reset_incorrect"]), "", "")
    for q in ("p50", "p95"):
        table.add_row(f"container start ms {q}", str(f[f"container_start_ms_{q}"]), "", "")
    for q in ("p50", "p95"):
        ratio = f"{f['command_round_trip_speedup_p50']}x faster" if q == "p50" else ""
        table.add_row(f"no-op command (`true`) round trip ms {q}", str(f[f"command_round_trip_ms_{q}"]),
                      f"{f[f'baseline_docker_exec_round_trip_ms_{q}']} (docker exec)", ratio)
    for q in ("p50", "p95"):
        table.add_row(f"shell command (`:`, through bash) ms {q}", str(f[f"shell_command_round_trip_ms_{q}"]), "", "")
    table.add_row(f"{f['concurrent_environments']} environments at once: wall ms", str(f["concurrent_wall_ms"]),
                  f"{f['sequential_wall_ms']} (one after another)", f"{f['concurrent_speedup_vs_sequential']}x")
    table.add_row("  per environment ms p50 / p95", f"{f['concurrent_env_ms_p50']} / {f['concurrent_env_ms_p95']}",
                  "", "")
    table.add_row("  failures", str(f["concurrent_failures"]), "", "")
    Console(width=max(Console().width, 110), stderr=args.json).print(table)
    if args.json:
        print_json(figures)
    return 0


def _bench_sandbox(args) -> int:
    from pinpoint.environments.adversarial import run_suite
    from pinpoint.environments.bench import bench_image
    from rich.console import Console
    from rich.table import Table

    figures = run_suite(args.image or bench_image(), disk_limit=args.disk_limit, mem_limit=args.mem_limit,
                        pids_limit=args.pids_limit, command_user=args.command_user, log=lambda line: None)
    inside = figures["inside"]
    table = Table(title=f"pinpoint bench sandbox ({figures['image']}; uid {inside['uid']}, CapEff {inside['CapEff']}, CapBnd "
                        f"{inside['CapBnd']}, NoNewPrivs {inside['NoNewPrivs']}, writable host paths "
                        f"{len(inside['writable_host_paths'])}, disk bound: {inside['disk_bound']})")
    for column in ("attack", "tried", "status", "contained", "reset clean", "host ok"):
        table.add_column(column)
    for o in figures["attacks"]:
        table.add_row(o["attack"], o["tried"], o["status"], *("yes" if o[k] else "NO" for k in
                                                              ("contained", "reset_clean", "host_unaffected")))
    Console(width=max(Console().width, 160), stderr=args.json).print(table)
    print(f"attacks contained: {figures['contained']} / {figures['tried']}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print_json(figures)
    return 0 if figures["contained"] == figures["tried"] else 1
