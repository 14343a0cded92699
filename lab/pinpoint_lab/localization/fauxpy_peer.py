"""A peer baseline: FauxPy's SBFL (Ochiai, statement granularity) run in the same instance box as pinpoint's
spectrum, on the same failing tests and the same passing sample, scored with `bench localize`'s gold and metrics.

FauxPy (PyPI `fauxpy`, a pytest plugin) is installed into the throwaway box offline: its wheels and the ones it
needs (astor, cosmic-ray, stevedore, parso, coverage for the box's Python; pytest itself where the box has none)
are downloaded on the host once (`pip download`, cached under `~/.cache/pinpoint/fauxpy-wheels/`), copied in and
installed with `--no-deps`. What trips it as shipped, and what is done about each:
- it imports `pyllmut` (an LLM mutant generator, only for its MBFL) at plugin load: a stand-in module on the path;
- it calls `coverage.Coverage()`, which reads the repository's own coverage config (pytest's `.coveragerc`:
  `include = src/*` relative, `parallel`; FauxPy then scored no line at all) and warns into pytest's
  `filterwarnings = error`: a neutral rcfile named through `$COVERAGE_RCFILE`;
- pytest stops the session at a test id it cannot find, and SWE-bench's ids are cut at a space inside their
  parameters: the test files are given and a small plugin keeps the tests the ids name, as pinpoint's runner reads
  them (its `covers`);
- pytester's in-process inner sessions (pytest's own tests) load the auto-loaded plugin again and reset its
  module-level handler, so the outer report was never written: the same plugin turns autoload off for them.
FauxPy's MBFL is not run: on the cheapest row it took 1228 s (issue 25). Its ties are counted in expectation
(`ties.py`) and also broken at random (seeded by the row id); the order FauxPy prints is scored too, since that
order can flatter it.

    .venv/bin/python -m pinpoint_lab.localization.fauxpy_peer --instances ID ... [--cache DIR] [--table FILE]
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import random
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pinpoint.environments.paths import cache_dir
from pinpoint.localization.execution import Sources, sample_passing, ship_runner
from pinpoint.localization.suspects import Suspect

from pinpoint_lab.localization import localize_bench as bench
from pinpoint_lab.localization import ties
from pinpoint_lab.localization.fusion_choice import AGENT_DEFAULT
from pinpoint_lab.paths import results_dir

#: rows and the committed table
PEER_DIR = results_dir() / "fauxpy-peer"
#: pinpoint's own rows on the same instances (spectrum, fused, their costs)
PINPOINT_ROWS = bench.ROWS_DIR / f"oracle-mbfl-v{bench.ROW_VERSION}"
FAUXPY = "fauxpy==0.7.0"
PURE_WHEELS = (FAUXPY, "astor==0.8.1", "cosmic-ray==8.3.5", "stevedore", "parso")
COVERAGE = "coverage>=6.2,<7.7"
#: pytest and what it needs, for a box without it (sympy's); pure wheels
PYTEST_WHEELS = ("pytest==7.4.4", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli",
                 "typing-extensions")
#: seconds FauxPy may run on a row
BUDGET_S = 600.0

#: FauxPy imports these from pyllmut (its LLM mutant generator) when the plugin loads; only its MBFL uses them
PYLLMUT_STAND_IN = '''"""Stand-in for pyllmut: FauxPy imports it at plugin load, only its LLM MBFL uses it."""
class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("pyllmut stand-in: no LLM mutants in this box")
MutantGenerator = MutantInfo = PromptInfo = ResponseInfo = MutationReport = _Unavailable
class ModelType:
    pass
'''

#: pytest stops the whole session at one id it cannot find, and SWE-bench cuts ids at a space inside their parameters
#: (`test_x["a` for `test_x["a b"]`): the test files are given, and this plugin keeps the tests the requested ids
#: name as pinpoint's trace runner reads them (its own `covers`, the runner shipped beside the plugin); it also turns
#: plugin autoload off once the outer session has loaded FauxPy (loading FauxPy by `-p` instead lost every line on
#: pytest 5.0-5.2's own rows: its makereport hook no longer ran)
SELECT_PLUGIN = '''"""Keeps the requested tests, selected as pinpoint's trace runner selects them."""
import json
import os

from trace_runner import covers

