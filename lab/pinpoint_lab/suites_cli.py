"""`pinpoint-lab bench soak|faults|inspector|harness`: the suites that measure the product at length.

Each prints its figures and, with `--json`, writes them; a suite that finds a leak or a lost group exits 1.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pinpoint.environments.errors import UsageError
from pinpoint.environments.files import write_json_atomic


def register(bench: argparse._SubParsersAction) -> None:
    """Add the suites to the lab's `bench` group."""
    soak = bench.add_parser("soak", help="many resets and commands in one environment, many environments at once: "
                                         "leaks and p95 drift")
    soak.add_argument("--image", help="repository image (default: psf/requests, built if missing)")
    soak.add_argument("--resets", type=int, default=1000, help="dirty-then-reset cycles in one environment")
    soak.add_argument("--commands", type=int, default=1000, help="commands in the same environment")
    soak.add_argument("--concurrent", type=int, default=64, help="environments started at once")
    soak.set_defaults(func=_soak)
    faults = bench.add_parser("faults", help="a GRPO-style rollout of the embedded model with a box docker-killed and "
                              "the model server restarted mid-run, then a driver SIGKILLed mid-run")
    faults.add_argument("--tasks", type=int, default=16, help="tasks (GRPO groups)")
    faults.add_argument("--samples", type=int, default=4, help="samples per task")
    faults.add_argument("--docker-tasks", type=int, default=4, help="how many tasks are SWE-bench rows in boxes")
    faults.add_argument("--on-failure", choices=["mask", "retry"], default="retry")
    faults.set_defaults(func=_faults)
    inspector = bench.add_parser("inspector", help="page load time of a 10,000-event trajectory vs a small one")
    inspector.add_argument("--trajectory", help="the real trajectory to repeat (default: the newest under the runs "
                           "root)")
    inspector.add_argument("--events", type=int, default=10_000, help="events in the large trajectory")
    inspector.set_defaults(func=_inspector)
    harness = bench.add_parser("harness", help="image build time, bytes per instance layer, eval time per instance")
    harness.add_argument("--instance", default="psf__requests-1142", help="the SWE-bench dev row measured")
    harness.set_defaults(func=_harness)
    for parser in (soak, faults, inspector, harness):
        parser.add_argument("--json", type=Path, help="also write the figures to this file as one JSON object")


def _write(path: Path | None, figures: dict) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, figures, indent=2)
        print(f"wrote {path}")


def _soak(args: argparse.Namespace) -> int:
    from pinpoint.environments.bench import bench_image

    from pinpoint_lab.soak import run_soak

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
    _write(args.json, figures)
    clean = figures["leak_free"] and not one["dirty_after_reset"] and not one["failed_commands"]
    return 0 if clean and not crowd["failures"] else 1


def _faults(args: argparse.Namespace) -> int:
    from pinpoint_lab.faults import FaultPlan, run_faults

    if min(args.tasks, args.samples) < 1 or args.docker_tasks < 0:
        raise UsageError("--tasks and --samples must be >= 1, --docker-tasks >= 0")
    plan = FaultPlan(tasks=args.tasks, samples=args.samples, docker_tasks=args.docker_tasks,
                     on_failure=args.on_failure)
    with tempfile.TemporaryDirectory(prefix="pinpoint-faults-") as tmp:
        figures = run_faults(Path(tmp), plan)
    print(json.dumps(figures, indent=1))
    _write(args.json, figures)
    run, killed = figures["faulted"], figures["killed_driver"]
    ok = run["groups_complete"] == run["groups"] and run["containers_left"] == 0 and killed["containers_left"] == 0
    return 0 if ok else 1


def _inspector(args: argparse.Namespace) -> int:
    from pinpoint_lab.inspector_bench import bench_inspector, format_bench

    if args.events < 1:
        raise UsageError("--events must be at least 1")
    result = bench_inspector(Path(args.trajectory) if args.trajectory else None, args.events)
    print(format_bench(result))
    _write(args.json, result)
    return 0


def _harness(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.selection import select_one
    from pinpoint.swebench_eval.sources import RepoSources

    from pinpoint_lab.harness_bench import bench_harness

    figures = bench_harness(select_one(args.instance, None), RepoSources())
    for key, value in figures.items():
        print(f"{key:<40} {value}")
    _write(args.json, figures)
    return 0
