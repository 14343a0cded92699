"""`pinpoint images build|list|prune`, `pinpoint eval` and `pinpoint bench grading`."""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from pinpoint.environments.cli import (
    BENCH_EXAMPLES,
    BENCH_HELP,
    add_command,
    json_arg,
    output_arg,
    print_json,
    subcommand_group,
    workers_arg,
)
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import executor_args
from pinpoint.environments.registry import registry_arg
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.layout import RunLayout, run_id_of_predictions
from pinpoint.swebench_eval.predictions import empty_predictions, gold_predictions, read_predictions
from pinpoint.swebench_eval.selection import Selection, breadth_first, select_instances
from pinpoint.swebench_eval.sources import RepoSources


def dataset_args(parser: argparse.ArgumentParser, many: bool = True, repos: bool = True) -> None:
    """The instance-selection flags `run`, `batch`, `eval`, `images build` and the benchmarks share (`many`: the
    instance selector, `repos`: the repository selector)."""
    parser.add_argument("--dataset", help="SWE-bench rows (.jsonl/.jsonl.gz/.json/.parquet or a hub name); "
                        "default: the dev rows in the shared data folder ($PINPOINT_SHARED_DATA)")
    if many:
        instance_arg(parser, "only these instance ids")
    if many and repos:
        parser.add_argument("--repos", nargs="+", metavar="OWNER/NAME", help="only these repositories")
    parser.add_argument("--source", action="append", default=[], metavar="REPO=PATH_OR_URL|DIR",
                        help="where a repository comes from: REPO=a local path or a git URL (cloned once), or DIR, a "
                        "folder of <owner>__<name>.git.tar / .git sources (default $PINPOINT_REPOS_DIR); repeatable")


def instance_arg(parser: argparse.ArgumentParser, help: str) -> None:
    """`-i/--instance ID`, the one instance selector: repeatable, and one flag may take several ids."""
    parser.add_argument("-i", "--instance", dest="instances", action="extend", nargs="+", metavar="ID", help=help)


def sources_from_args(args: argparse.Namespace) -> RepoSources:
    folders = [item for item in args.source if "=" not in item]
    if len(folders) > 1:
        raise UsageError(f"--source {folders[1]!r}: one folder of sources at most (the other --source values are "
                         "REPO=PATH_OR_URL, e.g. psf/requests=/src/requests)")
    mapping = dict(item.split("=", 1) for item in args.source if "=" in item)
    return RepoSources(folders[0] if folders else None, mapping)


