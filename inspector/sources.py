"""The code a trajectory's suspects are drawn on, and the reference fix's lines, found where pinpoint keeps them.

A trajectory records suspects as (path, lines), not the files: the page needs the text at the run's base commit.
The demo's repository is rebuilt from `agent/demo_tasks.json` (the same bytes `pinpoint demo` ran on, its known
buggy lines as the gold); a SWE-bench instance's file comes from its offline repository at the base commit and its
gold lines from the dataset's reference patch; a `fix` run's files come from the repository and commit its
trajectory records (`git show COMMIT:PATH` in that checkout; no gold is known). Anything else shows the suspects
without code, and says why.
"""

from __future__ import annotations

import difflib
import functools
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments.errors import PinpointError

#: at most this many files are drawn per trajectory (the suspects' best files first)
MAX_FILES = 12


@dataclass
class CodeContext:
    """The texts of the files to draw, the reference patch and its lines, and where they came from."""

    files: dict[str, str] = field(default_factory=dict)
    gold_patch: str = ""
    gold_lines: dict[str, list[int]] = field(default_factory=dict)
    origin: str = ""
    note: str = ""


def demo_bug(task: dict[str, Any]) -> str | None:
    """`Python/2` for the demo's `demo-Python-2`; None for any other task."""
    instance = str(task.get("instance_id", ""))
    if task.get("repo") != "pinpoint-demo" or not instance.startswith("demo-"):
        return None
    return instance.removeprefix("demo-").replace("-", "/", 1)


@functools.lru_cache(maxsize=8)
def _demo_repo(bug: str) -> tuple[dict[str, str], str, tuple[int, ...]]:
    """Every file of the rebuilt demo repository (it is small), the reference patch and the buggy lines; built once
    per bug, since the server asks again on every change of the folder."""
    from pinpoint.agent.demo import MODULE, build_demo_repo, demo_tasks

    with tempfile.TemporaryDirectory(prefix="pinpoint-inspect-") as tmp:
        demo = build_demo_repo(Path(tmp) / "repo", bug)
        files = {str(p.relative_to(demo.path)): p.read_text(errors="replace") for p in demo.path.rglob("*")
                 if p.is_file() and ".git" not in p.relative_to(demo.path).parts}
    task = next(t for t in demo_tasks()["tasks"] if t["task_id"] == bug)
    fixed = files[MODULE].replace(task["buggy_solution"].rstrip("\n"), task["canonical_solution"].rstrip("\n"), 1)
    gold = "".join(difflib.unified_diff(files[MODULE].splitlines(True), fixed.splitlines(True),
                                        f"a/{MODULE}", f"b/{MODULE}"))
    return files, gold, tuple(sorted(demo.buggy_lines))


def _demo_context(bug: str, paths: list[str]) -> CodeContext:
    """The demo repository as the run saw it (rebuilt: it is deterministic), its known buggy lines as the gold."""
    from pinpoint.agent.demo import MODULE

    files, gold, lines = _demo_repo(bug)
    wanted = {p: files[p] for p in dict.fromkeys([*paths, MODULE]) if p in files}
    return CodeContext(wanted, gold, {MODULE: list(lines)}, f"demo repository rebuilt for {bug}",
                       f"gold: the known buggy line(s) of HumanEvalFix {bug}")


@functools.lru_cache(maxsize=4)
def _instances(dataset: str | None) -> dict[str, Any]:
    from pinpoint.swebench_eval.datasets import load_instances

    try:
        return {i.instance_id: i for i in load_instances(dataset)}
    except (PinpointError, OSError, ValueError):
        return {}


def swebench_instance(instance_id: str, dataset: str | None = None) -> Any:
    """The SWE-bench row of `instance_id` in the dataset (default: the shared dev rows), or None."""
    return _instances(dataset).get(instance_id)


def gold_lines_of(patch: str) -> dict[str, list[int]]:
    """Lines of the original files the reference patch changes (insertions: the line they go before)."""
    from pinpoint.swebench_eval.metrics import patch_gold_lines

    try:
        return {path: sorted(lines) for path, lines in patch_gold_lines(patch or "").items()}
    except Exception:  # unidiff raises its own error types on a malformed patch; no gold is then known
        return {}


def _swebench_context(instance: Any, paths: list[str]) -> CodeContext:
    from pinpoint.swebench_eval.sources import RepoSources

    gold = gold_lines_of(instance.patch)
    context = CodeContext(gold_patch=instance.patch, gold_lines=gold,
                          origin=f"{instance.repo} at {instance.base_commit[:12]}",
                          note="gold: the lines the dataset's reference patch changes")
    try:
        sources = RepoSources()
        for path in list(dict.fromkeys([*paths, *gold]))[:MAX_FILES]:
            text = sources.show(instance.repo, instance.base_commit, path)
            if text is not None:
                context.files[path] = text
    except (PinpointError, OSError) as exc:
        context.note += f"; no code: {exc}"
    return context


def _git_show(repo: str, commit: str, path: str) -> str | None:
    """`path` at `commit` in the checkout `repo`, or None (no such file there)."""
    done = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, timeout=30)
    return done.stdout.decode(errors="replace") if done.returncode == 0 else None


def local_context(repo: str, commit: str, paths: list[str]) -> CodeContext:
    """The files of a `fix` run from the checkout and commit its trajectory records; a repository that is gone, not
    a local checkout (a URL), or no longer holds the commit (an `--allow-dirty` run's temporary one) says so."""
    context = CodeContext(origin=f"{repo} at {commit[:12]}", note="a fix run has no reference patch")
    if not Path(repo).is_dir():
        return CodeContext(note=f"no code: the run's repository {repo} is not a local checkout here")
    try:
        known = subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True,
                               timeout=30).returncode == 0
        if not known:
            return CodeContext(note=f"no code: {repo} does not hold the run's commit {commit[:12]} (a temporary "
                                    "commit of --allow-dirty, or history rewritten since)")
        for path in list(dict.fromkeys(paths))[:MAX_FILES]:
            text = _git_show(repo, commit, path)
            if text is not None:
                context.files[path] = text
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CodeContext(note=f"no code: git could not read {repo}: {exc}")
    return context


def code_context(task: dict[str, Any], paths: list[str], dataset: str | None = None,
                 source: tuple[str, str] | None = None) -> CodeContext:
    """The files `paths` (suspects' files, best first) as the run saw them, and the gold lines, where known;
    `source` is the (repository, commit) a `fix` trajectory records."""
    bug = demo_bug(task)
    if bug is not None:
        try:
            return _demo_context(bug, paths)
        except (ValueError, OSError, StopIteration) as exc:
            return CodeContext(note=f"the demo repository could not be rebuilt: {exc}")
    instance = swebench_instance(str(task.get("instance_id", "")), dataset)
    if instance is not None:
        return _swebench_context(instance, paths)
    if source is not None and source[0] and source[1]:
        return local_context(*source, paths)
    return CodeContext(note="no source for this task's repository is known here (neither the demo nor a SWE-bench "
                            "row): suspects are listed without code")
