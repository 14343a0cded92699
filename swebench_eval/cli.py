"""`pinpoint images build|list|prune`, `pinpoint eval`, `pinpoint bench harness|grading`."""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from pinpoint.environments.cli import BENCH_HELP, subcommand_group
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import executor_args
from pinpoint.environments.files import write_json_atomic
from pinpoint.environments.registry import registry_arg
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.layout import RunLayout, run_id_of_predictions
from pinpoint.swebench_eval.predictions import empty_predictions, gold_predictions, read_predictions
from pinpoint.swebench_eval.selection import Selection, breadth_first, select_instances
from pinpoint.swebench_eval.sources import RepoSources


def dataset_args(parser: argparse.ArgumentParser, many: bool = True) -> None:
    """The instance-selection flags `run`, `batch`, `eval`, `images build` and the benchmarks share."""
    parser.add_argument("--dataset", help="SWE-bench rows (.jsonl/.jsonl.gz/.json/.parquet or a hub name); "
                        "default: ../shared/data/swebench_verified_dev.jsonl.gz")
    if many:
        parser.add_argument("--instances", "--ids", nargs="+", metavar="ID", help="only these instance ids")
        parser.add_argument("--repos", nargs="+", metavar="OWNER/NAME", help="only these repositories")
    parser.add_argument("--repos-dir", help="folder of <owner>__<name>.git.tar / .git sources "
                        "(default ../shared/data/repos)")
    parser.add_argument("--source", action="append", default=[], metavar="REPO=PATH_OR_URL",
                        help="where one repository comes from (a local path or a git URL, cloned once)")


def sources_from_args(args: argparse.Namespace) -> RepoSources:
    bad = [item for item in args.source if "=" not in item]
    if bad:
        raise UsageError(f"--source {bad[0]!r}: expected REPO=PATH_OR_URL, e.g. psf/requests=/src/requests")
    return RepoSources(args.repos_dir, dict(item.split("=", 1) for item in args.source))


def selection_from_args(args: argparse.Namespace) -> Selection:
    """The requested instances that have a repository source; the others are named on stderr and left out."""
    selection = select_instances(args.dataset, args.instances, args.repos, sources=sources_from_args(args),
                                 limit=getattr(args, "limit", None), every=getattr(args, "every", None))
    selection.report_missing()
    return selection


def _images_build(args: argparse.Namespace) -> int:
    from pinpoint.environments.executor import Item, Needs, executor_for
    from pinpoint.environments.registry import use_registry
    from pinpoint.swebench_eval.images import build_instance_image

    registry = use_registry(args.registry)
    selection = selection_from_args(args)
    instances, sources = breadth_first(selection.instances), selection.sources
    failures = 0
    with executor_for(args.backend, args.address, args.workers) as executor:
        nodes = executor.node_ids() if args.all_nodes else [""]
        print(f"pinpoint images build: {len(instances)} instance(s) on {executor.describe()}"
              f"{f', on each of {len(nodes)} node(s)' if args.all_nodes else ''}"
              f"{f', registry {registry}' if registry else ''}", file=sys.stderr, flush=True)
        items = [Item(f"{i.instance_id}@{node[:12]}" if node else i.instance_id, (i, sources),
                      Needs(cpus=1.0, docker=1), node=node) for node in nodes for i in instances]
        for outcome in executor.run(build_instance_image, items):
            where = f" on node {outcome.node[:12]}" if executor.name == "ray" else ""
            iid = outcome.key.partition("@")[0]
            if outcome.error is None:
                print(f"{iid}{where}: {outcome.value.tag} ({outcome.value.describe()})", flush=True)
            else:  # report and continue with the other instances
                failures += 1
                print(f"{iid}{where}: build failed: {str(outcome.error)[-600:]}", file=sys.stderr, flush=True)
    print(f"built {len(items) - failures}/{len(items)}")
    return 1 if failures else 0


