"""`pinpoint images build|list|prune`, `pinpoint eval`, `pinpoint bench harness`."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from itertools import zip_longest
from pathlib import Path

from swebench_eval.datasets import DatasetError, Instance, load_instances
from swebench_eval.sources import RepoSources, SourceError


def _dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", help="SWE-bench rows (.jsonl/.jsonl.gz/.json/.parquet or a hub name); "
                        "default: ../shared/data/swebench_verified_dev.jsonl.gz")
    parser.add_argument("--instances", nargs="+", metavar="ID", help="only these instance ids")
    parser.add_argument("--repos", nargs="+", metavar="OWNER/NAME", help="only these repositories")
    parser.add_argument("--repos-dir", help="folder of <owner>__<name>.git.tar / .git sources "
                        "(default ../shared/data/repos)")
    parser.add_argument("--source", action="append", default=[], metavar="REPO=PATH_OR_URL",
                        help="where one repository comes from (a local path or a git URL, cloned once)")


def _select(args: argparse.Namespace) -> tuple[list[Instance], RepoSources]:
    """The requested instances that have a repository source; the others are named and left out."""
    overrides = dict(item.split("=", 1) for item in args.source)
    sources = RepoSources(args.repos_dir, overrides)
    instances = load_instances(args.dataset, args.instances, args.repos)
    available, missing = [], Counter()
    for instance in instances:
        try:
            sources.git_dir(instance.repo)
            available.append(instance)
        except SourceError:
            missing[instance.repo] += 1
    if missing:
        print(f"pinpoint: left out {sum(missing.values())} instances with no repository source: "
              + ", ".join(f"{repo} ({n})" for repo, n in sorted(missing.items())), file=sys.stderr)
    return available, sources


def _breadth_first(instances: list[Instance]) -> list[Instance]:
    """Every repo early, then every repo+version, then the rest: a run cut short still covers the most ground
    (one instance per repo+version first, taken round-robin over the repos)."""
    seen, first, rest = set(), [], []
    for instance in instances:
        key = (instance.repo, instance.version)
        (rest if key in seen else first).append(instance)
        seen.add(key)

    def round_robin(group: list[Instance]) -> list[Instance]:
        by_repo: dict[str, list[Instance]] = defaultdict(list)
        for instance in group:
            by_repo[instance.repo].append(instance)
        return [i for batch in zip_longest(*by_repo.values()) for i in batch if i is not None]

    return round_robin(first) + round_robin(rest)


def _images_build(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from swebench_eval.images import build_instance_image

    instances, sources = _select(args)
    failures = 0

    def build(instance: Instance) -> None:
        nonlocal failures
        try:
            record = build_instance_image(instance, sources)
            print(f"{instance.instance_id}: {record.tag} (env {record.env_seconds:.0f}s, "
                  f"instance {record.instance_seconds:.0f}s)", flush=True)
        except Exception as exc:  # report and continue with the other instances
            failures += 1
            print(f"{instance.instance_id}: build failed: {str(exc)[-600:]}", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        list(pool.map(build, _breadth_first(instances)))
    print(f"built {len(instances) - failures}/{len(instances)}")
    return 1 if failures else 0


def _images_list(args: argparse.Namespace) -> int:
    from swebench_eval.images import list_images

    rows = list_images()
    for row in rows:
        print(f"{row['kind']:<9} {row['bytes'] / 1e6:>9.1f} MB  {row['tag']}")
    print(f"{len(rows)} images")
    return 0


def _images_prune(args: argparse.Namespace) -> int:
    from swebench_eval.images import prune_images

    kinds = ("instance", "env") if args.all else ("instance",)
    removed = prune_images(kinds)
    print(f"removed {len(removed)} images ({', '.join(kinds)})")
    return 0


def _print_table(instances: list[Instance], summary: dict) -> None:
    outcome_of = {iid: outcome for outcome, ids in summary["ids"].items() for iid in ids}
    per_repo: dict[str, Counter] = defaultdict(Counter)
    for instance in instances:
        if instance.instance_id in outcome_of:
            per_repo[instance.repo][outcome_of[instance.instance_id]] += 1
    columns = ["resolved", "unresolved", "patch_failed", "no_test_output", "build_failed", "container_failed",
               "timeout"]
    print(f"{'repo':<22}{'n':>4}" + "".join(f"{c[:12]:>14}" for c in columns))
    for repo in sorted(per_repo):
        counts = per_repo[repo]
        print(f"{repo:<22}{sum(counts.values()):>4}" + "".join(f"{counts[c]:>14}" for c in columns))
    print(f"resolved {summary['resolved_instances']}/{summary['completed_instances']} completed "
          f"({summary['infra_failure_instances']} infrastructure failures); summary: {summary['summary_path']}")


def _eval(args: argparse.Namespace) -> int:
    from swebench_eval.run import empty_predictions, gold_predictions, load_predictions, run_eval

    instances, sources = _select(args)
    if args.gold:
        predictions, default_id = gold_predictions(instances), "gold"
    elif args.empty:
        predictions, default_id = empty_predictions(instances), "empty"
    else:
        predictions, default_id = load_predictions(Path(args.predictions)), Path(args.predictions).stem
        unknown = set(predictions) - {i.instance_id for i in instances}
        if unknown and args.instances is None and args.repos is None:
            print(f"pinpoint: {len(unknown)} predictions name instances not selected: "
                  f"{', '.join(sorted(unknown)[:5])}...", file=sys.stderr)
    run_id = args.run_id or default_id
    instances = _breadth_first(instances)

    def progress(verdict, cached: bool) -> None:
        note = " (finished earlier)" if cached else f" ({verdict.build_seconds:.0f}s build, {verdict.eval_seconds:.0f}s eval)"
        print(f"{verdict.instance_id}: {verdict.outcome}{note}", flush=True)

    summary = run_eval(instances, predictions, run_id, workers=args.workers, rerun=args.rerun,
                       timeout=args.timeout, runs_dir=args.runs_dir, on_result=progress, sources=sources)
    _print_table(instances, summary)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from swebench_eval.bench import bench_harness

    instances, sources = _select(args)
    if not instances:
        print("pinpoint: no instance to benchmark", file=sys.stderr)
        return 2
    figures = bench_harness(instances[0], sources)
    for key, value in figures.items():
        print(f"{key:<40} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


def _fidelity(args: argparse.Namespace) -> int:
    from swebench_eval.fidelity import fidelity_table
    from swebench_eval.paths import RUNS_DIR

    instances, _ = _select(args)
    root = (args.runs_dir or RUNS_DIR) / "eval"
    table, misses = fidelity_table(instances, root / args.gold_run, root / args.empty_run)
    print(table)
    for miss in misses:
        print(f"- {miss}")
    return 0


def _guard(handler):
    """Turn bad input into one clear line and exit code 2 instead of a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (DatasetError, SourceError, FileNotFoundError) as exc:
            print(f"pinpoint: {exc}", file=sys.stderr)
            return 2

    return run


