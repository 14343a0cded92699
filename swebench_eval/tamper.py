"""Grading a patch that tries to game it: the test infrastructure is the grader's, and a log that says a test both
failed and passed counts the failure.

The official harness restores the test files the test patch names and records the test command's exit code;
`eval_script` does the same. A patch can still reach the verdict around those files, so the eval script also runs
`guard_script` just before the test files are restored: every file the patch touched that belongs to the test run
(conftest.py, pytest.ini, tox.ini, test files and folders, sitecustomize/usercustomize, .pth files; the pytest
sections of setup.cfg and pyproject.toml) goes back to the base commit, or away if the patch created it, and is named
in the log. No gold patch of the 455 dev rows touches any of these but one (pylint's setup.cfg, outside its pytest
section), so honest patches grade as before. Then `conflicting_tests` finds FAIL_TO_PASS / PASS_TO_PASS tests the
log reports as failed and also as passed (a patch printing `PASSED <test>` after pytest's summary, where the official
parser's last-line-wins would believe it); they are named in the report for audit but do not change the verdict,
which stays the official one: one name honestly appears in several files (sympy's parser keys by bare name), and
the official harness keeps the last status.

What this cannot stop (docs/security.md): code under test runs inside the test process, so a patch to the package
itself can still monkeypatch the runner's reporting; the exit code is recorded beside the verdict for audit.
"""

from __future__ import annotations

import re
import shlex

from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.grading import make_test_spec

#: printed by the guard for each file it put back; read back into the report
REVERTED = "pinpoint: reverted test infrastructure:"
_FAILING = ("FAILED", "ERROR")
_PASSING = ("PASSED", "XFAIL")

#: $1 = the base commit. Runs in /testbed; prints one REVERTED line per file put back or removed.
_GUARD = r"""pinpoint_guard() {
  local base="$1" f; shift
  section() { awk '/^\[/{s=($0 ~ /^\[(tool:pytest|pytest|tool\.pytest[^]]*)\]/)} s' "$@"; }
  { git -c core.quotepath=false diff --name-only --no-renames "$base"
    git -c core.quotepath=false ls-files -o --exclude-standard; printf '%s\n' "$@"; } |
  sort -u | while IFS= read -r f; do
    [ -n "$f" ] || continue
    case "/$f" in
      */conftest.py|*/pytest.ini|*/tox.ini|*/sitecustomize.py|*/usercustomize.py|*.pth|*/test_*.py|*_test.py|\
      */tests/*|*/test/*|*/testing/*) ;;
      */setup.cfg|*/pyproject.toml)
        cmp -s <(git show "$base:$f" 2>/dev/null | section) <(section "$f" 2>/dev/null) && continue ;;
      *) continue ;;
    esac
    if git cat-file -e "$base:$f" 2>/dev/null; then git checkout -q "$base" -- "$f"; else rm -f -- "$f"; fi
    echo "REVERTED $f"
  done
}
pinpoint_guard"""


def guard_script(base_commit: str, patch: str | None) -> str:
    """The bash step that puts the test infrastructure back as it was at `base_commit` (the box's HEAD when it
    started: the instance image commits its own edits, e.g. sphinx's tox.ini). It looks at what changed in the tree
    and at every file `patch` names (a file the patch hides behind a .gitignore it also edits is still found)."""
    pairs = re.findall(r"^diff --git a/(\S+) b/(\S+)", patch or "", flags=re.MULTILINE)
    named = sorted({path for pair in pairs for path in pair})
    call = " ".join(["pinpoint_guard", shlex.quote(base_commit), *(shlex.quote(p) for p in named)])
    return _GUARD.replace("REVERTED", REVERTED).removesuffix("pinpoint_guard") + call


def reverted_files(log_text: str) -> list[str]:
    """The files the guard put back, from the eval log."""
    return [line.split(REVERTED, 1)[1].strip() for line in log_text.splitlines()
            if line.startswith(REVERTED)]


def conflicting_tests(instance: Instance, log_text: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS tests the log reports both as failed (FAILED/ERROR) and as passed (PASSED/XFAIL):
    the official parser keeps whichever line comes last, so each line is parsed on its own here."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

    parser = MAP_REPO_TO_PARSER_PY[instance.repo]
    spec = make_test_spec(instance)
    body = log_text.split(START_TEST_OUTPUT, 1)[-1].split(END_TEST_OUTPUT, 1)[0]
    wanted = set(instance.FAIL_TO_PASS) | set(instance.PASS_TO_PASS)
    seen: dict[str, set[str]] = {}
    for line in body.splitlines():
        try:
            statuses = parser(line, spec)
        except Exception:  # noqa: BLE001 - a parser fed one line of a multi-line format may trip; skip the line
            continue
        for test, status in statuses.items():
            if test in wanted:
                seen.setdefault(test, set()).add(str(getattr(status, "value", status)))
    return sorted(t for t, s in seen.items() if s & set(_FAILING) and s & set(_PASSING))