def selection_from_args(args: argparse.Namespace) -> Selection:
    """The requested instances that have a repository source; the others are named on stderr and left out."""
    selection = select_instances(args.dataset, args.instances, getattr(args, "repos", None), sources=sources_from_args(args),
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
    from pinpoint.swebench_eval.images import instance_layers, layer_means, list_images

    if args.layers:
        print(f"{'repository':<22} {'instances':>9} {'own MB':>8} {'over env MB':>11} {'amortized MB':>12}")
        rows = instance_layers()
        for m in layer_means(rows):
            print(f"{m.repo:<22} {m.instances:>9} {m.own / 1e6:>8.2f} {m.over_env / 1e6:>11.2f} "
                  f"{m.amortized / 1e6:>12.2f}")
        if args.compressed:
            _print_gzip_means(rows)
        return 0
    rows = list_images()
    for row in rows:
        print(f"{row['kind']:<9} {row['bytes'] / 1e6:>9.1f} MB  {row['tag']}")
    print(f"{len(rows)} images")
    return 0


def _print_gzip_means(rows: list[dict]) -> None:
    from pinpoint.swebench_eval.layer_gzip import gzip_means

    print("\ngzipped, as a registry stores them (MB per instance):")
    print(f"{'repository':<22} {'instances':>9} {'own':>8} {'over env':>9} {'amortized':>10} {'with env':>9}")
    for m in gzip_means(rows):
        print(f"{m.repo:<22} {m.instances:>9} {m.own / 1e6:>8.2f} {m.over_env / 1e6:>9.2f} "
              f"{m.amortized / 1e6:>10.2f} {m.with_env / 1e6:>9.2f}")


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

    if args.fidelity is not None:
        return _fidelity(args)
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
    layout = RunLayout(args.run_id or default_id, "", args.output)

    def progress(verdict, cached: bool) -> None:
        note = " (finished earlier)" if cached else f" ({verdict.build_seconds:.0f}s build, {verdict.eval_seconds:.0f}s eval)"
        print(f"{verdict.instance_id}: {verdict.outcome}{note}", flush=True)

    with executor_for(args.backend, args.address, args.workers) as executor:
        print(f"pinpoint eval: {len(predictions)} prediction(s) on {executor.describe()}", file=sys.stderr)
        summary = run_eval(instances, predictions, layout, rerun=args.rerun, timeout=args.timeout,
                           on_result=progress, sources=selection.sources, executor=executor)
    _print_table(instances, summary)
    return 0


def _bench_grading(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval.grading_bench import bench_grading, format_row, format_totals

    selection = selection_from_args(args)
    if not selection.instances:
        raise UsageError("no instance to grade (is its repository in a --source folder?)")
    figures = bench_grading(selection.instances, selection.sources, timeout=args.timeout,
                            on_row=lambda row: args.json or print(format_row(row), flush=True))
    if args.json:
        print_json(figures)
    else:
        print(format_totals(figures))
    return 0 if figures["rows_agree"] == figures["rows_total"] else 1


def _bench_published(args: argparse.Namespace) -> int:
    from pinpoint.swebench_eval import published_bench as bench

    if not args.run.is_dir():
        raise UsageError(f"{args.run}: no such folder (a published run: preds.jsonl and logs/<id>/report.json)")
    run = bench.load_published(args.run)
    args.instances = args.instances or sorted(set(run.predictions) & set(run.official))
    selection = selection_from_args(args)
    if not selection.instances:
        raise UsageError(f"{args.run}: no row of it has an offline repository and a dataset row")
    figures = bench.bench_published(run, selection.instances, args.output, selection.sources, args.timeout,
                                    on_row=lambda row: args.json or print(bench.format_row(row), flush=True))
    if args.json:
        print_json(figures)
    else:
        print(bench.format_totals(figures))
    return 1 if figures["rows_disagree"] else 0


def _fidelity(args: argparse.Namespace) -> int:
    """`eval --fidelity [GOLD_RUN EMPTY_RUN]`: the per-repo table of a --gold run beside an --empty run."""
    from pinpoint.swebench_eval.fidelity import fidelity_table

    if len(args.fidelity) not in (0, 2):
        raise UsageError("--fidelity takes no run id (the runs `gold` and `empty`) or two: GOLD_RUN EMPTY_RUN")
    gold_run, empty_run = args.fidelity or ("gold", "empty")
    instances = selection_from_args(args).instances
    gold, empty = RunLayout(gold_run, "gold", args.output), RunLayout(empty_run, "empty", args.output)
    table, misses = fidelity_table(instances, gold.folder / "eval", empty.folder / "eval")
    print(table)
    for miss in misses:
        print(f"- {miss}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    images = subcommand_group(subparsers, "images", "build, list and prune SWE-bench instance images",
                              "pinpoint images build -i psf__requests-2317\npinpoint images list")
    build = add_command(images, "build", "build the env and instance layers of the selected instances",
                        "pinpoint images build -i psf__requests-2317 -i django__django-11099\n"
                        "pinpoint images build --repos psf/requests -j 4\n"
                        "pinpoint images build --backend ray --all-nodes")
    dataset_args(build)
    workers_arg(build, "builds at once")
    executor_args(build)
    build.add_argument("--all-nodes", action="store_true", help="build on every node of the cluster, not only "
                       "where Ray places each build")
    registry_arg(build)
    build.set_defaults(func=_images_build)
    listing = add_command(images, "list", "list the images this harness built",
                          "pinpoint images list\npinpoint images list --layers\n"
                          "pinpoint images list --layers --compressed")
    listing.add_argument("--layers", action="store_true", help="instead, per repository: the mean bytes of its "
                         "built instance layers over their reference, over their env image, and amortized "
                         "(the reference's bytes shared over the instances on it)")
    listing.add_argument("--compressed", action="store_true", help="with --layers, also the same means gzipped as "
                         "a registry stores and serves the layers, and with the env layers shared over the "
                         "instances (reads every instance image once with docker save: seconds per image)")
    listing.set_defaults(func=_images_list)
    prune = add_command(images, "prune", "remove instance images (and env images with --all)",
                        "pinpoint images prune\npinpoint images prune --all")
    prune.add_argument("--all", action="store_true", help="also remove the shared env layers")
    prune.set_defaults(func=_images_prune)
    _eval_parser(subparsers)

    bench = subcommand_group(subparsers, "bench", BENCH_HELP, BENCH_EXAMPLES)
    grading = add_command(bench, "grading",
                          "pooled grading (warm box reset in place) beside fresh containers: per-test agreement and "
                          "time per row, gold and empty",
                          "pinpoint bench grading\npinpoint bench grading -i psf__requests-2931 -i "
                          "psf__requests-1142 --json > grading.json")
    dataset_args(grading, repos=False)
    grading.set_defaults(instances=["psf__requests-2931"], repos=None)
    grading.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    json_arg(grading)
    grading.set_defaults(func=_bench_grading)
    _published_parser(bench)


def _published_parser(bench: argparse._SubParsersAction) -> None:
    published = add_command(bench, "published", "grade a published agent run (preds + official report.json files) "
                            "and print agreement per row and per FAIL_TO_PASS/PASS_TO_PASS test; resumes",
                            "pinpoint bench published tests/data/published_runs/20251118_mini-swe-agent_gemini-3-pro"
                            "\npinpoint bench published RUN_DIR -i sympy__sympy-20801 --json > agreement.json")
    published.add_argument("run", type=Path, help="the run folder: preds.jsonl (or all_preds.jsonl, preds.json) and "
                           "logs/<instance>/report.json")
    dataset_args(published, repos=False)
    output_arg(published)
    published.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    json_arg(published)
    published.set_defaults(func=_bench_published)


def _eval_parser(subparsers: argparse._SubParsersAction) -> None:
    evaluate = add_command(subparsers, "eval", "grade predictions on SWE-bench instances like the official harness",
                           "pinpoint eval --predictions runs/swebench_verified_dev/m/preds.jsonl\n"
                           "pinpoint eval --gold -i psf__requests-2317 -j 4\n"
                           "pinpoint eval --empty --repos psf/requests\n"
                           "pinpoint eval --fidelity      # the `gold` run beside the `empty` run, per repository")
    which = evaluate.add_mutually_exclusive_group(required=True)
    which.add_argument("--predictions", help="SWE-bench predictions (.jsonl or .json)")
    which.add_argument("--gold", action="store_true", help="evaluate the reference patches (harness fidelity)")
    which.add_argument("--empty", action="store_true", help="evaluate empty patches (must resolve nothing)")
    which.add_argument("--fidelity", nargs="*", metavar="RUN", help="instead: the per-repo table of a --gold run "
                       "beside an --empty run (default the runs `gold` and `empty`; or GOLD_RUN EMPTY_RUN)")
    dataset_args(evaluate)
    workers_arg(evaluate, "instances at once")
    executor_args(evaluate)
    registry_arg(evaluate)
    evaluate.add_argument("--rerun", action="store_true", help="redo instances that already have a report")
    evaluate.add_argument("--run-id", help="results go to <output>/<run-id>/<model>/eval/ (default: gold, empty, or "
                          "the run a <run-id>/<model>/preds.jsonl belongs to, else the file stem)")
    evaluate.add_argument("--timeout", type=float, default=1800.0, help="seconds for one eval script")
    output_arg(evaluate)
    evaluate.set_defaults(func=_eval)
