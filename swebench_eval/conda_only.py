"""Which tests pinpoint's eval log says were skipped for want of a conda-only package: one the instance's env spec
asks conda for and that no PyPI distribution provides (swebench_eval.specs.CONDA_ONLY), so pinpoint's env image
lacks it where the official conda env had it.

pytest's short summary names no skipped test: `SKIPPED [n] <file>:<line>: <reason>` gives the location of the skip
(the `importorskip` call, or the test's first decorator line for a skip mark). The test is the function of the test
file (at the base commit with the test patch applied, as the eval ran it) whose lines hold that location.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tempfile
from pathlib import Path

from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import conda_only_packages

SKIP_LINE = re.compile(r"^SKIPPED \[\d+\] (\S+?):(\d+): (.*)$", re.MULTILINE)
#: the module a skip reason says is missing: pytest.importorskip's message, ImportError's, or a `requires <name>` mark
MISSING_MODULE = re.compile(r"could not import '([\w.]+)'|No module named '([\w.]+)'|^requires ([\w.]+)$")


def missing_module(reason: str) -> str | None:
    """The top-level module `reason` says is missing, lower-cased; None when it names none."""
    found = MISSING_MODULE.search(reason.strip())
    if found is None:
        return None
    return next(g for g in found.groups() if g).split(".")[0].lower()


def skip_locations(log_text: str, packages: set[str]) -> dict[str, set[int]]:
    """Test file -> the lines of its skips whose reason names one of `packages` as missing."""
    found: dict[str, set[int]] = {}
    for path, line, reason in SKIP_LINE.findall(log_text):
        if missing_module(reason) in packages:
            found.setdefault(path, set()).add(int(line))
    return found


def functions_holding(source: str, lines: set[int]) -> set[str]:
    """The pytest names (`Class::function`, parameters aside) of the test functions in `source` whose lines, first
    decorator included, hold one of `lines`."""
    names: set[str] = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}::")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name.startswith("test"):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if any(first <= line <= (child.end_lineno or child.lineno) for line in lines):
                    names.add(prefix + child.name)

    visit(ast.parse(source), "")
    return names


def file_as_run(instance: Instance, path: str, sources: RepoSources) -> str | None:
    """`path` at the instance's base commit with its test patch applied (None when neither has it)."""
    with tempfile.TemporaryDirectory(prefix="pinpoint-testfile-") as folder:
        target = Path(folder) / path
        base = sources.show(instance.repo, instance.base_commit, path)
        if base is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(base)
        subprocess.run(["git", "apply", f"--include={path}", "-"], cwd=folder, input=instance.test_patch,
                       text=True, capture_output=True)
        return target.read_text() if target.exists() else None


def conda_only_tests(instance: Instance, log_text: str, sources: RepoSources) -> set[str]:
    """`<file>::<Class>::<function>` of each test the log says was skipped for want of a conda-only package the
    instance's env spec asks for."""
    packages = set(conda_only_packages(instance, sources))
    if not packages:
        return set()
    tests: set[str] = set()
    for path, lines in skip_locations(log_text, packages).items():
        source = file_as_run(instance, path, sources)
        if source is not None:
            tests |= {f"{path}::{name}" for name in functions_holding(source, lines)}
    return tests
