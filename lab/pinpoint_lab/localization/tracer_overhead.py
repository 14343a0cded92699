"""The trace runner's overhead before and after a change, on the same rows in one run (issue 27).

Per row, each variant in a fresh instance box with the test patch applied and in a process of its own: the failing
tests' own untraced run (the baseline), then execution localization (`localize_bench.execution_signals`: spectrum
+ LDB), scored as the bench scores it. Variants: `old` is pinpoint as it was at a git revision (its package
extracted with `git archive` and imported instead of this checkout's: host code and trace runner together, so a
change that moves work between them is measured whole), `new` this checkout with the passing tests chosen by file,
`coverage` this checkout with them chosen by coverage (`collect_spectrum(select="coverage")`). The variants run in
an order that rotates from row to row. One JSON line per row (per variant: seconds, the baseline, the ratio,
within 3x + 30 s, the spectrum's, LDB's and the fused ranking's line Hit@10 and file Acc@5, also in expectation
over ties; the machine's load before and after).

    .venv/bin/python -m pinpoint_lab.localization.tracer_overhead --old 8ea7243 ROW_ID ... [--variants old,new]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]
VARIANTS = ("old", "new", "coverage")
SCORED = ("spectrum", "ldb", "fused")
METRICS = ("line@10", "file@5", "line@10~", "file@5~")


def old_package(revision: str, folder: Path) -> Path:
    """pinpoint as it was at `revision`, extracted to `folder/pinpoint`; returns the folder to put on PYTHONPATH."""
    archive = subprocess.run(["git", "archive", revision], cwd=PACKAGE, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder / "pinpoint", filter="data")
    (folder / "shared").symlink_to(PACKAGE.parent / "shared")  # the data it reads is beside its package
    return folder


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def measure_variant(row: str, select: str | None) -> dict:
    """In this process: one row's execution localization and its scores, with whichever pinpoint is imported
    (only APIs the older revisions have too)."""
    from pinpoint.localization import execution
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
    from pinpoint.swebench_eval.runtime import runtime_for

    from pinpoint_lab.localization import localize_bench as bench

    if select is not None:
        from pinpoint.localization import failing_tests

        failing_tests.PASSING_SELECTION = select
    instance = load_instances(ids=[row])[0]
    runtime, _ = runtime_for(instance)
    with runtime:
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        sources = execution.Sources(runtime)
        gold = bench.gold_of(instance.patch, sources)
        signals, cost, _ = bench.execution_signals(runtime, tests, 300.0)
        scored = bench.evaluate_row(signals, "oracle", gold, sources)
    return {"package": str(Path(execution.__file__).parents[1]), "seconds": cost["execution_seconds"],
            "own_run": cost["failing_run_seconds"], "traced": cost["traced"],
            **{name: {k: scored.get(name, {}).get(k) for k in METRICS} for name in SCORED}}


def run_variant(row: str, variant: str, old_path: Path | None) -> dict:
    """One variant of one row in a child process (`old`: the old package first on its path)."""
    env = dict(os.environ)
    # this file run as a script without its folder on the path, so the child imports whichever pinpoint its path has
    script = f"import runpy, sys; sys.argv[0] = {str(Path(__file__).resolve())!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    command = [sys.executable, "-c", script, "--variant", row]
    if variant == "old":
        env["PYTHONPATH"] = f"{old_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    else:
        command += ["--select", "file" if variant == "new" else "coverage"]
    done = subprocess.run(command, env=env, cwd=old_path if variant == "old" else None, capture_output=True,
                          text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": (done.stderr or done.stdout)[-600:]}
    result = json.loads(lines[-1])
    result.update(ratio=round(result["seconds"] / max(result["own_run"], 0.01), 1),
                  within=result["seconds"] <= 3 * result["own_run"] + 30)
    return result


def measure_row(row: str, variants: list[str], rotate: int, old_path: Path | None) -> dict:
    order = variants[rotate % len(variants):] + variants[:rotate % len(variants)]
    out = {"row": row, "order": order, "load_before": load()}
    for variant in order:
        out[variant] = run_variant(row, variant, old_path)
    out["load_after"] = load()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="+", help="instance ids (their images built)")
    parser.add_argument("--old", help="the git revision whose pinpoint is 'old'")
    parser.add_argument("--variants", default="old,new", help=f"a comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--out", type=Path, help="also append the JSON lines here")
    parser.add_argument("--variant", action="store_true", help=argparse.SUPPRESS)  # a child: one row, this process
    parser.add_argument("--select", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(measure_variant(args.rows[0], args.select)), flush=True)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS) or ("old" in variants and not args.old):
        print(f"tracer_overhead: --variants takes {', '.join(VARIANTS)} ('old' needs --old)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pinpoint-tracer-overhead-") as folder:
        old_path = old_package(args.old, Path(folder)) if "old" in variants else None
        for index, row in enumerate(args.rows):
            result = measure_row(row, variants, index, old_path)
            print(json.dumps(result), flush=True)
            if args.out:
                with args.out.open("a") as handle:
                    handle.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
