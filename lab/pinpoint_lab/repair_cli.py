"""`pinpoint-lab bench repair`: the repair bench's command line (options, the model for the llm arm, the table)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pinpoint.agent.config import Config, load_config
from pinpoint.agent.search import embedded_scorer

from pinpoint_lab import repair_bench
from pinpoint_lab.paths import results_dir

#: the table's columns: (summary key, header, format)
COLUMNS = (("bugs", "bugs", "{}"), ("plausible", "plausible", "{:.1%}"), ("correct", "correct", "{:.1%}"),
           ("edit_f1", "edit F1", "{:.2f}"), ("median_seconds", "s/bug (median)", "{:.1f}"),
           ("median_model_calls", "model calls (median)", "{:g}"),
           ("median_candidates_run", "candidates run (median)", "{:g}"), ("localized", "localized (top-k)", "{:.1%}"),
           ("no_image", "no image", "{}"))


def register(bench: argparse._SubParsersAction) -> None:
    parser = bench.add_parser("repair", help="repair rates with edit candidates and without (LLM only) on "
                              "HumanEvalFix or SWE-bench dev rows; the failing tests are given (test-driven repair)")
    parser.add_argument("--source", choices=sorted(SOURCES), default="humanevalfix",
                        help="humanevalfix (164 bugs, local) or swebench (dev rows in their instance images, "
                        "FAIL_TO_PASS given, official grading)")
    parser.add_argument("-i", "--instance", action="append", default=[], metavar="ID",
                        help="swebench: these dev rows only (repeatable)")
    parser.add_argument("--arms", default="candidates,llm", help="comma-separated: candidates, llm")
    parser.add_argument("--limit", type=int, help="the first N bugs (default: all)")
    parser.add_argument("--out", type=Path, help="rows cache folder (default: <lab results>/repair-<source>); "
                        "bugs already there are not run again")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a config field (e.g. agent.execution=false, search.k=20)")
    parser.add_argument("--workers", type=int, default=1, help="bugs at once (default 1)")
    parser.add_argument("--json", type=Path, help="also write the summary to this file")
    parser.set_defaults(func=_repair)


def _repair(args: argparse.Namespace) -> int:
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(repair_bench.ARMS))
    if unknown:
        raise SystemExit(f"bench repair: unknown arm {', '.join(unknown)}; choose from {', '.join(repair_bench.ARMS)}")
    if args.instance and args.source != "swebench":
        raise SystemExit("bench repair: -i names SWE-bench rows; add --source swebench")
    settings, rows, run, title = SOURCES[args.source](args)
    config = load_config(defaults={**settings}, overrides=args.set)
    out = args.out or results_dir() / f"repair-{args.source}"
    ask = _model(config) if "llm" in arms else None
    results = repair_bench.bench_repair(rows, arms, out, config, ask, embedded_scorer(), workers=args.workers,
                                        run=run)
    table = {arm: repair_bench.summary(rows) for arm, rows in results.items()}
    print(title)
    print(" | ".join(["arm"] + [header for _, header, _ in COLUMNS]))
    for arm, figures in table.items():
        print(" | ".join([arm] + [fmt.format(figures[key]) if key in figures else "-" for key, _, fmt in COLUMNS]))
    print(f"rows: {out / 'rows.jsonl'}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


def _humanevalfix(args: argparse.Namespace) -> tuple[dict, list[dict], repair_bench.RunRow, str]:
    return (repair_bench.SETTINGS, repair_bench.humanevalfix(args.limit), repair_bench.run_bug,
            "HumanEvalFix, failing tests given (test-driven repair); correct = the reference's syntax tree")


def _swebench(args: argparse.Namespace) -> tuple[dict, list[dict], repair_bench.RunRow, str]:
    from pinpoint_lab import repair_swebench

    try:
        rows = repair_swebench.swebench_rows(args.instance, args.limit)
    except ValueError as exc:
        raise SystemExit(f"bench repair: {exc}") from None
    return (repair_swebench.SETTINGS, rows, repair_swebench.run_row,
            "SWE-bench Verified dev rows, FAIL_TO_PASS tests given (test-driven repair, not SWE-bench's setting); "
            "plausible = those tests pass, correct = resolved under official grading; rows without an image apart")


SOURCES = {"humanevalfix": _humanevalfix, "swebench": _swebench}


def _model(config: Config) -> repair_bench.Ask:
    """The configured model (the embedded one when no endpoint is set) as the llm arm's `ask`."""
    from pinpoint.agent.runner import make_clients

    client, diverse = make_clients(config.llm)

    def ask(prompt: str, purpose: str, diverse_answer: bool) -> str:
        return (diverse if diverse_answer else client).complete([{"role": "user", "content": prompt}]).content

    return ask
