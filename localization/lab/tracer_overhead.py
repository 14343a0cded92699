"""The trace runner's overhead before and after a change, on the same rows in one run (issue 27).

Per row, in one instance box with the test patch applied: the failing tests' own untraced run (the baseline), then
execution localization (`localize_bench.execution_signals`: spectrum + LDB) under an older trace runner (a git
revision's `localization/trace_runner.py`) and under the current one, the two in alternating order from row to row,
each scored as the bench scores it. One JSON line per row (seconds, ratio to the baseline, within 3x + 30 s, the
spectrum's line Hit@10 and file Acc@5, the machine's load before and after).

    .venv/bin/python -m pinpoint.localization.lab.tracer_overhead --old 6c16e42 ROW_ID ... [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pinpoint.localization import execution
from pinpoint.localization.lab import localize_bench as bench

PACKAGE = Path(__file__).resolve().parents[2]


def old_runner(revision: str, folder: Path) -> Path:
    """The trace runner as it was at `revision`, written to `folder`."""
    text = subprocess.run(["git", "show", f"{revision}:localization/trace_runner.py"], cwd=PACKAGE, check=True,
                          capture_output=True, text=True).stdout
    path = folder / "trace_runner_old.py"
    path.write_text(text)
    return path


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def variant(runtime, tests, gold, sources, runner: Path) -> dict:
    """Execution localization under one trace runner: its seconds and the spectrum's hits."""
    execution.TRACE_RUNNER = runner
    signals, cost, _ = bench.execution_signals(runtime, tests, 300.0)
    scored = bench.evaluate_row(signals, "oracle", gold, sources)
    return {"seconds": cost["execution_seconds"], "traced": cost["traced"],
            **{k: scored["spectrum"][k] for k in ("line@10", "file@5", "file@1")}}


def measure_row(instance, runners: dict[str, Path], first: str) -> dict:
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
    from pinpoint.swebench_eval.runtime import runtime_for

    runtime, _ = runtime_for(instance)
    with runtime:
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        sources = execution.Sources(runtime)
        gold = bench.gold_of(instance.patch, sources)
        row = {"row": instance.instance_id, "load_before": load()}
        execution.TRACE_RUNNER = runners["new"]
        started = time.monotonic()
        execution.run_traced(runtime, tests.failing, failing=tests.failing, trace=False)
        own = row["own_run"] = round(time.monotonic() - started, 2)
        for name in sorted(runners, key=lambda n: n != first):
            result = row[name] = variant(runtime, tests, gold, sources, runners[name])
            result.update(ratio=round(result["seconds"] / max(own, 0.01), 1), within=result["seconds"] <= 3 * own + 30)
        row["load_after"] = load()
    return row


def main(argv: list[str] | None = None) -> int:
    from pinpoint.swebench_eval.datasets import load_instances

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="+", help="instance ids (their images built)")
    parser.add_argument("--old", required=True, help="the git revision whose trace runner is 'old'")
    parser.add_argument("--out", type=Path, help="also append the JSON lines here")
    args = parser.parse_args(argv)
    instances = load_instances(ids=args.rows)
    with tempfile.TemporaryDirectory(prefix="pinpoint-tracer-overhead-") as folder:
        runners = {"old": old_runner(args.old, Path(folder)), "new": execution.TRACE_RUNNER}
        for index, instance in enumerate(instances):
            row = measure_row(instance, runners, "old" if index % 2 == 0 else "new")
            execution.TRACE_RUNNER = runners["new"]
            print(json.dumps(row), flush=True)
            if args.out:
                with args.out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
