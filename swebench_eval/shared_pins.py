"""The dependency pins a repository's env layer installs: the distributions that the install of every one of its
rows resolves alike (same name, same version), so that they are stored once per env instead of once per reference.

Without them each reference layer (one per calendar quarter) held its own copy of the same packages: sphinx's
`[test]` install adds ~53 MB (Babel 29 MB, Cython 11 MB, ...), seaborn's `[dev]` ~55 MB (mypy 42 MB, ...).
The instance step still ends with exactly what a fresh install gives (deps_box: it uninstalls every pin its own
resolution does not pick at that version), so a pin that a row does not want costs that row whiteouts, never a
wrong environment. Read off the `shared.txt` of the references built before (docs/harness.md, "Shared
dependencies"): the name==version lines common to every one of the repository's references.
"""

from __future__ import annotations

from typing import Any

from pinpoint.swebench_eval.scripts import dry_run_install

SHARED_PINS: dict[str, tuple[str, ...]] = {
    "mwaskom/seaborn": (
        "PyYAML==6.0.1", "cfgv==3.4.0", "coverage==7.6.0", "distlib==0.3.8", "execnet==2.1.1", "filelock==3.15.4",
        "flake8==7.1.0", "identify==2.6.0", "mccabe==0.7.0", "mypy-extensions==1.0.0", "mypy==1.11.1",
        "nodeenv==1.9.1", "pandas-stubs==2.2.2.240603", "platformdirs==4.2.2", "pre-commit==3.8.0",
        "pycodestyle==2.12.0", "pyflakes==3.2.0", "pytest-cov==5.0.0", "pytest-xdist==3.6.1",
        "types-pytz==2024.1.0.20240417", "typing_extensions==4.12.2", "virtualenv==20.26.3",
    ),
    "sphinx-doc/sphinx": (
        "Babel==2.15.0", "Cython==3.0.10", "Pygments==2.18.0", "certifi==2024.7.4", "charset-normalizer==3.3.2",
        "coverage==7.6.0", "exceptiongroup==1.2.2", "html5lib==1.1", "idna==3.7", "imagesize==1.4.1",
        "iniconfig==2.0.0", "pytest-cov==5.0.0", "pytest==8.3.2", "requests==2.32.3", "six==1.16.0",
        "snowballstemmer==2.2.0", "sphinxcontrib-jsmath==1.0.1", "urllib3==2.2.2", "webencodings==0.5.1",
    ),
}


def env_pins(repo: str, spec: dict[str, Any]) -> tuple[str, ...]:
    """The pins `repo`'s env installs for a row of `spec`: none unless its install is one plain pip command, the
    only kind whose result the instance step can check against a fresh install."""
    return SHARED_PINS.get(repo, ()) if dry_run_install(spec) is not None else ()
