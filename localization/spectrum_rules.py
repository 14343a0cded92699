"""The rules the trace runner and the host share: which requested id names a test, what counts as a failing run,
the spectrum's formulas and line order, and how failure messages are compared.

One copy serves both sides: the host imports it (`localization.execution`, `localization.mbfl`), and it is copied
beside trace_runner.py into the box, where it runs on the repository's own Python with the standard library only.
"""

from __future__ import annotations

import math
import re


def covers(wanted, nodeid):
    """Whether a requested id names this test: itself, a class or module above it, or an id the SWE-bench log
    parser cut at a space inside its parameters (`test_x[a` for `test_x[a b]`). `localization.execution`
    uses it too."""
    if nodeid == wanted or nodeid.startswith(wanted + "::") or nodeid.startswith(wanted + "["):
        return True
    if wanted in (".", "./") or nodeid.startswith(wanted.rstrip("/") + "/"):  # a folder of tests
        return True
    return wanted.count("[") > wanted.count("]") and nodeid.startswith(wanted)


# -- the spectrum: the runner needs it in the box to choose the LDB targets, the host to rank lines ---------------

#: outcomes that count as failing runs in a spectrum; `xfailed`, `skipped`, `not_run`, `not_found` count as neither
FAILING = frozenset({"failed", "error", "timeout"})
#: the recency of a line no failing test ran recently: after every line one did
RECENT_UNSEEN = 10 ** 9


def ochiai(ef, ep, failed):
    """ef / sqrt(failed * (ef + ep)); 0 for a line no failing test runs."""
    denominator = math.sqrt(failed * (ef + ep))
    return ef / denominator if denominator else 0.0


def dstar(ef, ep, failed, star=2):
    """ef^star / (ep + nf), the denominator floored at 0.5 so a line every failing and no passing test runs scores
    highest instead of dividing by zero."""
    return ef ** star / max(ep + (failed - ef), 0.5)


def excluded_path(path):
    """Test code (tests/ folders, test_*.py, *_test.py: `retrieval.is_test_path`'s layouts) and conftest.py: the
    fix is in the code under test, and a failing test's own lines are run by it alone."""
    parts = path.split("/")
    return (any(p in ("tests", "test", "testing") for p in parts[:-1]) or parts[-1].startswith("test_")
            or parts[-1].endswith("_test.py") or parts[-1] == "conftest.py")


def spread_evenly(items, k):
    """`k` of `items` at even intervals, in order."""
    if k <= 0:
        return []
    if len(items) <= k:
        return list(items)
    return [items[i * len(items) // k] for i in range(k)]


def line_spectrum(failing, passing, formula="ochiai", include_tests=False):
    """Every line some failing run ran, best first, as (path, line, score, ochiai, dstar, ef, ep, recency).
    `failing`, `passing`: per run, its lines ({path: lines}) and its recent lines ([(path, line)], most recent
    first). Ties (common: a fault that passing tests also run shares its counts with its whole path) go to the
    other formula, then to the line a failing test ran last (a failure surfaces soon after its fault), then path
    order; a line no failing run ran recently has recency None."""
    counts = {}
    for runs, slot in ((failing, 0), (passing, 1)):
        for lines, _recent in runs:
            for path, found in lines.items():
                if include_tests or not excluded_path(path):
                    for line in found:
                        counts.setdefault((path, line), [0, 0])[slot] += 1
    recency = {}
    for _lines, recent in failing:
        for position, (path, line) in enumerate(recent):
            key = (path, int(line))
            recency[key] = min(position, recency.get(key, position))
    rows = []
    for (path, line), (ef, ep) in counts.items():
        if ef:
            o, d = ochiai(ef, ep, len(failing)), dstar(ef, ep, len(failing))
            main, other = (o, d) if formula == "ochiai" else (d, o)
            rows.append((main, other, recency.get((path, line)), path, line, o, d, ef, ep))
    rows.sort(key=lambda r: (-r[0], -r[1], RECENT_UNSEEN if r[2] is None else r[2], r[3], r[4]))
    return [(path, line, main, o, d, ef, ep, seen) for main, _other, seen, path, line, o, d, ef, ep in rows]


_NORMALIZERS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\b[0-9a-fA-F]{16,}\b"), "<hex>"),
    (re.compile(r"(/tmp|/var/folders|/private/var)/\S*"), "<tmp>"),
    (re.compile(r"pytest-of-\S+"), "<tmp>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(s|ms|us|sec|secs|seconds)\b"), "<time>"),
    (re.compile(r"\b(localhost|127\.0\.0\.1|0\.0\.0\.0):\d+"), r"\1:<port>"),
    (re.compile(r"\b(id|pid|port)=\d+"), r"\1=<n>"),
    (re.compile(r"\b\d{6,}\b"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalize_message(text):
    """A failure message without what differs between runs of the same failure: addresses, long ids and hashes,
    temporary paths, timings, ports; whitespace collapsed, cut to 300 characters. `localization.mbfl` compares
    mutants' failures with it."""
    text = str(text or "")
    for pattern, replacement in _NORMALIZERS:
        text = pattern.sub(replacement, text)
    return text.strip()[:300]
