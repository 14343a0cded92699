"""What a Python project declares its tests need, read from its own files at one commit: the `test`/`tests`/
`testing` extras (`dev` when none of those exists), PEP 735 dependency groups, Poetry and PDM development groups,
tox's test dependencies, what noxfile.py's test session installs, and requirement files. A team's suite imports its pytest plugins and fixtures'
libraries from these; installing only the runtime dependencies makes a healthy suite look misconfigured."""

from __future__ import annotations

import ast
import configparser
import contextlib
import re
import subprocess
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pinpoint.environments.errors import UsageError

#: the names projects give their test dependencies, tried in this order; `dev` only when none of them exists
TEST_NAMES = ("test", "tests", "testing")
FALLBACK_NAMES = ("dev",)
#: a requirement file at the root (`requirements.txt`, `requirements-dev.txt`, `test-requirements.txt`)
_REQUIREMENTS_FILE = re.compile(r"^[\w.-]*requirements[\w.-]*\.txt$")
_SETUP_PY_EXTRA = re.compile(r"""["']([A-Za-z0-9_.-]+)["']\s*:""")
#: a setup.py that builds C extensions, and build requirements that compile at install
_SETUP_PY_NATIVE = re.compile(r"\bext_modules\b|\bExtension\(|\bcythonize\(")
_NATIVE_BUILD_REQUIRES = ("cython", "meson-python", "scikit-build", "pybind11", "cffi")


class ProjectFiles:
    """The project's files as committed: `git show` / `git ls-tree` on `source` at `commit`, so uncommitted or
    ignored files never change what is installed."""

    def __init__(self, source: str | Path, commit: str) -> None:
        self.source, self.commit = str(source), commit

    def read(self, path: str) -> str | None:
        proc = subprocess.run(["git", "-C", self.source, "show", f"{self.commit}:{path}"], capture_output=True)
        return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None

    def names(self, folder: str = "") -> list[str]:
        """File names directly in `folder` ('' the root)."""
        spec = f"{self.commit}:{folder}" if folder else self.commit
        proc = subprocess.run(["git", "-C", self.source, "ls-tree", "--name-only", spec], capture_output=True,
                              text=True)
        return proc.stdout.split() if proc.returncode == 0 else []


@dataclass(frozen=True)
class TestDeps:
    """The test dependencies to install: extras of the project itself, plain requirements (groups, tox deps) and
    requirement files, each with where it was found (`found`, for the notice a user reads); `compiles` when the
    project builds a C extension at install (without a compiler the build falls back to pure Python, or fails)."""

    __test__ = False  # not a pytest test class, whatever its name

    extras: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    compiles: bool = False

    def describe(self) -> str:
        return "; ".join(self.found) or "none declared"


def find_test_deps(files: ProjectFiles, extras: Sequence[str] | None = None,
                   groups: Sequence[str] | None = None) -> TestDeps:
    """The project's test dependencies; `extras` / `groups` name them instead of the conventional names (a name
    the project does not declare is a UsageError listing what it has)."""
    pyproject = _toml(files.read("pyproject.toml"))
    declared_extras = _declared_extras(files, pyproject)
    chosen_extras = _choose(declared_extras, extras, "--extras", "extra")
    declared_groups = _declared_groups(pyproject)
    chosen_groups = _choose(list(declared_groups), groups, "--group", "dependency group")
    requirements = [r for g in chosen_groups for r in declared_groups[g]]
    found = [f"extras {','.join(chosen_extras)}"] if chosen_extras else []
    found += [f"group {g}" for g in chosen_groups]
    runner_files: list[str] = []
    for where, (runner_extras, runner_requirements, listed) in (
            ("tox.ini [testenv]", _tox(files.read("tox.ini"))), ("noxfile.py test session", _nox(files.read("noxfile.py")))):
        chosen_extras += [e for e in runner_extras if e in declared_extras and e not in chosen_extras]
        requirements += runner_requirements
        runner_files += listed
        if runner_requirements or runner_extras or listed:
            found.append(where)
    req_files = list(dict.fromkeys(_requirement_files(files) + [f for f in runner_files if files.read(f) is not None]))
    found += req_files
    return TestDeps(tuple(chosen_extras), tuple(dict.fromkeys(requirements)), tuple(req_files), tuple(found),
                    _compiles(files, pyproject))


def _compiles(files: ProjectFiles, pyproject: dict) -> bool:
    """Whether installing the project compiles an extension: setup.py declares one, or the build needs a
    compiling backend (Cython, meson-python, scikit-build, pybind11, cffi)."""
    if _SETUP_PY_NATIVE.search(files.read("setup.py") or ""):
        return True
    requires = " ".join(str(r) for r in pyproject.get("build-system", {}).get("requires", [])).lower()
    return any(name in requires for name in _NATIVE_BUILD_REQUIRES)


def _requirement_files(files: ProjectFiles) -> list[str]:
    """`requirements.txt` (the runtime's) and the test ones: files at the root or in requirements/ whose name says
    test (else dev); docs, typing or release pins are not what the suite needs, and can take minutes."""
    listed = sorted(n for n in files.names() if _REQUIREMENTS_FILE.match(n))
    listed += [f"requirements/{n}" for n in sorted(files.names("requirements")) if n.endswith(".txt")]
    runtime = [f for f in listed if f == "requirements.txt"]
    for names in (TEST_NAMES, FALLBACK_NAMES):
        tests = [f for f in listed if any(name in Path(f).name.lower() for name in names)]
        if tests:
            return runtime + tests
    return runtime


