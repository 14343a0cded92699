"""The rules docs/architecture.md states, checked on the code: imports flow one way with no loops, everything is
`pinpoint.*`, functions fit on a screen."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the floors, bottom to top: a module may import its own floor and the floors below it, never one above it.
#: `cli` is the console script's module at the repository root (`pinpoint.cli`), the only one that wires them all.
LAYERS = ("environments", "tools", "swebench_eval", "localization", "agent", "rl", "inspector", "cli")
OUR_NAMES = set(LAYERS) | {"pinpoint"}
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["pinpoint", *parts])


def _files(layer: str) -> list[Path]:
    if layer == "cli":
        return [ROOT / "cli.py", ROOT / "__main__.py"]
    return sorted((ROOT / layer).rglob("*.py"))


ALL_FILES = [path for layer in LAYERS for path in _files(layer)]
MODULES = {_module_name(path): path for path in ALL_FILES}


def _layer(module: str) -> str:
    """The floor of `pinpoint.rl.env` is `rl`; `pinpoint.__main__` sits with `cli`."""
    first = module.split(".")[1] if module.count(".") else ""
    return "cli" if first in ("cli", "__main__") else first


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import of the file, with its line, including imports inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if f"{node.module}.{alias.name}" in MODULES]
    return found


def _our_imports(path: Path) -> list[tuple[int, str]]:
    return [(line, name) for line, name in _imports(path) if name.split(".")[0] in OUR_NAMES]


def test_every_import_of_ours_is_spelled_pinpoint():
    """A bare `agent` or `tools` would be a trainer's own folder of that name (verl and SkyRL run from theirs)."""
    bare = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in ALL_FILES + sorted(ROOT.glob("tests/*.py"))
            for line, name in _imports(path) if name.split(".")[0] in LAYERS]
    assert not bare, bare


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_only_flow_downward(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    upward = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in _files(layer)
              for line, name in _our_imports(path) if name != "pinpoint" and _layer(name) not in allowed]
    assert not upward, upward


def test_no_import_loops():
    """No two modules reach each other through imports (module level or inside functions)."""
    graph = {name: {imported for _, imported in _our_imports(path) if imported in MODULES and imported != name}
             for name, path in MODULES.items()}
    loops = [scc for scc in _strongly_connected(graph) if len(scc) > 1]
    assert not loops, loops


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has a few hundred modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    result.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return result


def test_the_distribution_installs_only_pinpoint():
    """pyproject's package list is every folder of ours that holds code, each under `pinpoint.`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    config = project["tool"]["setuptools"]
    assert project["project"]["scripts"] == {"pinpoint": "pinpoint.cli:main"}
    assert config["package-dir"] == {"pinpoint": "."}
    folders = {path.parent for path in ALL_FILES} | {ROOT / "localization" / "checkpoints"}
    expected = {_module_name(folder / "__init__.py") for folder in folders}
    assert set(config["packages"]) == expected


def test_no_function_is_longer_than_a_screen():
    long = []
    for path in ALL_FILES:
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


def test_the_product_never_imports_the_lab():
    """The lab (`pinpoint_lab`: training, benches, suites) measures the product and is installed only for
    development: no module of the product imports it, at module level or inside a function."""
    found = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in ALL_FILES
             for line, name in _imports(path) if name.split(".")[0] == "pinpoint_lab"]
    assert not found, found


def test_the_lab_is_its_own_distribution():
    """`lab/` installs `pinpoint_lab` and the `pinpoint-lab` script, and needs the product (never the reverse)."""
    project = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"pinpoint-lab": "pinpoint_lab.cli:main"}
    assert project["dependencies"] == [tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]]


def test_the_console_script_builds_its_parser_without_the_heavy_libraries():
    """`pinpoint --help` and every one-line bad-input error come before any model, trainer or tracing library is
    imported: the command modules import their work when a command runs."""
    heavy = ("torch", "ray", "langgraph", "openai", "transformers", "pyarrow", "swebench", "xllamacpp",
             "gymnasium", "skyrl_gym", "unidiff", "tree_sitter")
    probe = ("import sys, pinpoint.cli; pinpoint.cli.build_parser(); "
             f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    assert loaded.stdout.strip() == ""


def test_the_wheel_holds_only_pinpoint_and_a_trainers_folders_cannot_shadow_it(tmp_path):
    """`pip install .` puts `pinpoint/` (with every data file) and its dist-info in site-packages, nothing else;
    run from a trainer's working directory that has its own `tools/` and `environments/`, the trainer-facing
    names still resolve to ours."""
    import zipfile

    had_build = (ROOT / "build").exists()
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                        "-w", str(tmp_path / "wheel")], check=True, capture_output=True)
    finally:  # setuptools builds in the checkout's build/: a test leaves the checkout as it found it
        if not had_build:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"pinpoint", "pinpoint_repair-0.1.0.dist-info"}
    tracked = subprocess.run(["git", "ls-files", *LAYERS[:-1]], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {f"pinpoint/{path}" for path in tracked} - set(names) == set()
    assert not [n for n in names if "lab" in n.split("/") or n.startswith("pinpoint_lab") or "/bench/" in n
                or n.endswith((".json.gz", ".pkl.gz"))], "lab modules or bench data in the wheel"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pinpoint-lab" not in zipfile.ZipFile(wheel).read(entry_points).decode()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True, capture_output=True)
    trainer = tmp_path / "trainer"
    for own in ("tools", "environments", "agent", "rl"):
        (trainer / own).mkdir(parents=True)
        (trainer / own / "__init__.py").write_text("raise ImportError('the trainer folder was imported')\n")
    probe = "import pinpoint.rl.adapters, pinpoint.rl.env, pinpoint.cli; print(pinpoint.rl.env.__file__)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=trainer, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": f"{trainer}:{tmp_path / 'site'}"})
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip().startswith(str(tmp_path / "site" / "pinpoint"))
    _assert_help_names_only_standard_folders(tmp_path)


#: where a help text may point: the user's home (XDG folders, ~/runs) and the system's own folders
STANDARD = ("~/", "$HOME", "$XDG_", "/etc/", "/var/", "/tmp/", "/usr/", "/run/")
HELP_WALK = """
import argparse, pinpoint.cli
def walk(parser):
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from walk(sub)
print("\\f".join(walk(pinpoint.cli.build_parser())))
"""


def _assert_help_names_only_standard_folders(tmp_path: Path) -> None:
    """Every `--help` of the wheel's `pinpoint`, for a user with no pinpoint variable set, names no folder outside
    the user's standard ones: not the checkout, not its development data, not the installed package."""
    import re

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PINPOINT_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(tmp_path / "site"))
    helps = subprocess.run([sys.executable, "-c", HELP_WALK], cwd=tmp_path, capture_output=True, text=True,
                           env=env, check=True).stdout
    assert helps.count("\f") > 20  # every command's help, not the top one alone
    text = " ".join(helps.split())
    absolute = re.findall(r"(?:^|[\s(\[`'\"=])(~?/[\w.$<>{}-][^\s,;)\]`'\"]*)", text)
    outside = sorted({path for path in absolute if not path.startswith(STANDARD)})
    assert not outside, outside
    for word in ("../", "shared/data", "docs/bench", "site-packages", str(ROOT), str(tmp_path)):
        assert word not in text, word
