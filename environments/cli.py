"""`pinpoint env up|prune`, `pinpoint bench env`, `pinpoint bench sandbox` and `pinpoint bench soak`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pinpoint.environments.errors import PinpointError, UsageError, is_storage_failure
from pinpoint.environments.files import write_json_atomic


def run_guarded(args: argparse.Namespace) -> int:
    """Run the parsed command; an expected failure (PinpointError, bad input as ValueError, a missing file) prints
    `pinpoint <command>: <message>` and exits 2, instead of a traceback. Anything else is a bug and keeps its own."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("pinpoint: interrupted; results already written are kept", file=sys.stderr)
        return 130
    except (PinpointError, ValueError, FileNotFoundError) as exc:
        print(f"pinpoint {command_name(args)}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full or failing disk is the machine's trouble, not a bug: say so and keep going
        if not is_storage_failure(exc):
            raise
        print(f"pinpoint {command_name(args)}: {_one_line(exc)} (free space or fix the disk, then rerun the same "
              "command: results already written are kept and it resumes)", file=sys.stderr)
        return 2


def command_name(args: argparse.Namespace) -> str:
    """`bench retrieval` for `pinpoint bench retrieval ...`: the command and its group's subcommand."""
    subs = [value for key, value in vars(args).items() if key.endswith("_command") and isinstance(value, str)]
    return " ".join([str(getattr(args, "command", "") or ""), *subs]).strip()


def _one_line(exc: BaseException) -> str:
    """The message of `exc` on one line, prefixed with its kind where that says more than the text (SpecError,
    BuildError)."""
    text = " ".join(str(exc).split()) or type(exc).__name__  # one line: a YAML or apply log spans several
    kind = type(exc).__name__
    return text if kind in ("ValueError", "UsageError", "ConfigError", "DatasetError") else f"{kind}: {text}"


BENCH_HELP = "benchmarks (figures beside a baseline from the same run)"


def subcommand_group(subparsers, name: str, help: str) -> argparse._SubParsersAction:
    """The sub-subparsers of `name`, created on first use, so several packages can add `pinpoint <name> X`."""
    parser = subparsers.choices.get(name) or subparsers.add_parser(name, help=help)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")


def register(subparsers) -> None:
    env = subcommand_group(subparsers, "env", "Docker engine and containers")
    up = env.add_parser("up", help="make sure a Docker engine answers (installs docker.io and starts dockerd as root)")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a started dockerd")
    up.add_argument("--save-base", action="store_true", help="also save the base images this engine has as tarballs "
                    "under $PINPOINT_CACHE/images (the builder saves the ones it builds; `env up` loads them)")
    up.set_defaults(func=_up)
    prune = env.add_parser("prune", help="remove your pinpoint containers whose run has ended (--all: everyone's, "
                                         "running or not)")
    prune.add_argument("--run-id", help="every container of this run (label pinpoint.run), running or not")
    prune.add_argument("--all", action="store_true", dest="every",
                       help="every pinpoint container on this engine, any user's, running runs' too")
    prune.set_defaults(func=_prune)

    bench = subcommand_group(subparsers, "bench", BENCH_HELP)
    env_bench = bench.add_parser("env", help="container start, reset, command round trip, concurrency vs baseline")
    env_bench.add_argument("--json", type=Path, help="also write the figures to this file as one JSON object")
    env_bench.add_argument("--concurrency", type=int, default=8, help="environments started at once (default 8)")
    env_bench.add_argument("--repeats", type=int, default=20, help="samples per timed operation (default 20)")
    env_bench.add_argument("--image", help="repository image to use (default: psf/requests, built if missing)")
    env_bench.set_defaults(func=_bench)
    sandbox = bench.add_parser("sandbox", help="the adversarial suite: each attack and whether it was contained")
    sandbox.add_argument("--json", type=Path, help="also write the outcomes to this file as one JSON object")
    sandbox.add_argument("--image", help="repository image to attack (default: psf/requests, built if missing)")
    sandbox.add_argument("--disk-limit", default="512m", help="disk bound for the run (default 512m: fillers hit it fast)")
    sandbox.add_argument("--mem-limit", default="1g", help="memory bound for the run (default 1g)")
    sandbox.add_argument("--pids-limit", type=int, default=256, help="process bound for the run (default 256)")
    sandbox.add_argument("--command-user", default="root", help="who commands run as: root (default) or a uid")
    sandbox.set_defaults(func=_bench_sandbox)
    soak = bench.add_parser("soak", help="many resets and commands in one environment, many environments at once: "
                                         "leaks and p95 drift")
    soak.add_argument("--json", type=Path, help="also write the figures to this file as one JSON object")
    soak.add_argument("--image", help="repository image (default: psf/requests, built if missing)")
    soak.add_argument("--resets", type=int, default=1000, help="dirty-then-reset cycles in one environment")
    soak.add_argument("--commands", type=int, default=1000, help="commands in the same environment")
    soak.add_argument("--concurrent", type=int, default=64, help="environments started at once")
    soak.set_defaults(func=_bench_soak)


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

    named = args.every or bool(args.run_id)  # a run named by its id is pruned whole, whoever started it
    removed = prune_containers(client(), args.run_id, every_user=named, orphans_only=not named)
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
    Console(width=max(Console().width, 110)).print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.json, figures, indent=2)
        print(f"wrote {args.json}")
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
    Console(width=max(Console().width, 160)).print(table)
    print(f"attacks contained: {figures['contained']} / {figures['tried']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.json, figures, indent=2)
        print(f"wrote {args.json}")
    return 0 if figures["contained"] == figures["tried"] else 1


def _bench_soak(args) -> int:
    from pinpoint.environments.bench import bench_image
    from pinpoint.environments.soak import run_soak

    if min(args.resets, args.commands, args.concurrent) < 1:
        raise UsageError("--resets, --commands and --concurrent must be >= 1")
    figures = run_soak(args.image or bench_image(), resets=args.resets, commands=args.commands,
                       concurrent=args.concurrent)
    one, crowd = figures["one_environment"], figures["at_once"]
    for what in ("reset", "command"):
        f = one[what]
        print(f"{what:8} p50 {f['p50_ms']} ms, p95 {f['p95_ms']} ms; p95 first tenth {f['first_tenth_p95_ms']} ms, "
              f"last tenth {f['last_tenth_p95_ms']} ms ({f['last_vs_first_p95']}x)")
    print(f"resets left dirty: {one['dirty_after_reset']} / {one['resets']}; commands failed: "
          f"{one['failed_commands']} / {one['commands']}")
    print(f"{crowd['environments']} environments at once: {crowd['failures']} failed, wall {crowd['wall_s']} s, "
          f"per environment p50 {crowd['env_p50_ms']} ms, p95 {crowd['env_p95_ms']} ms")
    print("leaked after the soak: " + ", ".join(f"{k} {v}" for k, v in figures["leaked"].items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.json, figures, indent=2)
        print(f"wrote {args.json}")
    clean = figures["leak_free"] and not one["dirty_after_reset"] and not one["failed_commands"]
    return 0 if clean and not crowd["failures"] else 1
