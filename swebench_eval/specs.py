"""Environment specs per repo and version (the official harness's MAP_REPO_VERSION_TO_SPECS, kept as data because
swebench 5.x on PyPI no longer ships them), and the official rules derived from an instance: which requirement files
an environment installs, which test files a test patch touches, and the test directives passed to the test command.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pinpoint.environments import paths
from pinpoint.environments.errors import PinpointError
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.sources import RepoSources
from swebench.harness.constants import NON_TEST_EXTS
from unidiff import PatchSet

#: the official harness reads these files at the environment setup commit (swebench 2.x/4.x constants)
REQS_PATHS = {
    "dbt-labs/dbt-core": ["dev-requirements.txt", "dev_requirements.txt"],
    "django/django": ["tests/requirements/py3.txt"],
    "matplotlib/matplotlib": ["requirements/dev/dev-requirements.txt", "requirements/testing/travis_all.txt"],
    "pallets/flask": ["requirements/dev.txt"],
    "pylint-dev/pylint": ["requirements_test.txt"],
    "pyvista/pyvista": ["requirements_test.txt", "requirements.txt"],
    "sqlfluff/sqlfluff": ["requirements_dev.txt"],
    "sympy/sympy": ["requirements-dev.txt", "requirements-test.txt"],
}
ENV_YML_PATHS = {
    "matplotlib/matplotlib": ["environment.yml"],
    "pydata/xarray": ["ci/requirements/environment.yml", "environment.yml"],
}
#: conda names whose PyPI distribution is named differently (the rest are the same on both)
CONDA_TO_PIP = {"matplotlib-base": "matplotlib", "iris": "scitools-iris", "dask-core": "dask",
                "pytorch": "torch", "python-graphviz": "graphviz"}
#: conda packages whose PyPI wheel lacks the C library conda ships with them, and the Debian packages that provide
#: it: without it they break at import with an error other than ImportError (cfgrib: "ecCodes library not found"),
#: which test collection does not skip
CONDA_C_LIBRARIES = {"cfgrib": ("libeccodes0",)}
#: conda packages PyPI does not publish at all (checked with `pip index versions`): not tried; a test skipped for
#: want of one is named apart by `pinpoint bench published`, as the official conda env had it
CONDA_ONLY = frozenset({"cdms2", "hdf5"})
#: pure-Python dependencies that PyPI publishes only as source (conda-forge ships them as noarch builds): an
#: environment.yml name is installed as wheels only, except these, without which pip refuses the names that need
#: them (scitools-iris via cf-units: antlr4-python3-runtime; zarr: asciitree; pydap: docopt)
PURE_PYTHON_SDISTS = ("antlr4-python3-runtime", "asciitree", "docopt")
#: yanked packages the official harness swaps, without their version pin (clean_requirements)
REPLACE_REQ_PACKAGES = [("types-pkg_resources", "types-setuptools")]



class SpecError(PinpointError, KeyError):
    """No environment spec for a repo/version, or a requirements file the spec needs is missing."""

    def __str__(self) -> str:
        return str(self.args[0])


@cache
def load_specs(path: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    return json.loads(Path(path or paths.shared_data() / "swebench_specs_python.json").read_text())


def spec_for(instance: Instance, specs_path: str | None = None) -> dict[str, Any]:
    specs = load_specs(specs_path)
    try:
        return specs[instance.repo][instance.version]
    except KeyError:
        known = ", ".join(sorted(specs.get(instance.repo, {}))) or "none"
        raise SpecError(f"{instance.instance_id}: no environment spec for {instance.repo} version "
                        f"{instance.version!r} (known versions: {known})") from None


def modified_test_files(test_patch: str) -> list[str]:
    """Files the test patch modifies that exist at the base commit (official get_modified_files)."""
    return [d.path for d in PatchSet(test_patch) if d.source_file != "/dev/null"]


def test_directives(instance: Instance) -> list[str]:
    """Test files named by the test patch, minus non-test extensions (official get_test_directives)."""
    directives = re.findall(r"diff --git a/.* b/(.*)", instance.test_patch)
    directives = [d for d in directives if not any(d.endswith(ext) for ext in NON_TEST_EXTS)]
    if instance.repo == "django/django":
        directives = [d.removesuffix(".py").removeprefix("tests/").replace("/", ".") for d in directives]
    return directives


def test_command(instance: Instance, spec: dict[str, Any]) -> str:
    return " ".join([spec["test_cmd"], *test_directives(instance)])


@dataclass(frozen=True)
class EnvInputs:
    """Everything an env layer is built from; its hash is the env image's tag."""

    python: str
    packages: str  # a requirements.txt body, an environment.yml body, or a space-separated package list
    packages_kind: str  # "requirements" | "environment.yml" | "list" | "none"
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...] = ()  # Debian's C libraries of conda packages (CONDA_C_LIBRARIES)

    def key(self) -> dict[str, Any]:
        key = {"python": self.python, "packages": self.packages, "kind": self.packages_kind,
               "pip_packages": list(self.pip_packages)}
        return {**key, "apt_packages": list(self.apt_packages)} if self.apt_packages else key


