"""The three bash scripts of an instance, mirroring the official harness's env / repo / eval scripts.

Differences from the official ones, all forced by running without conda or a registry (and documented in
docs/harness.md): the base image's own Python replaces the conda env (not a venv: tox-current-env symlinks the
interpreter, and a symlinked venv interpreter loses its venv); conda package lists are installed with pip; the
eval step is offline, so it reinstalls without network or build isolation; setuptools_scm gets the instance version
because the offline checkouts carry no tags.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.specs import PURE_PYTHON_SDISTS, EnvInputs, modified_test_files, test_command
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.harness.utils import record_test_exit_code

TESTBED = "/testbed"
HEREDOC = "EOF_114329324912"
PIP_VERSION = "26.0.1"  # the first pip with --uploaded-prior-to
#: builds resolve unpinned packages as of SWE-bench Verified's release, when the official images were built
#: (e.g. Pygments 2.19+ changed the HTML sphinx's P2P tests compare)
PACKAGES_PRIOR_TO = "2024-08-01T00:00:00Z"

#: pinned for every test run (also written into eval.sh, so a log can be reproduced by hand)
EVAL_ENV = {
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    # eval containers have no network: reinstall from what the image already has
    "PIP_NO_INDEX": "1",
    "PIP_NO_BUILD_ISOLATION": "0",  # pip's inverted switch: "0" turns build isolation off
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    # the reinstall must leave the same kind of editable install as the instance layer (see instance_script)
    "PIP_CONFIG_SETTINGS": "editable_mode=compat",
}


#: written when the instance step starts: what is newer was made by the step (see SLIM_STEPS)
LAYER_MARK = "/tmp/pinpoint-layer-start"
#: the end of the instance step: drop what no test, reset or grading reads, so the layer holds the checkout, its
#: .git and the install (docs/harness.md, "Instance layer"). Bytecode the step compiled comes back on first import
#: (and from the eval script's reinstall); a pure-Python `build/` (no compiled objects in build/temp*) comes back
#: from that reinstall; git's sample hooks never run. Compiled extension trees stay: the offline reinstall reuses them.
#: drop the bytecode pip compiled since LAYER_MARK (a fresh install's RECORD lists it, the layer need not hold it)
DROP_BYTECODE = [
    'SITE=$(python -c "import site; print(\' \'.join(site.getsitepackages()))")',
    f"find {TESTBED} $SITE -xdev -name '*.pyc' -newer {LAYER_MARK} -delete 2>/dev/null || true",
    f"find {TESTBED} $SITE -xdev -type d -name __pycache__ -empty -delete 2>/dev/null || true",
    f"rm -f {LAYER_MARK}",
]
SLIM_STEPS = [
    "rm -f .git/hooks/*.sample",
    "if [ -d build ] && [ -z \"$(git ls-files build)\" ] && ! compgen -G 'build/temp*' >/dev/null; then rm -rf build; fi",
    *DROP_BYTECODE,
]


#: where the instance step finds what `reference.write_commit_delta` wrote: the commit's pack, `shallow`, `FETCH_HEAD`
COMMIT_DELTA = "/tmp/pinpoint-commit"


def checkout_steps(commit: str) -> list[str]:
    """Turn the reference layer's /testbed into the checkout of `commit` while writing only what differs.

    The commit's pack joins the reference's objects; the refreshed index lets checkout-index skip every file the
    reference already holds as `commit` has it; `git clean` deletes the reference's files `commit` lacks; the final
    checkout detaches HEAD at `commit` from the unborn branch, as the host-side export did (same reflog)."""
    return [
        f"mv {COMMIT_DELTA}/pack-* .git/objects/pack/",
        f"mv {COMMIT_DELTA}/shallow {COMMIT_DELTA}/FETCH_HEAD .git/",
        f"rmdir {COMMIT_DELTA}",
        f"git read-tree {commit}",
        "git update-index -q --refresh || true",
        "git checkout-index -a -f",
        "git clean -ffdxq",
        f"git -c advice.detachedHead=false checkout -q {commit}",
    ]


#: what the reference step leaves for the instance step (deps_box's env snapshot and pins); that step deletes it
SHARED_DEPS = "/var/lib/pinpoint-shared-deps"
#: every distribution the env and reference steps installed beyond the spec's env, as exact pins
SHARED_PINS = f"{SHARED_DEPS}/shared.txt"
#: the env's distributions as the spec made them, before any shared pin
ENV_SNAPSHOT = f"{SHARED_DEPS}/env.json"
DEPS_TOOL = "/tmp/pinpoint-deps.py"
#: a copy of /testbed where a dry run may build metadata without touching the tree the layer keeps
DEPS_SCRATCH = "/tmp/pinpoint-deps-tree"
DEPS_REPORT = "/tmp/pinpoint-deps-report.json"
_DEPS_BOX = Path(__file__).with_name("deps_box.py")


def apt_cache_cut(spec: dict[str, Any]) -> list[str]:
    """A pre_install that runs apt-get (sphinx 7.2+: graphviz) regenerates apt's binary caches, 69 MB that every
    apt command rebuilds when missing: with the package in the shared reference, they were most of the row's layer."""
    runs_apt = any("apt-get" in line for line in spec.get("pre_install", []))
    return ["rm -f /var/cache/apt/pkgcache.bin /var/cache/apt/srcpkgcache.bin"] if runs_apt else []


