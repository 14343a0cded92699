"""The three bash scripts of an instance, mirroring the official harness's env / repo / eval scripts.

Differences from the official ones, all forced by running without conda or a registry (and documented in
docs/harness.md): a venv at /opt/venv replaces the conda env; conda package lists are installed with pip; the
eval step is offline, so it reinstalls without network or build isolation; setuptools_scm gets the instance version
because the offline checkouts carry no tags.
"""

from __future__ import annotations

import shlex
from typing import Any

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.harness.utils import record_test_exit_code

from swebench_eval.datasets import Instance
from swebench_eval.specs import EnvInputs, modified_test_files, test_command

VENV = "/opt/venv"
TESTBED = "/testbed"
HEREDOC = "EOF_114329324912"
PIP_VERSION = "24.2"

#: pinned for every test run (also written into eval.sh, so a log can be reproduced by hand)
EVAL_ENV = {
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    # eval containers have no network: reinstall from what the image already has
    "PIP_NO_INDEX": "1",
    "PIP_NO_BUILD_ISOLATION": "0",  # pip's inverted switch: "0" turns build isolation off
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}


def _heredoc(path: str, body: str) -> str:
    return f"cat <<'{HEREDOC}' > {path}\n{body}\n{HEREDOC}"


def env_script(inputs: EnvInputs) -> str:
    """Build the env layer: a venv with the spec's packages (official make_env_script_list_py, pip for conda)."""
    lines = [
        "#!/bin/bash",
        "set -euxo pipefail",
        f"python3 -m venv {VENV}",
        f"source {VENV}/bin/activate",
        # conda envs come with wheel; the offline reinstall at eval time (no build isolation) needs it
        f"python -m pip install --upgrade pip=={PIP_VERSION} wheel",
    ]
    pins = " ".join(shlex.quote(p) for p in inputs.pip_packages)
    if inputs.packages_kind == "requirements":
        lines += [_heredoc("/tmp/requirements.txt", inputs.packages),
                  "python -m pip install -r /tmp/requirements.txt", "rm /tmp/requirements.txt"]
    elif inputs.packages_kind == "list":
        lines.append("python -m pip install " + " ".join(shlex.quote(p) for p in inputs.packages.split()))
    if pins:
        lines.append(f"python -m pip install {pins}")
    if inputs.packages_kind == "environment.yml":
        # conda's environment.yml: each name as a binary wheel that agrees with the spec's pins, or skipped
        lines += [_heredoc("/tmp/constraints.txt", "\n".join(inputs.pip_packages)),
                  f"for pkg in {' '.join(shlex.quote(n) for n in inputs.packages.split())}; do",
                  '  python -m pip install --only-binary :all: -c /tmp/constraints.txt "$pkg"'
                  ' || echo "pinpoint: skipped $pkg (no wheel agreeing with the pins)"',
                  "done", "rm /tmp/constraints.txt"]
    lines.append("python -m pip list")
    return "\n".join(lines) + "\n"


def _scm_version(instance: Instance) -> str:
    return f"export SETUPTOOLS_SCM_PRETEND_VERSION={shlex.quote(instance.version)}"


def instance_script(instance: Instance, spec: dict[str, Any]) -> str:
    """Install the checkout at /testbed (official make_repo_script_list_py, minus the clone: the source is copied in)."""
    lines = [
        "#!/bin/bash",
        "set -euxo pipefail",
        f"source {VENV}/bin/activate",
        f"cd {TESTBED}",
        _scm_version(instance),
        *spec.get("pre_install", []),
    ]
    if "install" in spec:
        lines.append(spec["install"])
    lines += [
        "git config --global user.email setup@swebench.config",
        "git config --global user.name SWE-bench",
        "git commit --allow-empty -am SWE-bench",
    ]
    return "\n".join(lines) + "\n"


def eval_script(instance: Instance, spec: dict[str, Any]) -> str:
    """The official eval script: reinstall, reset and apply the test patch, run the tests between markers, record
    the test command's exit code, reset the test files."""
    test_files = modified_test_files(instance.test_patch)
    reset_tests = f"git checkout {instance.base_commit} {' '.join(test_files)}"
    commands = [
        *(f"export {k}={shlex.quote(v)}" for k, v in EVAL_ENV.items()),
        _scm_version(instance),
        f"source {VENV}/bin/activate",
        f"cd {TESTBED}",
        f"git config --global --add safe.directory {TESTBED}",
        f"cd {TESTBED}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {instance.base_commit}",
        f"source {VENV}/bin/activate",
    ]
    if "install" in spec:
        commands.append(spec["install"])
    commands += [
        reset_tests,
        f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}",
        f": '{START_TEST_OUTPUT}'",
        test_command(instance, spec),
        f": '{END_TEST_OUTPUT}'",
        reset_tests,
    ]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *record_test_exit_code(commands)]) + "\n"