def _requirements_text(instance: Instance, sources: RepoSources) -> str:
    """The official get_requirements: the first existing requirements path, `-r` includes inlined."""
    found = _setup_file(instance, sources, REQS_PATHS.get(instance.repo, []))
    if found is None:
        raise SpecError(f"{instance.instance_id}: none of {REQS_PATHS.get(instance.repo)} exists at "
                        f"{_setup_commit(instance, sources)[:12]} or a later commit of the offline history")
    commit, req_path, text = found
    req_dir = "/".join(req_path.split("/")[:-1])

    def excluded(line: str) -> bool:
        return any(line.strip().startswith(x) for x in ("-e .", "#", ".[test"))

    original, additional = [], []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            nested = sources.show(instance.repo, commit, "/".join(p for p in (req_dir, line[2:].strip()) if p))
            additional += [extra for extra in (nested or "").split("\n") if not excluded(extra)]
        elif not excluded(line):
            original.append(line)
    additional.append("\n".join(original))
    body = "\n".join(additional)
    for old, new in REPLACE_REQ_PACKAGES:  # the replacement drops the yanked package's version pin
        body = re.sub(rf"^{re.escape(old)}(?:\s*[<>=!~][^\s;#]*)?", new, body, flags=re.MULTILINE)
    return body


def _environment_yml_names(instance: Instance, sources: RepoSources) -> list[str] | None:
    """The conda and pip names of the instance's environment.yml (None when the offline history lacks the file)."""
    found = _setup_file(instance, sources, ENV_YML_PATHS.get(instance.repo, []))
    if found is None:
        return None
    names: list[str] = []
    for dep in yaml.safe_load(found[2]).get("dependencies", []):
        for item in dep.get("pip", []) if isinstance(dep, dict) else [dep]:
            name = re.split(r"[<>=!~ ]", str(item).strip(), maxsplit=1)[0]
            if name and name not in ("python", "pip"):
                names.append(name)
    return names


def _pip_names(conda_names: list[str]) -> str:
    """Conda's names as pip distribution names, one a line.

    There is no conda here: names PyPI lacks are left out, and a name without a wheel agreeing with the spec's pins
    is skipped by the build step (each name is tried on its own; see scripts.env_script)."""
    return "\n".join(sorted({CONDA_TO_PIP.get(n, n) for n in conda_names if n not in CONDA_ONLY}))


def _debian_libraries(conda_names: list[str]) -> tuple[str, ...]:
    """The Debian packages that give these conda packages' PyPI builds the C libraries conda ships with them."""
    return tuple(sorted({lib for n in conda_names for lib in CONDA_C_LIBRARIES.get(n, ())}))


def conda_only_packages(instance: Instance, sources: RepoSources) -> list[str]:
    """The packages the instance's env spec asks conda for that no PyPI distribution provides (so its env image
    lacks them)."""
    if spec_for(instance).get("packages") != "environment.yml":
        return []
    return sorted(set(_environment_yml_names(instance, sources) or []) & CONDA_ONLY)


def _setup_file(instance: Instance, sources: RepoSources, paths: list[str]) -> tuple[str, str, str] | None:
    """(commit, path, text) of the first of `paths` at the setup commit.

    When the offline history lacks the setup commit and the base commit predates the file (xarray 0.12 rows from
    2019-2020; the official harness reads environment.yml at a 2021 setup commit), the nearest later commit that has
    it stands in: a version's setup commit is its newest, so a later commit is closer to it than the base.
    """
    def first_file_at(commit: str) -> tuple[str, str, str] | None:
        for path in paths:
            text = sources.show(instance.repo, commit, path)
            if text is not None:
                return commit, path, text
        return None

    first = _setup_commit(instance, sources)
    found = first_file_at(first)
    if found is not None or first == instance.environment_setup_commit:
        return found
    # the history is listed only when needed: most rows find their file at the base commit
    return next(filter(None, map(first_file_at, sources.later_commits(instance.repo, first))), None)


def _setup_commit(instance: Instance, sources: RepoSources) -> str:
    """The environment setup commit when the offline history has it, else the instance's base commit."""
    if sources.has_commit(instance.repo, instance.environment_setup_commit):
        return instance.environment_setup_commit
    return instance.base_commit


def env_inputs(instance: Instance, spec: dict[str, Any], sources: RepoSources) -> EnvInputs:
    """What the env layer installs; `python` is the spec's version (the base image decides what stands in)."""
    packages = spec.get("packages", "")
    apt: tuple[str, ...] = ()
    if packages == "requirements.txt":
        kind, body = "requirements", _requirements_text(instance, sources)
    elif packages == "environment.yml":
        # no commit of the offline history at or after the base has the file: the spec's pip pins alone
        names = _environment_yml_names(instance, sources)
        kind, body = ("environment.yml", _pip_names(names)) if names is not None else ("none", "")
        apt = _debian_libraries(names or [])
    elif packages:
        kind, body = "list", packages
    else:
        kind, body = "none", ""
    return EnvInputs(python=str(spec["python"]), packages=body, packages_kind=kind,
                     pip_packages=tuple(spec.get("pip_packages", [])), apt_packages=apt)
