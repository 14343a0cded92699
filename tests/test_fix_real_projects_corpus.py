"""`pinpoint fix` on real open-source projects as their teams set them up: each project's sdist from PyPI (pinned,
downloaded at test time) made into a git repository the way upstream keeps it (its build's generated files
git-ignored, its release tagged), a planted one-line bug its own suite catches, a GitHub-style issue, and the
FAKE scripted OpenAI-compatible endpoint (tests/fake_llm_server.py) answering with the fix. `--local` runs (on `.`)
in a venv the project's own declared test dependencies were installed into by pinpoint's install recipe (what the
team has); the container runs (on a path) use the box pinpoint builds from the project's files, on the projects
whose box differs from the team's venv (see `Project.container`), since each costs a 1-5 minute image build;
"not in the suite" is an outcome measured once with this module's container test on every project. The installed
`pinpoint` script runs as a subprocess.

| project | setup | --local | container |
|---|---|---|---|
| platformdirs 4.2.0 | src/, hatchling + hatch-vcs version file, `test` extra, tox | fixed | fixed |
| pluggy 1.5.0 | src/, setuptools-scm `write_to`, setup.cfg `testing` extra, tox | fixed | fixed (not in the suite) |
| pastel 0.2.1 | flat package, poetry-core, Poetry dev-dependencies | fixed | fixed (not in the suite) |
| six 1.16.0 | one flat module, setup.py | fixed (also dirty tree, second run, kill -9) | fixed (not in the suite) |
| cachetools 5.3.3 | src/, setup.cfg, tox deps, unittest | fixed | fixed (not in the suite) |
| itsdangerous 2.2.0 | src/, flit, requirements/tests.txt | fixed | fixed (not in the suite) |
| click 8.2.1 | src/, flit, PEP 735 `tests` group | fixed | fixed |
| findpython 0.6.2 | src/, pdm-backend, PDM scm `write_to`, PDM dev-dependencies | fixed | fixed |
| markupsafe 2.1.5 | src/, setup.py C extension, requirements/tests.txt | fixed (speedups run) | fixed (built) |
| installer 0.7.0 | src/, flit, noxfile test session, package data files | fixed | fixed |
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_llm_server import FakeScriptedLLMServer, delay, tool_call
from pinpoint.environments.project_deps import ProjectFiles, find_test_deps
from pinpoint.environments.repo_image import install_script
from test_fix_real_projects import repo_images

PINPOINT = str(Path(sys.executable).parent / "pinpoint")
#: a few turns: the scripted fix takes one, so a run that does not pass stops early
QUICK = ("--set", "agent.execution=false", "--set", "search.policy=none", "--set", "budget.max_steps=4")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Project:
    """A pinned PyPI project, how it is set up (for the record), its planted bug and the suite that catches it."""

    name: str
    version: str
    setup: str
    path: str
    good: str
    bad: str
    issue: str
    tests: str
    ignored: tuple[str, ...] = ()
    #: (file, sdist text, repository text): what the sdist's build rewrote, put back as the repository has it
    upstream: tuple[tuple[str, str, str], ...] = ()
    #: where pinpoint must find the test dependencies (its notice names it), when the suite needs them found
    declares: str = ""
    #: how many tests the command passes in the team's own fixed checkout (a skipped part shows as fewer)
    passed: int | None = None
    #: also fixed in a container: each costs a 1-5 minute image build, and the box installs with the same recipe
    #: as the team's venv, so only what the box does differently needs one (a version file from the tag, a
    #: compiler, a flit or pdm build with network)
    container: bool = True

    def __str__(self) -> str:
        return self.name


PROJECTS = [
    Project("platformdirs", "4.2.0", "src/, hatchling + hatch-vcs (version file), `test` extra, tox, pytest",
            "src/platformdirs/api.py", "            if self.version:\n", "            if not self.version:\n",
            "# user_data_dir ignores the version\n\n`PlatformDirs('app', version='1.0').user_data_dir` does not end "
            "in `1.0` on Linux; without a version it gets a `None`-like extra part.\n",
            "{py} -m pytest -q -p no:cacheprovider tests/test_unix.py", ("src/platformdirs/version.py",)),
    Project("pluggy", "1.5.0", "src/, setuptools + setuptools-scm (write_to), setup.cfg `testing` extra, tox, "
            "pytest", "src/pluggy/_callers.py", "            for hook_impl in reversed(hook_impls):\n",
            "            for hook_impl in hook_impls:\n",
            "# Hook implementations are called in registration order\n\nThe docs say the last registered "
            "implementation is called first (LIFO); since the last change it is the other way round.\n",
            "{py} -m pytest -q -p no:cacheprovider testing/test_multicall.py", ("src/pluggy/_version.py",),
            container=False),
    Project("pastel", "0.2.1", "flat package, poetry-core, Poetry dev-dependencies, pytest",
            "pastel/pastel.py", "        return self._colorized\n", "        return not self._colorized\n",
            "# is_colorized() answers the opposite\n\n`Pastel(True).is_colorized()` returns False.\n",
            "{py} -m pytest -q -p no:cacheprovider tests", container=False),
    Project("six", "1.16.0", "one flat module, setuptools setup.py, pytest", "six.py",
            "    byte2int = operator.itemgetter(0)\n", "    byte2int = operator.itemgetter(1)\n",
            "# six.byte2int fails on a one-byte string\n\n`six.byte2int(b'\\x03')` raises IndexError on Python 3; "
            "it should return 3.\n", "{py} -m pytest -q -p no:cacheprovider test_six.py -k 'byte or int'",
            container=False),
    Project("cachetools", "5.3.3", "src/, setuptools setup.cfg, tox deps, unittest", "src/cachetools/__init__.py",
            "        return self.__currsize\n", "        return self.__currsize + 1\n",
            "# Cache.currsize is one too many\n\nAn empty `Cache(maxsize=10)` has `currsize == 1`.\n",
            "{py} -m unittest discover -q -s tests -t .", container=False),
    Project("itsdangerous", "2.2.0", "src/, flit, requirements/tests.txt (pip-compile), tox, pytest",
            "src/itsdangerous/encoding.py", '    return _int_to_bytes(num).lstrip(b"\\x00")\n',
            '    return _int_to_bytes(num).rstrip(b"\\x00")\n',
            "# int_to_bytes drops trailing zero bytes\n\n`bytes_to_int(int_to_bytes(256))` is 1, not 256, so "
            "timestamps round-trip wrong.\n",
            "{py} -m pytest -q -p no:cacheprovider tests/test_itsdangerous/test_encoding.py", container=False),
    Project("click", "8.2.1", "src/, flit, PEP 735 `tests` dependency group, uv.lock, pytest", "src/click/utils.py",
            "    if paragraph_end != -1:\n", "    if paragraph_end == -1:\n",
            "# Short help shows every paragraph\n\nA command whose help has several paragraphs shows all of them in "
            "its group's command list; only the first paragraph should be used.\n",
            "{py} -m pytest -q -p no:cacheprovider tests/test_utils.py tests/test_formatting.py "
            "-k 'short_help or formatting'"),
    Project("findpython", "0.6.2", "src/, pdm-backend, PDM scm version (write_to), PDM dev-dependencies, pytest",
            "src/findpython/utils.py", "    return bool(match)\n", "    return match is None\n",
            "# looks_like_python() is backwards\n\n`looks_like_python('python3.8')` is False and "
            "`looks_like_python('python3.8.unknown')` is True.\n",
            "{py} -m pytest -q -p no:cacheprovider tests/test_utils.py tests/test_cli.py",
            ("src/findpython/__version__.py",),
            upstream=(("pyproject.toml", "dynamic = []\n", 'dynamic = [\n    "version",\n]\n'),
                      ("pyproject.toml", 'version = "0.6.2"\n', ""))),
    Project("markupsafe", "2.1.5", "src/, setuptools setup.py with a C extension (_speedups) built at install, "
            "requirements/tests.txt, tox, pytest", "src/markupsafe/_native.py",
            '        .replace(">", "&gt;")\n', '        .replace(">", "&lt;")\n',
            "# escape() turns > into &lt;\n\nWith the speedups off, `escape('a > b')` gives `a &lt; b`.\n",
            "{py} -m pytest -q -p no:cacheprovider tests", ("src/markupsafe/*.so",),
            declares="requirements/tests.txt", passed=53),
    Project("installer", "0.7.0", "src/, flit, nox session installing tests/requirements.txt, launchers as package "
            "data (importlib.resources), pytest", "src/installer/scripts.py",
            '    ("gui", "win-amd64"): "w64.exe",\n', '    ("gui", "win-amd64"): "t64.exe",\n',
            "# GUI scripts get the console launcher on 64-bit Windows\n\n`Script(..., section='gui')."
            "generate(python, kind='win-amd64')` starts with the console launcher, so a console window opens.\n",
            "{py} -m pytest -q -p no:cacheprovider tests/test_scripts.py", declares="tests/requirements.txt"),
]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=team", "-c", "user.email=team@example.com", *args], cwd=repo,
                   check=True, capture_output=True)


def _sdist(project: Project, cache: Path) -> Path:
    """The project's sdist, downloaded once into the cache (pip's own client, no wheels)."""
    names = {f"{project.name}-{project.version}.tar.gz", f"{project.name.replace('-', '_')}-{project.version}.tar.gz"}
    found = sorted(p for p in cache.glob("*.tar.gz") if p.name.lower() in names)  # MarkupSafe-2.1.5.tar.gz
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"{project.name}=={project.version}", "-d", str(cache)], check=True, capture_output=True)
        return _sdist(project, cache)
    return found[0]


def team_repository(project: Project, where: Path, cache: Path) -> Path:
    """The sdist as its team's git repository: generated files ignored and removed, the release tagged, then the
    planted bug committed on top."""
    with tarfile.open(_sdist(project, cache)) as tar:
        tar.extractall(where, filter="data")
    [repo] = [p for p in where.iterdir() if p.is_dir()]
    for generated in (*project.ignored, "PKG-INFO"):
        for path in repo.glob(generated):
            path.unlink()
    for file, sdist_text, repo_text in project.upstream:
        text = (repo / file).read_text()
        assert sdist_text in text, f"{project.name}: {file} no longer has {sdist_text!r}"
        (repo / file).write_text(text.replace(sdist_text, repo_text, 1))
    for egg_info in repo.glob("**/*.egg-info"):
        shutil.rmtree(egg_info)
    (repo / ".gitignore").write_text("\n".join(["*.egg-info/", "build/", "__pycache__/", *project.ignored]) + "\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"release {project.version}")
    _git(repo, "tag", project.version)
    source = repo / project.path
    text = source.read_text()
    assert text.count(project.good) == 1, f"{project.name}: the line to plant the bug in moved"
    source.write_text(text.replace(project.good, project.bad))
    _git(repo, "commit", "-qam", "refactor")
    (where / "issue.md").write_text(project.issue)
    return repo


def team_venv(repo: Path, venv: Path, project: Project) -> Path:
    """What the team has: a venv with the project editable and its declared test dependencies, installed by
    pinpoint's own install recipe (the same one the container image runs)."""
    deps = find_test_deps(ProjectFiles(repo, "HEAD"))
    assert project.declares in deps.describe()
    script = install_script(deps, workdir=str(repo), venv=str(venv), python=shlex.quote(sys.executable))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("pinpoint: ")]
    assert (venv / "bin" / "python").exists() and not failed, "\n".join(failed) + proc.stderr[-3000:]
    return venv / "bin" / "python"


