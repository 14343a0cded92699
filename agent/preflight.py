"""Checks made before any container or model call, so bad input costs one line and exit 2, not minutes of a run
that can only give a wrong answer: the model endpoint answers, the working tree is clean, the test command gives
a real test outcome on HEAD, and (`fix --local`) the tests import the clone under repair."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
from pathlib import Path

import httpx
from pinpoint.agent.llm_config import LLMConfig
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.runtime import Runtime
from pinpoint.tools.run_tests import TestRun, run_tests

#: seconds the endpoint gets to list its models; a live server answers in milliseconds
ENDPOINT_TIMEOUT_S = 5.0
#: the interpreter's words for an import that failed: the tests need a module the environment lacks
_MISSING_MODULE = re.compile(r"No module named '?([\w.]+)'?")
#: the model name a run carries when nobody named one (LLMConfig's default, the embedded model)
DEFAULT_MODEL = LLMConfig.model


class PreflightError(PinpointError, ValueError):
    """Input that cannot give a meaningful run; the message says what is wrong and what to do."""


def check_endpoint(llm: LLMConfig, timeout: float = ENDPOINT_TIMEOUT_S) -> LLMConfig:
    """`llm` once `GET {base_url}/models` answers; when no model was named, the server's first model is used (a
    run labelled with the embedded model's name would be misfiled). The embedded model (no base_url) is as is."""
    if llm.base_url is None:
        return llm
    url = llm.base_url.rstrip("/") + "/models"
    key = os.environ.get(llm.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise PreflightError(f"the model endpoint {llm.base_url} does not answer ({type(exc).__name__}: {exc}); "
                             "start the server or fix --base-url / OPENAI_BASE_URL (unset both for the embedded "
                             "model)") from None
    if response.status_code in (401, 403):
        raise PreflightError(f"the model endpoint {llm.base_url} refused the key ({response.status_code}); set "
                             f"{llm.api_key_env}")
    if response.status_code >= 500:
        raise PreflightError(f"the model endpoint {llm.base_url} fails ({response.status_code} on GET {url})")
    if llm.model != DEFAULT_MODEL or response.status_code != 200:
        return llm  # a server without /models (404) may still chat; the model was named or cannot be listed
    try:
        names = [m["id"] for m in response.json().get("data", []) if isinstance(m, dict) and m.get("id")]
    except (ValueError, AttributeError):
        names = []
    return dataclasses.replace(llm, model=names[0]) if names else llm


def dirty_paths(repo: str) -> list[str]:
    """Tracked files of the local repository `repo` with uncommitted changes (untracked files never enter a
    run: the clone is made from the commit)."""
    proc = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                          capture_output=True, text=True)
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def check_test_command(runtime: Runtime, command: str, timeout: float, hint: str = "") -> TestRun:
    """The test command's run on HEAD; PreflightError when it tests nothing (not found, not executable, pytest
    interrupted by a collection error, a usage error, no tests collected, a module it needs missing before any
    test ran): that is a misconfigured command, and a run judged by it would chase a failure the code does not
    have. `hint` says what to do when a module is missing (test dependencies, --offline)."""
    run = run_tests(runtime, command, timeout)
    missing = _MISSING_MODULE.search(run.output)
    problem = run.misconfiguration() or (f"no module named {missing.group(1)!r}"
                                         if missing and not run.ok and run.counts is None else None)
    if problem is None:
        return run
    lines = [line.strip() for line in run.output.splitlines() if line.strip()]
    telling = next((line for line in reversed(lines) if "Error" in line or "not found" in line), "")
    detail = f": {telling[:200]}" if telling else ""
    todo = hint if missing and hint else "try the command in your repository and fix it"
    raise PreflightError(f"--test-cmd {command!r} is misconfigured: on HEAD it tests nothing ({problem}){detail}; "
                         f"{todo}")


def check_imports(runtime: Runtime, workdir: str, command: str) -> None:
    """PreflightError when the tests would import the repository's packages from somewhere other than the clone
    under repair (an editable install of the user's checkout): a correct candidate would be judged failing."""
    python = _python_of(command)
    root = os.path.realpath(workdir)
    for package in _top_packages(Path(workdir)):
        probe = ("import importlib.util, sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
                 f"s = importlib.util.find_spec({package!r}); print('ORIGIN', s.origin if s else '')")
        result = runtime.run(f"{shlex.quote(python)} -c {shlex.quote(probe)}", timeout=60)
        origin = next((line[7:] for line in result.output.splitlines() if line.startswith("ORIGIN ")), "")
        if result.exit_code == 0 and origin and not os.path.realpath(origin).startswith(root + os.sep):
            raise PreflightError(f"the tests would import {package!r} from {origin}, not from the clone pinpoint "
                                 f"repairs (an editable install of your checkout?); run `{python} -m pip uninstall "
                                 f"{package}` or drop --local to run in a container")


def _top_packages(workdir: Path, limit: int = 5) -> list[str]:
    """Import names of the repository's own top-level packages (at the root or under src/), tests excluded."""
    names = []
    for base in (workdir, workdir / "src"):
        if base.is_dir():
            names += sorted(p.name for p in base.iterdir() if (p / "__init__.py").is_file()
                            and p.name.isidentifier() and not p.name.startswith(("test", "doc")))
    return names[:limit]


def _python_of(command: str) -> str:
    """The interpreter the test command runs: its own `python…`, the one beside a `…/pytest` script, else python3."""
    try:
        first = shlex.split(command)[0]
    except (ValueError, IndexError):
        return "python3"
    name = os.path.basename(first)
    if name.startswith("python"):
        return first
    if name in ("pytest", "py.test") and os.sep in first:
        return os.path.join(os.path.dirname(first), "python")
    return "python3"
