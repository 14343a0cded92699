"""Which tests can see a mutant: the functions each test calls, recorded once on the unbroken repository by a small
pytest plugin, so a mutant runs only the tests that reach its function (and none when no test does).

A test that never calls the edited function runs the same code on the mutant as on the baseline, so it still passes
(it passed steadily three times). Calls made outside any test (imports, conftest, collection) count for every test
(test id `EVERY`), as does an edit outside any function body (module or class level, a signature or a decorator: it
runs at import). What the trace cannot see is a value a test shares with an earlier one (a session fixture computed
during the first test): so a kept mutant runs the whole baseline once more, and its FAIL_TO_PASS and PASS_TO_PASS
come from that run. Calls in every thread are recorded (`threading.setprofile`).
"""

from __future__ import annotations

import ast
import json
import shlex

#: the line the plugin prints after the run, then the JSON {"path:first line": [test ids]}
MARKER = "PINPOINT-SYNTH-TRACE "
MODULE = "pinpoint_synth_trace"
#: the test id of calls made outside any test
EVERY = "*"

PLUGIN = '''"""pinpoint rl synthesize: the functions of the repository each test calls (outside any test: "*")."""
import json, os, sys, threading
import pytest

_root = os.getcwd() + os.sep
_outside = set()
_codes = _outside
_calls = {}


def _profile(frame, event, arg):
    if event == "call":
        _codes.add(frame.f_code)
    return None


def _record(codes, test):
    for code in codes:
        name = code.co_filename
        if name.startswith(_root) and name.endswith(".py"):
            key = name[len(_root):] + ":" + str(code.co_firstlineno)
            _calls.setdefault(key, []).append(test)


def _wrapper(item, nextitem):
    global _codes
    _codes = set()
    try:
        yield
    finally:
        _record(_codes, item.nodeid)
        _codes = _outside


pytest_runtest_protocol = pytest.hookimpl(hookwrapper=True)(_wrapper)
sys.setprofile(_profile)
threading.setprofile(_profile)


def pytest_unconfigure(config):
    sys.setprofile(None)
    threading.setprofile(None)
    _record(_outside, "*")
    sys.stdout.write("\\n''' + MARKER + '''" + json.dumps(_calls) + "\\n")
    sys.stdout.flush()
'''


def install_script(target: str) -> str:
    """Shell that writes the plugin as `<target>/pinpoint_synth_trace.py` (target a shell word: a folder, or a
    command substitution naming one)."""
    return f'printf %s {shlex.quote(PLUGIN)} > {target}/{MODULE}.py'


def parse_trace(output: str) -> dict[str, set[str]] | None:
    """{"path:first line": test ids} from a traced run's output; None when the plugin did not report (not pytest,
    or the run died)."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARKER):
            try:
                return {key: set(tests) for key, tests in json.loads(line[len(MARKER):]).items()}
            except ValueError:
                return None
    return None


def enclosing_function(path: str, text: str, line: int) -> str | None:
    """The trace key ("path:first line" of its code object) of the innermost function whose body holds `line` in
    `text`; None when the line is outside every function body (it runs at import)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    holding = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and node.body[0].lineno <= line <= (node.end_lineno or 0)]
    if not holding:
        return None
    best = max(holding, key=lambda node: node.lineno)  # the innermost: nested bodies start later
    first = min([best.lineno, *(d.lineno for d in best.decorator_list)])
    return f"{path}:{first}"
