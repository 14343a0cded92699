"""Two `pinpoint bench localize` caches of the same oracle rows, row by row: passing tests traced, not run and timed
out, whether the spectrum's and the fused top 10 agree, what each run cost. Usage: compare.py CACHE_A CACHE_B."""

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

OUTCOMES = r"(\d+) (passed|failed|not_run|timeout|error|skipped|not_found|xfailed)"
METRICS = ("spectrum line@10~", "spectrum file@5~", "fused line@10~", "fused file@5~", "ldb line@10~")


def rows(folder: str) -> dict:
    return {d["instance_id"]: d for d in (json.load(gzip.open(f)) for f in sorted(Path(folder, "oracle-v3").glob("*.json.gz")))}


def counts(traced: str) -> dict:
    return {kind: int(n) for n, kind in re.findall(OUTCOMES, traced.split(" in ")[0])}


def top(row: dict, signal: str) -> tuple:
    s = row["signals"][signal]
    return s["top_files"], s["top_functions"], s["top_lines"]


def cost(row: dict) -> tuple[float, bool, str]:
    c = row["cost"]
    ratio = c["execution_seconds"] / c["failing_run_seconds"]
    within = c["execution_seconds"] <= 3 * c["failing_run_seconds"] + 30
    return ratio, within, f"{c['execution_seconds']:.1f}/{c['failing_run_seconds']:.2f} ({ratio:.1f}x)"


def main(a_dir: str, b_dir: str) -> None:
    a, b = rows(a_dir), rows(b_dir)
    ids = sorted(set(a) & set(b))
    same = {"count": 0, "spectrum": 0, "lines": 0, "fused": 0}
    print("| row | passing traced A / B | not_run A / B | timeout A / B | spectrum same | fused same | ratio A / B |")
    print("|---|---|---|---|---|---|---|")
    for r in ids:
        x, y = a[r], b[r]
        cx, cy = counts(x["cost"]["traced"]), counts(y["cost"]["traced"])
        flags = {"count": cx.get("passed", 0) == cy.get("passed", 0),
                 "spectrum": top(x, "spectrum") == top(y, "spectrum"), "lines": x["lines"] == y["lines"],
                 "fused": top(x, "fused") == top(y, "fused")}
        for key, flag in flags.items():
            same[key] += flag
        spectrum = ("yes" if flags["spectrum"] else "NO") + ("" if flags["lines"] else " (counts differ)")
        print(f"| {r} | {cx.get('passed', 0)} / {cy.get('passed', 0)} | {cx.get('not_run', 0)} / "
              f"{cy.get('not_run', 0)} | {cx.get('timeout', 0)} / {cy.get('timeout', 0)} | {spectrum} | "
              f"{'yes' if flags['fused'] else 'NO'} | {cost(x)[2]} / {cost(y)[2]} |")
    n = len(ids)
    print(f"\nrows {n}; same passing count {same['count']}/{n}; spectrum top files/functions/lines identical "
          f"{same['spectrum']}/{n}; every spectrum line's counts identical {same['lines']}/{n}; fused identical "
          f"{same['fused']}/{n}")
    for metric in METRICS:
        signal, name = metric.split()
        print(f"{metric}: {sum(a[r]['signals'][signal][name] for r in ids):.2f} / "
              f"{sum(b[r]['signals'][signal][name] for r in ids):.2f}")
    for label, run in (("A", a), ("B", b)):
        sel = [run[r] for r in ids]
        costs = [cost(d) for d in sel]
        pytest_rows = [d for d in sel if d["repo"] == "pytest-dev/pytest"]
        print(f"run {label}: median ratio {statistics.median(c[0] for c in costs):.1f}x, within 3x+30s "
              f"{sum(c[1] for c in costs)}/{n}; spectrum top tie median "
              f"{statistics.median(d['signals']['spectrum'].get('ties_line', 0) for d in sel)} lines; pytest fused "
              f"file@5 {sum(d['signals']['fused']['file@5'] for d in pytest_rows)}/{len(pytest_rows)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
