"""Spectrum-based fault localization (Ochiai) for a program with assert-style tests, run in a subprocess.

Each top-level statement of the test function that contains an `assert` is one test; the others are setup and run in
order. Line coverage of the program under test is recorded with `sys.settrace`, per test; a test that raises or
passes its time limit fails. The whole run has a wall-clock timeout and a killed run loses only its own result.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass

PROGRAM_FILE = "<program under test>"

_RUNNER = r'''
import ast, json, signal, sys
payload = json.loads(sys.stdin.read())
FILE = payload["file"]
ns = {}
outcomes = []
def alarm(*_):
    raise TimeoutError("test timed out")
signal.signal(signal.SIGALRM, alarm)
covered = set()
def tracer(frame, event, arg):
    if frame.f_code.co_filename != FILE:
        return None
    if event == "line":
        covered.add(frame.f_lineno)
    return tracer
def run(code_obj, env):
    covered.clear()
    sys.settrace(tracer)
    signal.setitimer(signal.ITIMER_REAL, payload["per_test_timeout"])
    try:
        exec(code_obj, env)
        return True
    except BaseException:
        return False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.settrace(None)
try:
    exec(compile(payload["code"], FILE, "exec"), ns)
except BaseException as exc:
    print(json.dumps({"error": f"program does not load: {type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
tree = ast.parse(payload["tests"])
check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == payload["test_function"])
env = dict(ns)
if check.args.args:
    env[check.args.args[0].arg] = ns[payload["entry_point"]]
for stmt in check.body:
    code_obj = compile(ast.Module(body=[stmt], type_ignores=[]), "<test>", "exec")
    is_test = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
    passed = run(code_obj, env)
    if is_test:
        outcomes.append({"passed": passed, "lines": sorted(covered)})
print(json.dumps({"outcomes": outcomes}))
'''


@dataclass(frozen=True)
class TestOutcome:
    passed: bool
    lines: frozenset[int]


def run_tests_with_coverage(
    code: str, tests: str, entry_point: str, test_function: str = "check", timeout: float = 30.0,
    per_test_timeout: float = 3.0,
) -> list[TestOutcome]:
    """Run each assert-test of `test_function(entry_point)` against `code`; coverage is of `code`'s lines."""
    payload = {"code": code, "tests": tests, "entry_point": entry_point, "test_function": test_function,
               "file": PROGRAM_FILE, "per_test_timeout": per_test_timeout}
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(payload), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return []
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return []
    return [TestOutcome(o["passed"], frozenset(o["lines"])) for o in result.get("outcomes", [])]


def ochiai(outcomes: list[TestOutcome]) -> dict[int, float]:
    """Ochiai suspiciousness ef / sqrt((ef + nf) * (ef + ep)) for every covered line."""
    failed = sum(not o.passed for o in outcomes)
    scores = {}
    for line in set().union(*(o.lines for o in outcomes)) if outcomes else set():
        ef = sum(1 for o in outcomes if not o.passed and line in o.lines)
        ep = sum(1 for o in outcomes if o.passed and line in o.lines)
        denom = math.sqrt(failed * (ef + ep))
        scores[line] = ef / denom if denom else 0.0
    return scores
