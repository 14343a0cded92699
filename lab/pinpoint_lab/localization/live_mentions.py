"""`mentions` computed live on cached oracle rows whose kept line records hit their cap.

Why: a row cached before `mentions` existed is given it from its kept line records (`localize_bench.with_mentions`),
the spectrum's best `learned_fusion.MAX_RECORDS` lines, while the agent's signal reads every line a failing test
ran. Where the records hit the cap (on some rows all of them tie at Ochiai 1.0: lines no sampled passing test ran),
the backfill never sees the lines past it, and weighs each name over fewer lines. This traces the failing tests
again in the instance's box as the bench does (the own run first, then the spectrum fitted to it), and stores the
live signal's suspects in the cached row with `mentions_live` (how many lines the failing tests ran), so the tables
score what the agent computes. Rows under the cap are left alone: there the records are every line, and the
backfill is the live signal.

`.venv/bin/python -m pinpoint_lab.localization.live_mentions --cache lab/results/localize-loro25 --instances <ids>`
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pinpoint.localization.learned_fusion import MAX_RECORDS
from pinpoint.localization.suspects import LocalizationRequest, Suspect


def live_mentions(instance, budget_s: float) -> tuple[list[Suspect], int]:
    """The `mentions` suspects of `instance`'s oracle failing tests in its box, and how many lines they ran."""
    from pinpoint.localization.execution import own_run, rank_lines
    from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests
    from pinpoint.localization.mentions import NAME
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
    from pinpoint.swebench_eval.runtime import runtime_for

    runtime, _ = runtime_for(instance)
    with runtime:
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        own = own_run(runtime, tests.failing, budget_s=budget_s)
        execution = ExecutionSignals(runtime, FailingTests("oracle", tests.failing, tests.passing), budget_s, own=own)
        found = execution.suspects(NAME, LocalizationRequest(instance.problem_statement))
        return found, len(rank_lines(execution.spectrum)) if execution.spectrum else 0


def refresh(folder: Path, ids: Sequence[str], budget_s: float, log=print) -> None:
    """Each capped row of `ids` in `folder` given its live `mentions`; one line per row, a failure included."""
    from pinpoint_lab.localization import localize_bench as lb

    known = lb.dataset_rows(set(ids))
    for iid in ids:
        path = folder / f"{iid}.json.gz"
        row = lb.read_row(path)
        if row is None or row.get("error") or iid not in known:
            log(f"{iid}: no cached dev row, skipped")
            continue
        if row.get("mentions_live") is not None or len(row.get("lines", [])) < MAX_RECORDS:
            log(f"{iid}: {'already live' if row.get('mentions_live') is not None else 'records under the cap'}")
            continue
        try:
            found, ran = live_mentions(known[iid], budget_s)
        except Exception as exc:  # one row that cannot run must not stop the others
            log(f"{iid}: failed: {lb.one_line(exc, 300)}")
            continue
        row["signals"]["mentions"] = {"suspects": [s.to_dict() for s in found]}
        row["mentions_live"] = ran
        lb.write_row(path, row)
        log(f"{iid}: {len(found)} mentions over {ran} lines the failing tests ran")


def main(argv: Sequence[str] | None = None) -> int:
    from pinpoint_lab.localization import localize_bench as lb

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=lb.ROWS_DIR, help="a `bench localize --cache` folder")
    parser.add_argument("--instances", nargs="+", required=True)
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    refresh(args.cache / f"oracle-mbfl-v{lb.ROW_VERSION}", args.instances, args.budget_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