WANTED = json.loads(open(os.environ["PINPOINT_FAUXPY_TESTS"]).read())


def pytest_configure(config):
    # pytester's in-process inner sessions (pytest's own tests) must not load FauxPy again: its handler is one
    # module-level object, and an inner session's configure (no --src) switches the outer report off
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"


def pytest_collection_modifyitems(config, items):
    keep = [item for item in items if any(covers(w, item.nodeid) for w in WANTED)]
    kept = set(map(id, keep))
    dropped = [item for item in items if id(item) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
'''

#: the repository's own coverage config must not apply (relative `source`/`data_file`, `parallel`), and coverage's
#: warnings must not reach pytest's `filterwarnings = error`
RCFILE = """[run]
branch = False
data_file = {folder}/.coverage
disable_warnings = no-data-collected, module-not-imported, module-not-measured, module-not-python,
    include-ignored, already-imported, no-ctracer, couldnt-parse
"""


@dataclass(frozen=True)
class Box:
    """What the box's interpreter is and what was added to it."""

    python: str
    added_pytest: bool


@dataclass(frozen=True)
class PeerRun:
    """What FauxPy did on one row: its ranked lines (its printed order) and the tests as it counted them."""

    suspects: list[Suspect]
    passed: int
    failed_targets: int
    failed_other: int
    seconds: float
    box: Box


# -- reading FauxPy's output --------------------------------------------------------------------------------------
def read_scores(text: str, workdir: str) -> list[Suspect]:
    """FauxPy's `Scores_Ochiai.csv` (Entity `ABS_PATH::LINE`, Score), in its order, as line suspects with paths
    relative to `workdir`; entities outside it are left out."""
    prefix = workdir.rstrip("/") + "/"
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        path, _, line = row["Entity"].rpartition("::")
        if path.startswith(prefix) and line.isdigit():
            out.append(Suspect(path[len(prefix):], int(line), int(line), float(row["Score"]), "fauxpy",
                               "Ochiai (FauxPy SBFL, statement)"))
    return out


def read_tests(db: bytes) -> tuple[int, int, int]:
    """(passed, failed and targeted, failed and not targeted) from FauxPy's `fauxpy.db`."""
    with tempfile.NamedTemporaryFile(suffix=".db") as handle:
        handle.write(db)
        handle.flush()
        with sqlite3.connect(handle.name) as connection:
            counts = dict(((t, g), n) for t, g, n in connection.execute(
                "SELECT Type, Target, COUNT(*) FROM TestCase GROUP BY Type, Target"))
    passed = sum(n for (t, _), n in counts.items() if t == "passed")
    return passed, counts.get(("failed", 1), 0), counts.get(("failed", 0), 0)


def random_ties(suspects: Sequence[Suspect], seed: str) -> list[Suspect]:
    """The same ranking with every group of equal scores shuffled (seeded: the same row gives the same order)."""
    rng, out = random.Random(seed), []
    for start, end in ties.tie_runs([s.score for s in suspects]):
        group = list(suspects[start:end])
        rng.shuffle(group)
        out += group
    return out


def targets(failing: Sequence[str]) -> list[str]:
    """The failing ids as FauxPy's `--failing-list` takes them: parameters dropped (it matches tests by their
    generalized name), `file::name` or `file::Class::name` only. (A path given as an option's value, as
    `--failing-file` takes it, moves pytest's rootdir to `/` and no test then matches its target.)"""
    names = (t.split("[", 1)[0] for t in failing)
    return list(dict.fromkeys(n for n in names if 2 <= len(n.split("::")) <= 3))


# -- the wheels, and running FauxPy in the box ----------------------------------------------------------------------
def wheels(python_tag: str, pytest: bool) -> list[Path]:
    """The wheels to install for a box whose interpreter is `python_tag` (`39`, `311`), downloaded once."""
    folder = cache_dir() / "fauxpy-wheels"
    target = ["--only-binary=:all:", "--python-version", python_tag, "--platform", "manylinux2014_x86_64",
              "--implementation", "cp"]
    groups = {f"fauxpy-cp{python_tag}": (*PURE_WHEELS, COVERAGE)}
    if pytest:
        groups[f"pytest-cp{python_tag}"] = PYTEST_WHEELS
    found = []
    for name, specs in groups.items():
        where = folder / name
        if not any(where.glob("*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where), *target,
                            *specs], check=True, capture_output=True)
        found += sorted(where.glob("*.whl"))
    return found


def install(runtime, folder: str) -> Box:
    """FauxPy installed in the box (`--no-deps`, no index; pytest too where the box has none), the stand-in, the
    selection plugin and the rcfile written."""
    probe = runtime.run("python -c 'import sys; print(\"%d%d\" % sys.version_info[:2])'; "
                        "python -c 'import pytest' 2>/dev/null && echo has-pytest", timeout=60).output.split()
    tag, has_pytest = probe[0], "has-pytest" in probe
    for wheel in wheels(tag, pytest=not has_pytest):
        runtime.write_file(f"{folder}/wheels/{wheel.name}", wheel.read_bytes())
    runtime.write_file(f"{folder}/stub/pyllmut.py", PYLLMUT_STAND_IN)
    runtime.write_file(f"{folder}/stub/pinpoint_select.py", SELECT_PLUGIN)
    ship_runner(runtime, f"{folder}/stub")
    runtime.write_file(f"{folder}/coveragerc", RCFILE.format(folder=folder))
    result = runtime.run(f"python -m pip install -q --no-deps --no-index {folder}/wheels/*.whl 2>&1", timeout=300)
    if not result.ok:
        raise RuntimeError(f"pip install in the box failed: {result.output.strip()[-300:]}")
    return Box(tag, not has_pytest)


def run_fauxpy(runtime, failing: Sequence[str], passing: Sequence[str], budget_s: float = BUDGET_S) -> PeerRun:
    """FauxPy's SBFL over `failing` + `passing` in `runtime` (the instance's box, test patch applied)."""
    folder = f"/tmp/pinpoint-fauxpy-{uuid.uuid4().hex[:12]}"
    box = install(runtime, folder)
    wanted = list(dict.fromkeys([*failing, *passing]))
    runtime.write_file(f"{folder}/tests.json", json.dumps(wanted))
    files = " ".join(shlex.quote(f) for f in dict.fromkeys(t.split("::", 1)[0] for t in wanted))
    command = (f"PINPOINT_FAUXPY_TESTS={folder}/tests.json COVERAGE_RCFILE={folder}/coveragerc "
               f"PYTHONPATH={folder}/stub${{PYTHONPATH:+:$PYTHONPATH}} "
               f"python -m pytest -p no:cacheprovider -p pinpoint_select --src . --family sbfl --granularity statement "
               f"--failing-list {shlex.quote('[' + ', '.join(targets(failing)) + ']')} {files} > {folder}/log.txt 2>&1; "
               f"ls -d /FauxPyReport_*_sbfl_statement_* 2>/dev/null | tail -1")
    started = time.monotonic()
    result = runtime.run(command, timeout=budget_s)
    seconds = round(time.monotonic() - started, 1)
    report = result.output.strip().splitlines()[-1] if result.output.strip() else ""
    scores = f"{report}/Scores_Ochiai.csv"
    if result.timed_out or not report.startswith("/FauxPyReport_") or not runtime.run(f"test -f {scores}").ok:
        why = f"ran past {budget_s:g} s" if result.timed_out else "wrote no scores"
        raise RuntimeError(f"FauxPy {why}: {log_tail(runtime, folder)}")
    run = PeerRun(read_scores(runtime.read_text(scores), runtime.workdir),
                  *read_tests(runtime.read_file(f"{report}/fauxpy.db")), seconds, box)
    if not run.failed_targets:
        raise RuntimeError(f"no targeted failing test failed under FauxPy ({run.passed} passed, {run.failed_other} "
                           f"other failures): {log_tail(runtime, folder)}")
    return run


def log_tail(runtime, folder: str) -> str:
    """The end of FauxPy's pytest log in one line (pytest's summary line is the last)."""
    return " ".join(runtime.run(f"tail -c 600 {folder}/log.txt", timeout=60).output.split())[-300:]


def peer_row(instance, budget_s: float = BUDGET_S) -> dict:
    """One row: FauxPy in the instance's box on the oracle's failing tests and the spectrum's passing sample."""
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
    from pinpoint.swebench_eval.runtime import runtime_for

    started = time.monotonic()
    runtime, _ = runtime_for(instance)
    with runtime:
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        passing = sample_passing(tests.failing, tests.passing)  # the sample pinpoint's spectrum is given
        run = run_fauxpy(runtime, tests.failing, passing, budget_s)
        sources = Sources(runtime)
        gold = bench.gold_of(instance.patch, sources)
        ran = [s for s in run.suspects if s.score > 0]  # Ochiai 0: no failing test ran the line
        return {**bench._gold_json(gold), "spans": bench.spans_json(sources, [s.path for s in ran]),
                "suspects": [[s.path, s.start_line, s.score] for s in ran], "lines_listed": len(run.suspects),
                "box": asdict(run.box),
                "tests": {"failing": len(tests.failing), "passing": len(passing), "passed": run.passed,
                          "failed_targets": run.failed_targets, "failed_other": run.failed_other},
                "cost": {"fauxpy_seconds": run.seconds, "row_seconds": round(time.monotonic() - started, 1)}}


# -- rows, scored as `bench localize` scores its signals -----------------------------------------------------------
#: pinpoint's rankings shown beside FauxPy's: the spectrum alone, the fusion before the targeted signals, with
#: predicate switching, and the agent's default (`AGENT_DEFAULT`: MBFL at half weight, passing switches, mentions)
PINPOINT_SIGNALS = ("spectrum", "fused", "fused_predicates", AGENT_DEFAULT)
METRICS = ("file@1", "file@5", "function@5", "line@1", "line@10")
#: FauxPy as `bench localize --peer fauxpy`'s column: its rows in their committed cache
PEER = bench.Peer("fauxpy", PEER_DIR / "rows", peer_row)


def cached(instances: Sequence, cache: Path, budget_s: float = BUDGET_S, log=print) -> list[dict]:
    """Each instance's row from `cache` when it ran there before, else computed now and written (so a run resumes;
    a row that could not run says why in one line and is tried again): the bench's own row cache."""
    peer = bench.Peer(PEER.name, cache, functools.partial(peer_row, budget_s=budget_s))
    rows = bench.peer_rows(peer, instances, log=log)
    return [rows[instance.instance_id] for instance in instances]


def hits(suspects: Sequence[Suspect], row: dict) -> dict:
    """One ranking of the row scored as `bench localize` scores its signals."""
    return bench.ranking_hits(suspects, bench.row_gold(row), bench.row_sources(row))


def scored(row: dict, pinpoint_rows: Path = PINPOINT_ROWS) -> dict:
    """The row's rankings side by side: FauxPy with ties broken at random and as it prints them (the bench's
    column), and pinpoint's signals from its own cached row of the same instance (hits computed again from its
    kept suspects)."""
    signals = {"fauxpy": hits(random_ties(bench.peer_suspects(row, PEER.name), row["instance_id"]), row),
               "fauxpy_printed": bench.peer_hits(row, row, PEER.name)}
    own = bench.read_row(pinpoint_rows / f"{row['instance_id']}.json.gz")
    records = (own or {}).get("lines") or [{}]
    if own is not None and not own.get("error"):
        own = bench.rescored(own)
        signals.update({n: own["signals"][n] for n in PINPOINT_SIGNALS if n in own["signals"]})
        signals["spectrum_lines"] = hits(spectrum_lines(own), own)
    return {**row, "signals": signals, "pinpoint_cost": (own or {}).get("cost", {}),
            "spectrum_passed": records[0].get("passed", 0)}


def spectrum_lines(own: dict) -> list[Suspect]:
    """pinpoint's spectrum as FauxPy ranks: every line by Ochiai alone (its line records, the best 400, in its
    recency order), no function spans: the like-for-like SBFL comparison."""
    return [Suspect(r["path"], r["line"], r["line"], r["ochiai"], "spectrum") for r in own.get("lines", [])]


def table(rows: Sequence[dict], pinpoint_rows: Path = PINPOINT_ROWS) -> str:
    """The markdown table: the rows FauxPy ran on, each ranking's metrics (as counted, then in expectation over
    ties) and top line tie, the rows it could not run on with why, and each tool's cost per row."""
    ran = [scored(r, pinpoint_rows) for r in rows if not r.get("error")]
    both = [r for r in ran if all(n in r["signals"] for n in (*PINPOINT_SIGNALS, "spectrum_lines"))]
    totals = bench.totals(both)
    lines = [f"{len(rows)} rows; FauxPy ran on {len(ran)}, could not on {len(rows) - len(ran)}; "
             f"compared on the {len(both)} with pinpoint's row", "",
             "| ranking | " + " | ".join(METRICS) + " | " + " | ".join(f"{m}~" for m in METRICS)
             + " | ties_line mean / median |", "|---" * (2 * len(METRICS) + 2) + "|"]
    for name in ("fauxpy", "fauxpy_printed", "spectrum_lines", *PINPOINT_SIGNALS):
        v = totals.get(name, {})
        lines.append(f"| {name} | " + " | ".join(f"{v.get(m, 0):.2f}" for m in METRICS) + " | "
                     + " | ".join(f"{v.get(m + '~', 0):.2f}" for m in METRICS)
                     + f" | {v.get('ties_line', 0):.1f} / {v.get('ties_line_median', 0):.0f} |")
    lines += ["", *(f"- {r['instance_id']}: FauxPy could not run: {r['error']}" for r in rows if r.get("error"))]
    return "\n".join(lines + ["", cost_table(both)])


def cost_table(rows: Sequence[dict]) -> str:
    """Per row: FauxPy's pytest run and its whole row (box, install, run), pinpoint's spectrum + LDB and targeted
    signals (as its cached row measured them), the failing tests' own run, the tests (failing that failed / given,
    passing that passed, the spectrum's passing), top line ties and line Hit@10~."""
    head = ("| row | FauxPy run s | FauxPy row s | spectrum + LDB s | MBFL + PS s | own run s | tests: F / P (spectrum's P) "
            f"| ties_line FauxPy / spectrum lines | line@10~ FauxPy / spectrum lines / {AGENT_DEFAULT} |")
    lines = [head, "|---" * 9 + "|"]
    for r in rows:
        c, s = r["pinpoint_cost"], r["signals"]
        targeted = c.get("mbfl_seconds", 0) + c.get("predicates_seconds", 0)
        lines.append(f"| {r['instance_id']} | {r['cost']['fauxpy_seconds']:.1f} | {r['seconds']:.1f} "
                     f"| {c.get('execution_seconds', 0):.1f} | {targeted:.1f} | {bench.own_run(c):.2f} "
                     f"| {r['tests']['failed_targets']}/{r['tests']['failing']} / {r['tests']['passed']} ({r['spectrum_passed']}) "
                     f"| {s['fauxpy']['ties_line']} / {s['spectrum_lines']['ties_line']} "
                     f"| {s['fauxpy']['line@10~']:.2f} / {s['spectrum_lines']['line@10~']:.2f} / "
                     f"{s[AGENT_DEFAULT]['line@10~']:.2f} |")
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else 0.0  # noqa: E731
    within = sum(r["cost"]["fauxpy_seconds"] <= 3 * bench.own_run(r["pinpoint_cost"]) + 60 for r in rows)
    lines.append(f"\nFauxPy's run within 3x + 60 s of the failing tests' own run on {within}/{len(rows)} rows; "
                 f"median: FauxPy run {med([r['cost']['fauxpy_seconds'] for r in rows]):.1f} s, FauxPy row "
                 f"{med([r['seconds'] for r in rows]):.1f} s, spectrum + LDB "
                 f"{med([r['pinpoint_cost'].get('execution_seconds', 0) for r in rows]):.1f} s, own run "
                 f"{med([bench.own_run(r['pinpoint_cost']) for r in rows]):.2f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from pinpoint.swebench_eval.cli import dataset_args, selection_from_args

    parser = argparse.ArgumentParser(prog="python -m pinpoint_lab.localization.fauxpy_peer", description=__doc__
                                     .split("\n\n")[0])
    dataset_args(parser)
    parser.add_argument("--cache", type=Path, default=PEER_DIR / "rows", help="per-row results (a run resumes)")
    parser.add_argument("--table", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds FauxPy may run on a row")
    args = parser.parse_args(argv)
    instances = selection_from_args(args).instances
    if not instances:
        print("fauxpy_peer: no SWE-bench rows with an offline repository source (see --instances)", file=sys.stderr)
        return 2
    rows = cached(instances, args.cache, args.budget, log=lambda m: print(m, file=sys.stderr, flush=True))
    text = table(rows)
    print(text)
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