def _images_list(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.images import list_images

    rows = list_images()
    for row in rows:
        print(f"{row['kind']:<9} {row['bytes'] / 1e6:>9.1f} MB  {row['tag']}")
    print(f"{len(rows)} images")
    return 0


def _images_prune(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.images import prune_images

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
    from pinpoint.environments.executor import executor_for
    from pinpoint.environments.registry import use_registry
    from pinpoint.swebench_eval.run import run_eval

    use_registry(args.registry)
    selection = selection_from_args(args)
    instances = breadth_first(selection.instances)
    if args.gold:
        predictions, default_id = gold_predictions(instances), "gold"
    elif args.empty:
        predictions, default_id = empty_predictions(instances), "empty"
    else:
        path = Path(args.predictions)
        if not path.is_file():
            raise UsageError(f"--predictions {path}: no such file")
        predictions, default_id = read_predictions(path, check_patches=True), run_id_of_predictions(path)
        if not predictions:
            raise UsageError(f"--predictions {path}: no prediction could be read from it")
        unknown = set(predictions) - {i.instance_id for i in instances}
        if unknown and args.instances is None and args.repos is None:
            print(f"pinpoint: {len(unknown)} predictions name instances not selected: "
                  f"{', '.join(sorted(unknown)[:5])}...", file=sys.stderr)
    layout = RunLayout(args.run_id or default_id, "", args.runs_dir)

    def progress(verdict, cached: bool) -> None:
        note = " (finished earlier)" if cached else f" ({verdict.build_seconds:.0f}s build, {verdict.eval_seconds:.0f}s eval)"
        print(f"{verdict.instance_id}: {verdict.outcome}{note}", flush=True)

    with executor_for(args.backend, args.address, args.workers) as executor:
        print(f"pinpoint eval: {len(predictions)} prediction(s) on {executor.describe()}", file=sys.stderr)
        summary = run_eval(instances, predictions, layout, rerun=args.rerun, timeout=args.timeout,
                           on_result=progress, sources=selection.sources, executor=executor)
    _print_table(instances, summary)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.bench import bench_harness

    selection = selection_from_args(args)
    if not selection.instances:
        raise UsageError("no instance to benchmark (is its repository in --repos-dir?)")
    figures = bench_harness(selection.instances[0], selection.sources)
    for key, value in figures.items():
        print(f"{key:<40} {value}")
    if args.json:
        write_json_atomic(Path(args.json), figures, indent=2)
    return 0


def _bench_grading(args: argparse.Namespace) -> int:
    import json

    from pinpoint.swebench_eval.grading_bench import bench_grading, format_row, format_totals

    selection = selection_from_args(args)
    if not selection.instances:
        raise UsageError("no instance to grade (is its repository in --repos-dir?)")
    figures = bench_grading(selection.instances, selection.sources, timeout=args.timeout,
                            on_row=lambda row: print(format_row(row), flush=True))
    print(format_totals(figures))
    if args.json:
        write_json_atomic(Path(args.json), figures, indent=2)
    if args.print_json:
        print(json.dumps(figures, indent=2))
    return 0 if figures["rows_agree"] == figures["rows_total"] else 1


def _fidelity(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.fidelity import fidelity_table

    instances = selection_from_args(args).instances
    gold, empty = RunLayout(args.gold_run, "gold", args.runs_dir), RunLayout(args.empty_run, "empty", args.runs_dir)
    table, misses = fidelity_table(instances, gold.folder / "eval", empty.folder / "eval")
    print(table)
    for miss in misses:
        print(f"- {miss}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    images = subparsers.add_parser("images", help="build, list and prune SWE-bench instance images")
    images_sub = images.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = images_sub.add_parser("build", help="build the env and instance layers of the selected instances")
    dataset_args(build)
    build.add_argument("--workers", type=int, default=1, help="builds at once (local); docker slots of a new "
                       "local Ray instance (ray)")
    executor_args(build)
    build.add_argument("--all-nodes", action="store_true", help="build on every node of the cluster, not only "
                       "where Ray places each build")
    registry_arg(build)
    build.set_defaults(func=_images_build)
    images_sub.add_parser("list", help="list the images this harness built").set_defaults(func=_images_list)
    prune = images_sub.add_parser("prune", help="remove instance images (and env images with --all)")
    prune.add_argument("--all", action="store_true", help="also remove the shared env layers")
    prune.set_defaults(func=_images_prune)

    evaluate = subparsers.add_parser("eval", help="grade predictions on SWE-bench instances like the official harness")
    which = evaluate.add_mutually_exclusive_group(required=True)
    which.add_argument("--predictions", help="SWE-bench predictions (.jsonl or .json)")
    which.add_argument("--gold", action="store_true", help="evaluate the reference patches (harness fidelity)")
    which.add_argument("--empty", action="store_true", help="evaluate empty patches (must resolve nothing)")
    dataset_args(evaluate)
    evaluate.add_argument("--workers", type=int, default=1, help="instances at once (local); docker slots of a "
                          "new local Ray instance (ray)")
    executor_args(evaluate)
    registry_arg(evaluate)
    evaluate.add_argument("--rerun", action="store_true", help="redo instances that already have a report")
    evaluate.add_argument("--run-id", help="results go to <runs-dir>/<run-id>/<model>/eval/ (default: gold, empty, or the run a <run-id>/<model>/preds.jsonl belongs to, else the file stem)")
    evaluate.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    evaluate.add_argument("--runs-dir", type=Path, help="results root (default: $PINPOINT_RUNS, else runs/ in the working directory)")
    evaluate.set_defaults(func=_eval)

    fidelity = subparsers.add_parser("fidelity", help="per-repo table of a --gold run beside an --empty run")
    dataset_args(fidelity)
    fidelity.add_argument("--gold-run", default="gold")
    fidelity.add_argument("--empty-run", default="empty")
    fidelity.add_argument("--runs-dir", type=Path)
    fidelity.set_defaults(func=_fidelity)

    harness = subcommand_group(subparsers, "bench", BENCH_HELP).add_parser("harness", help="image build time, bytes per instance layer, "
                                               "eval time per instance")
    dataset_args(harness)
    harness.set_defaults(instances=["psf__requests-1142"])
    harness.add_argument("--json", help="also write the figures to this file")
    harness.set_defaults(func=_bench)

    grading = subcommand_group(subparsers, "bench", BENCH_HELP).add_parser(
        "grading", help="pooled grading (warm box reset in place) beside fresh containers: per-test agreement and "
        "time per row, gold and empty")
    dataset_args(grading)
    grading.set_defaults(instances=["psf__requests-2931"])
    grading.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    grading.add_argument("--json", help="also write the figures to this file")
    grading.add_argument("--print-json", action="store_true", help="print the figures as JSON at the end")
    grading.set_defaults(func=_bench_grading)

