"""The rules docs/architecture.md states, checked on the code: imports flow one way, functions fit on a screen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: a package may import itself and the packages before it, never one after it; `environments.rl` (the RL
#: environment) composes all of them, so it sits on top although the design card files it under environments/
LAYERS = ("environments", "tools", "swebench_eval", "localization", "agent", "environments.rl")
MAX_FUNCTION_LINES = 80


def _layer(module: str) -> str:
    """The layer of a dotted module name (`environments.rl.env` is in `environments.rl`)."""
    return "environments.rl" if module.startswith("environments.rl") else module.split(".")[0]


def _modules(package: str) -> list[Path]:
    paths = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    if package == "environments":
        paths = [p for p in paths if "rl" not in p.relative_to(ROOT / "environments").parts[:1]]
    return paths


def _imported_packages(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(_layer(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_layer(node.module))
    return names & set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_imports_only_flow_downward(package):
    allowed = set(LAYERS[: LAYERS.index(package) + 1])
    upward = {f"{path.relative_to(ROOT)} imports {name}" for path in _modules(package)
              for name in _imported_packages(path) - allowed}
    assert not upward, sorted(upward)


def test_no_function_is_longer_than_a_screen():
    long = []
    for package in LAYERS:
        for path in _modules(package):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_the_graph_module_only_wires():
    """agent/graph.py defines no node logic: every function it holds is the builder or the initial state."""
    tree = ast.parse((ROOT / "agent" / "graph.py").read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert functions <= {"build_graph", "initial_state", "_wrap", "_node"}, functions