def _subparsers_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest="bench_command", metavar="BENCH")


def register(subparsers: argparse._SubParsersAction) -> None:
    images = subparsers.add_parser("images", help="build, list and prune SWE-bench instance images")
    images_sub = images.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = images_sub.add_parser("build", help="build the env and instance layers of the selected instances")
    _dataset_args(build)
    build.add_argument("--workers", type=int, default=1)
    build.set_defaults(func=_guard(_images_build))
    images_sub.add_parser("list", help="list the images this harness built").set_defaults(func=_guard(_images_list))
    prune = images_sub.add_parser("prune", help="remove instance images (and env images with --all)")
    prune.add_argument("--all", action="store_true", help="also remove the shared env layers")
    prune.set_defaults(func=_guard(_images_prune))

    evaluate = subparsers.add_parser("eval", help="grade predictions on SWE-bench instances like the official harness")
    which = evaluate.add_mutually_exclusive_group(required=True)
    which.add_argument("--predictions", help="SWE-bench predictions (.jsonl or .json)")
    which.add_argument("--gold", action="store_true", help="evaluate the reference patches (harness fidelity)")
    which.add_argument("--empty", action="store_true", help="evaluate empty patches (must resolve nothing)")
    _dataset_args(evaluate)
    evaluate.add_argument("--workers", type=int, default=1)
    evaluate.add_argument("--rerun", action="store_true", help="redo instances that already have a report")
    evaluate.add_argument("--run-id", help="results go to runs/eval/<run-id>/ (default: gold, empty or the file stem)")
    evaluate.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    evaluate.add_argument("--runs-dir", type=Path, help="results root (default: runs/ in the project)")
    evaluate.set_defaults(func=_guard(_eval))

    fidelity = subparsers.add_parser("fidelity", help="per-repo table of a --gold run beside an --empty run")
    _dataset_args(fidelity)
    fidelity.add_argument("--gold-run", default="gold")
    fidelity.add_argument("--empty-run", default="empty")
    fidelity.add_argument("--runs-dir", type=Path)
    fidelity.set_defaults(func=_guard(_fidelity))

    bench = subparsers.choices.get("bench") or subparsers.add_parser("bench", help="benchmarks")
    harness = _subparsers_of(bench).add_parser("harness", help="image build time, bytes per instance layer, "
                                               "eval time per instance")
    _dataset_args(harness)
    harness.set_defaults(instances=["psf__requests-1142"])
    harness.add_argument("--json", help="also write the figures to this file")
    harness.set_defaults(func=_guard(_bench))