def _env(repo: Path) -> dict[str, str]:
    """A team's shell: none of this suite's settings (conftest turns pytest's plugin autoload off, and the
    projects' suites need their plugins: pytest-mock, pytest-benchmark)."""
    unset = ("PINPOINT_RUNS", "OPENAI_BASE_URL", "PYTHONPATH", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, "XDG_DATA_HOME": str(repo.parent / "data")}


def _script(project: Project) -> list:
    fix = {"command": "str_replace", "path": project.path, "old_str": project.bad.strip("\n"),
           "new_str": project.good.strip("\n")}
    return [tool_call("str_replace_editor", fix), tool_call("submit", {})]


def _argv(fake: FakeScriptedLLMServer, project: Project, *args: str, py: str, target: str = ".",
          issue: str = "../issue.md") -> list[str]:
    return [PINPOINT, "fix", target, "--issue", issue, "--base-url", fake.base_url, *QUICK,
            "--test-cmd", project.tests.format(py=py), *args]


def _fix(repo: Path, project: Project, *args: str, local: bool, py: str, on_path: bool = False
         ) -> subprocess.CompletedProcess:
    """`pinpoint fix . --issue ../issue.md` from inside the repository, or `pinpoint fix <repo> --issue issue.md`
    from the folder above it (`on_path`)."""
    where = {"target": repo.name, "issue": "issue.md"} if on_path else {}
    with FakeScriptedLLMServer(_script(project), default=tool_call("submit", {})) as fake:
        argv = _argv(fake, project, *(["--local"] if local else []), *args, py=py, **where)
        return subprocess.run(argv, cwd=repo.parent if on_path else repo, env=_env(repo), capture_output=True,
                              text=True, timeout=1200)