def dry_run_install(spec: dict[str, Any]) -> str | None:
    """The spec's install as a pip dry run that writes its resolution to DEPS_REPORT; None when the install is not
    one plain pip command (`python setup.py install`, a chain), whose dependencies then stay in the instance layer."""
    install = spec.get("install", "")
    if not re.fullmatch(r"python -m pip install [^;&|<>`$()]+", install):
        return None
    return f"{install} --dry-run -q --report {DEPS_REPORT}"


def _dry_run_steps(dry_run: str, pre_install: list[str]) -> list[str]:
    """Dry-run the spec's install, after `pre_install`, in a scratch copy of /testbed (the layer keeps the tree as
    the step found it)."""
    return [
        f"rm -rf {DEPS_SCRATCH} && cp -a {TESTBED} {DEPS_SCRATCH} && cd {DEPS_SCRATCH}",
        *pre_install,
        _install_step(dry_run),
        f"cd {TESTBED} && rm -rf {DEPS_SCRATCH}",
    ]


def reference_script(spec: dict[str, Any] | None = None) -> str:
    """The reference layer's step: the tree and .git are copied in and git must read them. With `spec` (and a
    plain pip install) it also installs the dependencies that install resolves for the reference commit and the
    env lacks, as exact pins without a resolution of their own, so they lie in this shared layer (deps_box; the
    instance step proves its install still ends as a fresh one). A dry run that fails shares nothing."""
    lines = ["#!/bin/bash", "set -euxo pipefail", f"git -C {TESTBED} count-objects -v"]
    dry_run = None if spec is None else dry_run_install(spec)
    if spec is None or dry_run is None:
        return "\n".join(lines) + "\n"
    installed, ours = "/tmp/pinpoint-deps-installed.json", "/tmp/pinpoint-deps-reference.txt"
    lines += [
        "export PIP_NO_CACHE_DIR=1",
        # the project's own version: the offline checkout has no tags, and no dependency depends on it
        "export SETUPTOOLS_SCM_PRETEND_VERSION=0",
        f"export PIP_UPLOADED_PRIOR_TO={PACKAGES_PRIOR_TO}",
        "export PIP_CONFIG_SETTINGS=editable_mode=compat",
        f"mkdir -p {SHARED_DEPS}",
        _heredoc(DEPS_TOOL, _DEPS_BOX.read_text()),
        # an env that installed shared pins recorded itself as the spec made it (env_script)
        f"[ -e {ENV_SNAPSHOT} ] || python {DEPS_TOOL} snapshot {ENV_SNAPSHOT}",
        f"python {DEPS_TOOL} snapshot {installed}",
        "if ! (", *_dry_run_steps(dry_run, spec.get("pre_install", [])), "); then",
        f"  echo '{{\"install\": []}}' > {DEPS_REPORT}; echo 'pinpoint: the dry run failed: no dependency shared'",
        "fi",
        f"cd {TESTBED}",
        f"python {DEPS_TOOL} shared {DEPS_REPORT} {installed} {ours}",
        f"touch {LAYER_MARK}",
        *_install_pins(ours),
        *apt_cache_cut(spec),
        f"rm -rf {DEPS_TOOL} {DEPS_REPORT} {DEPS_SCRATCH} {installed} {ours}",
        f"cat {SHARED_PINS}",
    ]
    return "\n".join(lines) + "\n"


def _install_pins(pins: str) -> list[str]:
    """Install `pins` (exact, no resolution of their own), unrequested and without bytecode as a fresh install's
    dependencies end up in an instance layer, and add them to the list the instance step reads."""
    return [
        f"if [ -s {pins} ]; then python -m pip install --no-deps -r {pins}; fi",
        f"python {DEPS_TOOL} unrequest {pins}",
        f"cat {pins} >> {SHARED_PINS}",
        *DROP_BYTECODE,
    ]


