"""Benchmark: diagnostic inference on a 500-line file beside the time of one test run, measured in the same run.

The file is real code (the first N lines of the standard library's `argparse.py`). Inference is timed in parts:
the model alone on given confidences (what it costs when the LLM that wrote the code returned log-probs), the
full path with the embedded LLM scoring the file (uncached), and the path the agent takes with an issue's text:
the file read after the issue (and, for a model that reads the shift, without it too). The baselines are one pytest run of one real test
and one HumanEvalFix task's tests in a fresh interpreter, both subprocesses as the agent would run them.
"""

from __future__ import annotations

import argparse as _argparse_module
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pinpoint.localization.confidence import unit_confidences
from pinpoint.localization.diagnostic import DiagnosticLocalizer
from pinpoint.localization.scorer import LocalScorer
from pinpoint.localization.units import lexical_units

from pinpoint_lab.localization.corpora import humanevalfix
from pinpoint_lab.localization.spectrum import run_tests_with_coverage

#: an issue a user might file against the benchmark's file
ISSUE = ("argparse: an optional argument declared with nargs='?' and a const ignores `type` for the const value, so "
         "parse_args(['--level']) returns the raw string instead of calling the type function on it.")


def real_file(lines: int) -> str:
    source = Path(_argparse_module.__file__).read_text()
    return "".join(source.splitlines(keepends=True)[:lines])


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _pytest_run() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        test = Path(tmp) / "test_one.py"
        test.write_text(textwrap.dedent("""
            import argparse
            def test_parse():
                p = argparse.ArgumentParser()
                p.add_argument("--n", type=int)
                assert p.parse_args(["--n", "3"]).n == 3
        """))
        seconds, proc = _timed(lambda: subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                       str(test)], capture_output=True, cwd=tmp))
        if proc.returncode != 0:
            raise RuntimeError(f"baseline pytest run failed:\n{proc.stdout.decode()[-2000:]}")
        return seconds


def run_benchmark(lines: int = 500, checkpoint: Path | None = None) -> str:
    code = real_file(lines)
    with tempfile.TemporaryDirectory() as cache:
        scorer = LocalScorer(cache_dir=Path(cache))
        load_s, localizer = _timed(lambda: DiagnosticLocalizer(checkpoint, scorer=scorer))
        llm_load_s, _ = _timed(scorer._load)
        score_s, tokens = _timed(lambda: scorer.score(code))
        model_s, ranked = _timed(lambda: localizer.rank_lines(code, tokens=tokens))
        described_s, _ = _timed(lambda: localizer.rank_lines(code, description=ISSUE))
        if localizer.reads_shift:  # its reading without the issue came from the cache: count what it cost above
            described_s += score_s
    units = lexical_units(code)
    missing = sum(c is None for c in unit_confidences(units, tokens, code))
    task = humanevalfix()[0]
    hef_s, _ = _timed(lambda: run_tests_with_coverage(task.fixed_code, task.tests, task.entry_point))
    pytest_s = _pytest_run()
    full = score_s + model_s
    return "\n".join([
        f"file: {lines} lines of argparse.py, {len(units)} lexical units, {len(tokens)} LLM tokens "
        f"({missing} units without a token)",
        f"diagnostic model load                 {load_s:8.3f} s (once)",
        f"embedded LLM load                     {llm_load_s:8.3f} s (once)",
        f"inference, confidences given          {model_s:8.3f} s",
        f"inference, with local LLM scoring     {full:8.3f} s",
        f"inference, with an issue's text       {described_s:8.3f} s"
        f" ({'2 LLM readings' if localizer.reads_shift else '1 LLM reading'})",
        f"baseline: one pytest run (1 test)     {pytest_s:8.3f} s",
        f"baseline: one HumanEvalFix test run   {hef_s:8.3f} s",
        f"ratio model-only / pytest run         {model_s / pytest_s:8.3f}",
        f"ratio with-scoring / pytest run       {full / pytest_s:8.3f}",
        f"ratio with-issue / pytest run         {described_s / pytest_s:8.3f}",
        f"top suspect: line {ranked[0].line} ({ranked[0].evidence})" if ranked else "no lines",
    ])
