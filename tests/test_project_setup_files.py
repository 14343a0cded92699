"""What pinpoint reads from a team's own setup files, on small git repositories written the way real projects
write them (the noxfile of pypa/installer, markupsafe's setup.py): the test session's installs, whether the
project compiles an extension, and the built extension modules an in-place build left in the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pinpoint.environments.build_outputs import built_extensions
from pinpoint.environments.project_deps import ProjectFiles, find_test_deps
from pinpoint.environments.scm_version import version_files

NOXFILE = '''import nox


def _install_this_project_with_flit(session):
    session.install("flit")


@nox.session(python=["3.10", "3.11"])
def test(session):
    _install_this_project_with_flit(session)
    session.install("-r", "tests/requirements.txt")
    session.install("-e", ".[toml]", "pytest-mock")
    session.run("pytest")


@nox.session
def doctest(session):
    session.install("-r", "docs/requirements.txt")


@nox.session(name="tests-extra")
def other(session):
    session.install("never-installed")
'''

SETUP_PY = '''from setuptools import Extension, setup

setup(ext_modules=[Extension("pkg._speedups", ["src/pkg/_speedups.c"])])
'''


def _repo(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(git + ["add", "-A"], cwd=root, check=True)
    subprocess.run(git + ["commit", "-qm", "init"], cwd=root, check=True)
    return root


def test_the_nox_test_session_installs_are_the_test_dependencies(tmp_path):
    repo = _repo(tmp_path, {"noxfile.py": NOXFILE, "tests/requirements.txt": "pytest\n",
                            "docs/requirements.txt": "sphinx\n",
                            "pyproject.toml": '[project]\nname = "pkg"\nversion = "1"\n'
                                              '[project.optional-dependencies]\ntoml = ["tomli"]\n'})
    deps = find_test_deps(ProjectFiles(repo, "HEAD"))
    assert deps.files == ("tests/requirements.txt",)  # not the doctest session's docs requirements
    assert deps.requirements == ("pytest-mock",)  # not the helper's flit, nor another session's
    assert deps.extras == ("toml",)
    assert "noxfile.py test session" in deps.describe()
    assert not deps.compiles


def test_a_broken_noxfile_is_no_test_dependency(tmp_path):
    repo = _repo(tmp_path, {"noxfile.py": "def test(session:\n", "setup.py": "from setuptools import setup\n"})
    assert find_test_deps(ProjectFiles(repo, "HEAD")).describe() == "none declared"


def test_a_setup_py_extension_or_a_cython_build_compiles(tmp_path):
    assert find_test_deps(ProjectFiles(_repo(tmp_path / "a", {"setup.py": SETUP_PY}), "HEAD")).compiles
    cython = '[build-system]\nrequires = ["setuptools", "Cython>=3"]\n'
    assert find_test_deps(ProjectFiles(_repo(tmp_path / "b", {"pyproject.toml": cython}), "HEAD")).compiles


def test_built_extensions_are_the_ignored_modules_in_the_projects_own_folders(tmp_path):
    repo = _repo(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/_speedups.c": "", ".gitignore": "*.so\n.venv/\n"})
    (repo / "src/pkg/_speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF built")
    (repo / ".venv/lib/site-packages/other").mkdir(parents=True)
    (repo / ".venv/lib/site-packages/other/_c.so").write_bytes(b"not the project's")
    (repo / "_flat.cpython-311-x86_64-linux-gnu.so").write_bytes(b"a top-level extension module")
    found = built_extensions(repo)
    assert found["src/pkg/_speedups.cpython-311-x86_64-linux-gnu.so"] == b"\x7fELF built"
    assert "_flat.cpython-311-x86_64-linux-gnu.so" in found
    assert not any(name.startswith(".venv") for name in found)


def test_a_missing_version_file_is_written_from_the_nearest_tag(tmp_path):
    pyproject = ('[tool.pdm.version]\nsource = "scm"\nwrite_to = "pkg/__version__.py"\n'
                 '[tool.pdm.build]\npackage-dir = "src"\n')
    repo = _repo(tmp_path / "repo", {"pyproject.toml": pyproject, "src/pkg/__init__.py": ""})
    subprocess.run(["git", "tag", "v1.4.2"], cwd=repo, check=True)
    written = version_files(ProjectFiles(repo, "HEAD"), tmp_path / "a checkout without the build's file")
    namespace: dict = {}
    exec(written["src/pkg/__version__.py"], namespace)  # what `from pkg.__version__ import __version__` gets
    assert namespace["__version__"] == "1.4.2" and namespace["version_tuple"] == (1, 4, 2)