def instance_deps_steps(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The instance step's part of sharing (before and after the spec's install), or nothing when its reference
    shares no dependency: hide the shared distributions, dry-run the install over the env alone (the fresh
    resolution), put them back, uninstall those it does not pick at that version; after the install, fail unless the
    installed set is the env's updated by that resolution."""
    dry_run = dry_run_install(spec)
    if dry_run is None:
        return [], []
    pins, env, hidden, drop = SHARED_PINS, ENV_SNAPSHOT, "/tmp/pinpoint-deps-hidden", "/tmp/pinpoint-deps-drop.txt"
    before = [
        _heredoc(DEPS_TOOL, _DEPS_BOX.read_text()),
        f"if [ -s {pins} ]; then",
        f"mkdir -p {hidden} && python {DEPS_TOOL} hide {pins} {hidden}",
        *_dry_run_steps(dry_run, []),  # the tree has had its pre_install (not idempotent: sphinx's sed pins)
        f"python {DEPS_TOOL} unhide {hidden}",
        f"python {DEPS_TOOL} drop {pins} {DEPS_REPORT} {drop}",
        f"if [ -s {drop} ]; then python -m pip uninstall -y -r {drop}; fi",
        "fi",
    ]
    after = [
        f"if [ -s {pins} ]; then python {DEPS_TOOL} check {env} {DEPS_REPORT}; fi",
        f"rm -rf {SHARED_DEPS} {DEPS_TOOL} {DEPS_REPORT} {drop}",
        *apt_cache_cut(spec),
    ]
    return before, after


def _heredoc(path: str, body: str) -> str:
    return f"cat <<'{HEREDOC}' > {path}\n{body}\n{HEREDOC}"


def env_script(inputs: EnvInputs, shared_pins: tuple[str, ...] = ()) -> str:
    """Build the env layer: the spec's packages in the base Python (official make_env_script_list_py, pip for
    conda); `python` names that interpreter, as in a conda env. Then `shared_pins` (swebench_eval.shared_pins), the
    install's dependencies that all of the repository's rows resolve alike, with the bookkeeping of
    `reference_script`: stored here once instead of in every reference layer."""
    lines = [
        "#!/bin/bash",
        "set -euxo pipefail",
        "export PIP_BREAK_SYSTEM_PACKAGES=1  # Debian marks its Python externally managed from bookworm on",
        "ln -sf \"$(command -v python3)\" /usr/local/bin/python",
        # conda envs come with wheel; the offline reinstall at eval time (no build isolation) needs it
        f"python -m pip install --upgrade pip=={PIP_VERSION} wheel",
        f"export PIP_UPLOADED_PRIOR_TO={PACKAGES_PRIOR_TO}",
    ]
    pins = " ".join(shlex.quote(p) for p in inputs.pip_packages)
    if inputs.packages_kind == "requirements":
        lines += [_heredoc("/tmp/requirements.txt", inputs.packages),
                  "python -m pip install -r /tmp/requirements.txt", "rm /tmp/requirements.txt"]
    elif inputs.packages_kind == "list":
        lines.append("python -m pip install " + " ".join(shlex.quote(p) for p in inputs.packages.split()))
    if pins:
        lines.append(f"python -m pip install {pins}")
    if inputs.apt_packages:  # the C libraries conda ships with some packages, from Debian; apt's lists and caches go
        lines.append("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
                     + " ".join(inputs.apt_packages) + " && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin")
    if inputs.packages_kind == "environment.yml":
        # conda's environment.yml: each name as a binary wheel that agrees with the spec's pins, or skipped
        lines += [_heredoc("/tmp/constraints.txt", "\n".join(inputs.pip_packages)),
                  f"for pkg in {' '.join(shlex.quote(n) for n in inputs.packages.split())}; do",
                  f'  python -m pip install --only-binary :all: --no-binary {",".join(PURE_PYTHON_SDISTS)}'
                  ' -c /tmp/constraints.txt "$pkg"'
                  ' || echo "pinpoint: skipped $pkg (no wheel agreeing with the pins)"',
                  "done", "rm /tmp/constraints.txt"]
    if shared_pins:
        wanted = "/tmp/pinpoint-env-pins.txt"
        lines += [f"mkdir -p {SHARED_DEPS}", _heredoc(DEPS_TOOL, _DEPS_BOX.read_text()),
                  f"python {DEPS_TOOL} snapshot {ENV_SNAPSHOT}", _heredoc(wanted, "\n".join(shared_pins)),
                  f"python {DEPS_TOOL} absent {wanted} {ENV_SNAPSHOT} {wanted}.absent",
                  f"touch {LAYER_MARK}", *_install_pins(f"{wanted}.absent"), f"rm -f {DEPS_TOOL} {wanted}*"]
    lines.append("python -m pip list")
    return "\n".join(lines) + "\n"