def _verdict(proc: subprocess.CompletedProcess) -> str:
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    return lines.get("tests on the final patch", "")


def assert_fixed(proc: subprocess.CompletedProcess, project: Project) -> None:
    """Exit 0 and the suite passing on the final patch, all of it (a part skipped shows as fewer passed)."""
    verdict = _verdict(proc)
    assert proc.returncode == 0 and verdict.startswith("PASS"), proc.stdout + proc.stderr[-3000:]
    if project.passed is not None:
        assert verdict.startswith(f"PASS ({project.passed} passed"), proc.stdout + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def sdists(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sdists")


@pytest.mark.host_only
@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_fix_local_repairs_a_real_project(project, sdists, tmp_path):
    repo = team_repository(project, tmp_path / "work", sdists)
    python = team_venv(repo, tmp_path / "venv", project)
    proc = _fix(repo, project, local=True, py=str(python))
    assert_fixed(proc, project)


@pytest.mark.docker
@pytest.mark.parametrize("project", [p for p in PROJECTS if p.container], ids=str)
def test_fix_in_a_container_repairs_a_real_project(project, sdists, tmp_path):
    repo = team_repository(project, tmp_path / "work", sdists)
    before = repo_images(project.name)
    try:
        proc = _fix(repo, project, local=False, py="python", on_path=True)
    finally:  # each run's repository is a new commit: its image would stay behind unused
        made = repo_images(project.name) - before
        if made:
            subprocess.run(["docker", "rmi", "-f", *made], capture_output=True)
    assert_fixed(proc, project)
    assert f"pinpoint/repo:{project.name}-" in proc.stderr
    assert project.declares in proc.stderr.split("test dependencies: ", 1)[1].splitlines()[0]


@pytest.mark.host_only
def test_a_dirty_tree_a_second_run_and_a_kill_leave_a_real_project_as_it_was(sdists, tmp_path):
    """On a real project with uncommitted work: a second identical `fix --allow-dirty` is refused while the
    first holds the run, `kill -9` of the first leaves no clone behind once the rerun starts, and the rerun
    resumes and fixes it; the team's checkout (its uncommitted change included) is exactly as before."""
    project = next(p for p in PROJECTS if p.name == "six")
    repo = team_repository(project, tmp_path / "work", sdists)
    python = team_venv(repo, tmp_path / "venv", project)
    with (repo / "README.rst").open("a") as readme:
        readme.write("\nWork in progress, not committed.\n")
    before = _checkout_state(repo)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**_env(repo), "TMPDIR": str(temp)}
    with FakeScriptedLLMServer([delay(120), *_script(project)], default=tool_call("submit", {})) as fake:
        argv = _argv(fake, project, "--local", "--allow-dirty", py=str(python))
        first = subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not fake.chat_requests and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert fake.chat_requests, first.communicate()[1] if first.poll() is not None else "no model call"
            second = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
            assert len(fake.chat_requests) == 1  # the second run asked the model nothing
        finally:
            first.kill()  # SIGKILL: no cleanup of its own runs
            first.communicate()
        assert second.returncode == 2 and "another pinpoint process is running this run" in second.stderr
        assert "Traceback" not in second.stderr
        assert [p.name for p in temp.glob("pinpoint-*")]  # what the killed run left
        rerun = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert "resumed" in rerun.stderr, rerun.stderr[-3000:]
    assert_fixed(rerun, project)
    assert not list(temp.glob("pinpoint-*"))  # the killed run's folders went when the rerun started
    assert _checkout_state(repo) == before


def _checkout_state(repo: Path) -> tuple[str, str, bytes]:
    """HEAD, `git status` (ignored files too) and the uncommitted diff of the team's checkout."""
    git = ["git", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    status = subprocess.run([*git, "status", "--porcelain", "--ignored"], capture_output=True, text=True).stdout
    return head, status, subprocess.run([*git, "diff", "HEAD"], capture_output=True).stdout