def _toml(text: str | None) -> dict:
    try:
        return tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}


def _choose(declared: list[str], asked: Sequence[str] | None, flag: str, what: str) -> list[str]:
    """The names asked for (each must be declared), else the conventional test names the project has."""
    if asked:
        missing = [name for name in asked if name not in declared]
        if missing:
            have = ", ".join(declared) or "none"
            raise UsageError(f"{flag} {','.join(missing)}: the project declares no such {what} (it has: {have})")
        return list(asked)
    return [n for n in TEST_NAMES if n in declared] or [n for n in FALLBACK_NAMES if n in declared]


def _declared_extras(files: ProjectFiles, pyproject: dict) -> list[str]:
    """Extras from pyproject's [project.optional-dependencies], setup.cfg's [options.extras_require] or the
    quoted keys of setup.py's `extras_require` (a best effort: setup.py is code)."""
    names = list(pyproject.get("project", {}).get("optional-dependencies", {}))
    cfg = configparser.ConfigParser(interpolation=None)
    with contextlib.suppress(configparser.Error):
        cfg.read_string(files.read("setup.cfg") or "")
    if cfg.has_section("options.extras_require"):
        names += cfg.options("options.extras_require")
    setup_py = files.read("setup.py") or ""
    block = re.search(r"extras_require\s*=\s*(\{.*?\})", setup_py, re.S)
    if block:
        names += _SETUP_PY_EXTRA.findall(block.group(1))
    return list(dict.fromkeys(names))


def _declared_groups(pyproject: dict) -> dict[str, list[str]]:
    """Requirements of every development group: PEP 735 [dependency-groups] (with include-group), PDM's
    [tool.pdm.dev-dependencies] and Poetry's groups (names only: Poetry's version syntax is not PEP 508)."""
    groups: dict[str, list[str]] = {}
    pep735 = pyproject.get("dependency-groups", {})
    for name in pep735:
        groups[name] = _resolve_group(pep735, name, set())
    for name, reqs in pyproject.get("tool", {}).get("pdm", {}).get("dev-dependencies", {}).items():
        groups.setdefault(name, [r for r in reqs if isinstance(r, str) and not r.startswith("-e")])
    poetry = pyproject.get("tool", {}).get("poetry", {})
    for name, table in poetry.get("group", {}).items():
        groups.setdefault(name, _poetry_names(table.get("dependencies", {})))
    if poetry.get("dev-dependencies"):
        groups.setdefault("dev", _poetry_names(poetry["dev-dependencies"]))
    return groups


def _resolve_group(table: dict, name: str, seen: set[str]) -> list[str]:
    if name in seen:
        return []
    seen.add(name)
    out: list[str] = []
    for item in table.get(name, []):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and item.get("include-group") in table:
            out += _resolve_group(table, item["include-group"], seen)
    return out


def _poetry_names(deps: dict) -> list[str]:
    return [name for name in deps if name.lower() != "python"]


def _tox(text: str | None) -> tuple[list[str], list[str], list[str]]:
    """(extras, requirements, requirement files) of tox.ini's [testenv]; lines with tox substitutions skipped."""
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(text or "")
    except configparser.Error:
        return [], [], []
    if not cfg.has_section("testenv"):
        return [], [], []
    extras = [e.strip() for line in _lines(cfg.get("testenv", "extras", fallback=""))
              for e in line.split(",") if e.strip()]
    requirements, req_files = [], []
    for line in _lines(cfg.get("testenv", "deps", fallback="")):
        if line.startswith("-r"):
            req_files.append(line[2:].strip())
        elif not line.startswith("-") and "{" not in line and ":" not in line.split(";")[0]:
            requirements.append(line)
    return extras, requirements, req_files


def _lines(value: str) -> list[str]:
    return [line.split("#")[0].strip() for line in value.splitlines() if line.split("#")[0].strip()]


def _nox(text: str | None) -> tuple[list[str], list[str], list[str]]:
    """(extras, requirements, requirement files) that noxfile.py's test session installs: the literal arguments of
    `session.install(...)` in a `@nox.session` function named test/tests/testing. The file is read, never run."""
    try:
        tree = ast.parse(text or "")
    except (SyntaxError, ValueError):
        return [], [], []
    extras: list[str] = []
    requirements: list[str] = []
    req_files: list[str] = []
    for func in tree.body:
        if not isinstance(func, ast.FunctionDef) or _nox_session_name(func) not in TEST_NAMES:
            continue
        for call in ast.walk(func):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "install":
                words = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                for before, word in zip(["", *words], words, strict=False):
                    if before == "-r":
                        req_files.append(word)
                    elif word.startswith(".["):
                        extras += [e.strip() for e in word[2:].rstrip("]").split(",") if e.strip()]
                    elif not word.startswith((".", "-")) and before not in ("-c", "-e"):
                        requirements.append(word)
    return extras, requirements, req_files


def _nox_session_name(func: ast.FunctionDef) -> str | None:
    """The session's name (`name=` of the decorator, else the function's), None when it is no nox session."""
    for decorator in func.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("nox.session", "session"):
            named = [k.value for k in getattr(decorator, "keywords", []) if k.arg == "name"]
            if named and isinstance(named[0], ast.Constant):
                return str(named[0].value)
            return func.name
    return None