def _scm_version(instance: Instance) -> str:
    return f"export SETUPTOOLS_SCM_PRETEND_VERSION={shlex.quote(instance.version)}"


#: where the install step keeps pip's output to look for the PEP 660 refusal (inside the container being built)
INSTALL_LOG = "/tmp/pinpoint-install.log"


def _install_step(install: str) -> str:
    """The spec's install; an editable install that today's pip refuses for lack of PEP 660 is retried without
    build isolation.

    A project pinning an old setuptools in its build requirements (pylint 2.15: `setuptools~=62.6`) has no
    `build_editable` hook; the pip of the official images fell back to `setup.py develop`, today's pip refuses.
    Without build isolation the env's newer setuptools builds it."""
    if "pip install -e" not in install:
        return install
    log = INSTALL_LOG
    retry = install.replace("pip install -e", "pip install --no-build-isolation -e", 1)
    return f"if ! {{ {install}; }} 2>&1 | tee {log}; then\n  grep -q build_editable {log} || exit 1\n  {retry}\nfi"


def instance_script(instance: Instance, spec: dict[str, Any], shared_deps: bool = False) -> str:
    """Check out the base commit over the reference layer's /testbed and install it (official
    make_repo_script_list_py, minus the clone: the commit is fetched from a copy of the offline archive).
    `shared_deps`: the reference layer was built by `reference_script(spec)` (instance_deps_steps)."""
    before, after = instance_deps_steps(spec) if shared_deps else ([], [])
    lines = [
        "#!/bin/bash",
        "set -euxo pipefail",
        f"cd {TESTBED}",
        *checkout_steps(instance.base_commit),
        f"touch {LAYER_MARK}",
        "export PIP_NO_CACHE_DIR=1",
        _scm_version(instance),
        f"export PIP_UPLOADED_PRIOR_TO={PACKAGES_PRIOR_TO}",
        # a path entry, as `setup.py develop` made for the official images: astroid (pylint) and other tools that
        # scan sys.path cannot see setuptools' import-hook editable installs
        "export PIP_CONFIG_SETTINGS=editable_mode=compat",
        *spec.get("pre_install", []),
    ]
    if "install" in spec:
        lines += [*before, _install_step(spec["install"]), *after]
    lines += [
        "git config --global user.email setup@swebench.config",
        "git config --global user.name SWE-bench",
        # the official `git commit --allow-empty -am SWE-bench`, staged path by path: `-a` makes git touch the
        # reference layer's pack, and overlay would copy the whole pack into this layer
        "git diff --name-only -z | xargs -0 -r git update-index --remove --",
        "git commit --allow-empty -m SWE-bench",
        *SLIM_STEPS,
    ]
    return "\n".join(lines) + "\n"


def eval_script(instance: Instance, spec: dict[str, Any], guard: str = "") -> str:
    """The official eval script: reinstall, reset and apply the test patch, run the tests between markers, record
    the test command's exit code, reset the test files. `guard` (swebench_eval.tamper.guard_script) runs just before
    the test files are reset: it puts back the test infrastructure a patch touched."""
    test_files = modified_test_files(instance.test_patch)
    # as the current official make_eval_script_list_common: a bare `git checkout <base>` (a test patch that only adds
    # files) would detach to the base commit and undo the instance's pre_install edits (sphinx's `pytest -rA`)
    reset_tests = (f"git checkout {instance.base_commit} {' '.join(test_files)}" if test_files
                   else 'echo "No test files to reset"')
    commands = [
        *(f"export {k}={shlex.quote(v)}" for k, v in EVAL_ENV.items()),
        _scm_version(instance),
        f"cd {TESTBED}",
        f"git config --global --add safe.directory {TESTBED}",
        f"cd {TESTBED}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {instance.base_commit}",
    ]
    if "install" in spec:
        commands.append(spec["install"])
    commands += [
        *([guard] if guard else []),
        reset_tests,
        f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}",
        f": '{START_TEST_OUTPUT}'",
        test_command(instance, spec),
        f": '{END_TEST_OUTPUT}'",
        reset_tests,
    ]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *record_test_exit_code(commands)]) + "\n"
