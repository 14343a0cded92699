"""Where `pinpoint rl synthesize` breaks code: a copy of a local repository, or a SWE-bench row's repository made
whole (its reference fix and test patch applied) whose tests run in the row's own image.

Each source gets its own git repository under the work folder: the tasks' starting commits are branches there,
so the repository a user named is never written to. On a Ray cluster the work folder must be shared storage (the
tasks name it as their `repo_path`).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pinpoint.environments.errors import UsageError
from pinpoint.rl.synth_trace import MODULE, install_script
from pinpoint.rl.synthesize import Source

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def source_from_spec(spec: dict[str, Any], work_dir: Path, timeout_s: float) -> Source:
    """A Source from a `--instance ID` or `--repo PATH --test-command CMD` spec, prepared under `work_dir`."""
    if "instance_id" in spec:
        return instance_source(spec["instance_id"], spec.get("dataset"), work_dir, timeout_s)
    return local_source(Path(spec["repo"]), spec["test_command"], work_dir, spec.get("files") or ())


def local_source(repo: Path, test_command: str, work_dir: Path, files: tuple[str, ...] = ()) -> Source:
    """A clone of the local repository `repo` (its HEAD), tested by `test_command` run in the clone; traced with
    the plugin on PYTHONPATH (a command that is not pytest ignores it, and every mutant runs every test)."""
    if not (repo / ".git").exists():
        raise UsageError(f"{repo}: not a git repository (synthesize needs one to make the tasks' commits)")
    name = _SAFE.sub("-", repo.resolve().name)
    dest = _fresh(work_dir / name)
    _git(None, "clone", "-q", "--no-hardlinks", str(repo.resolve()), str(dest))
    plugin_dir = dest / ".git" / "pinpoint-trace"
    plugin_dir.mkdir()
    subprocess.run(["bash", "-c", install_script(shlex.quote(str(plugin_dir)))], check=True)
    trace = (f'PYTHONPATH={shlex.quote(str(plugin_dir))}${{PYTHONPATH:+:$PYTHONPATH}} '
             f'PYTEST_ADDOPTS="-p {MODULE} $PYTEST_ADDOPTS" {test_command}')
    return Source(name, str(dest), test_command, files=tuple(files), trace_command=trace)


def instance_source(instance_id: str, dataset: str | None, work_dir: Path, timeout_s: float) -> Source:
    """The row's repository at its base commit with the reference fix and the test patch committed (every test the
    row names passes there), tested by the row's test command inside the row's image, the checkout's changes since
    the base commit copied over its /testbed (no network, the command bounded by `timeout_s`); the files to break:
    those the fix touches and their neighbours."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.sources import RepoSources
    from pinpoint.swebench_eval.specs import spec_for, test_directives
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY
    from unidiff import PatchSet

    (instance,) = load_instances(dataset, ids=[instance_id])
    parser = MAP_REPO_TO_PARSER_PY.get(instance.repo)
    if parser is None:
        raise UsageError(f"{instance_id}: no official log parser for {instance.repo}")
    sources = RepoSources()
    dest = sources.export(instance.repo, instance.base_commit, _fresh(work_dir / instance_id))
    for patch in (instance.patch, instance.test_patch):
        subprocess.run(["git", "apply", "-"], cwd=dest, input=patch, text=True, check=True, capture_output=True)
    _git(dest, "add", "-A")
    _git(dest, "-c", "user.name=pinpoint", "-c", "user.email=pinpoint@localhost", "commit", "-q", "-m",
         f"{instance_id}: reference fix and tests")
    image = build_instance_image(instance, sources).tag
    test_cmd = spec_for(instance)["test_cmd"]
    command, trace = (_in_image(image, instance.base_commit, test_cmd, timeout_s, traced) for traced in (False, True))
    fixed = [p.path for p in PatchSet(instance.patch) if p.path.endswith(".py")]
    traced = parser.__name__ != "parse_log_sympy"  # bin/test is not pytest
    return Source(instance_id, str(dest), command, tuple(test_directives(instance)), parser.__name__,
                  tuple(_near(dest, fixed)), trace if traced else "", instance)


def _in_image(image: str, base_commit: str, test_cmd: str, timeout_s: float, traced: bool) -> str:
    """A command run in a checkout that streams the files changed since `base_commit` (and new ones) into a
    container of `image` over its /testbed, then runs `test_cmd` with its arguments there. Only the changes travel:
    what the image's install made (generated files, sphinx's tox.ini with -rA) stays as the harness has it."""
    tests = shlex.quote(test_cmd + ' "$@"')
    plugin = ""
    if traced:
        # a folder the test interpreter imports from, whatever starts it (tox passes no PYTHONPATH)
        site = ('"$(python -c \'import os, sys; print(next(p for p in sys.path if p.endswith("-packages") '
                'and os.path.isdir(p)))\')"')
        plugin = f'{install_script(site)} && export PYTEST_ADDOPTS="-p {MODULE} $PYTEST_ADDOPTS" && '
    inner = (f'tar -C /testbed -xf - && cd /testbed && {plugin}'
             f'exec timeout -k 5 {int(timeout_s)} bash -c {tests} _ "$@"')
    changed = f'{{ git diff --name-only --diff-filter=d {base_commit}; git ls-files -o --exclude-standard; }}'
    return (f'{changed} | tar -cf - -T - | docker run -i --rm --network none -e COLUMNS=400 {image} '
            f'bash -c {shlex.quote(inner)} _')


def _near(repo: Path, fixed: list[str]) -> list[str]:
    """The files the fix touches, then the other non-test Python files of their folders: code the row's tests
    exercise, so fewer mutants are spent where no test looks."""
    from pinpoint.rl.synthesize import is_test_path

    around = sorted({str(p.relative_to(repo)) for f in fixed for p in (repo / f).parent.glob("*.py")})
    return fixed + [f for f in around if f not in fixed and not is_test_path(f)]


def _fresh(path: Path) -> Path:
    """An empty folder at `path` (an earlier run's copy removed: its branches belong to its own tasks file)."""
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _git(cwd: Path | None, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args[:2])}: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()
