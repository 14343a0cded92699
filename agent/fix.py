"""`pinpoint fix` helpers: read an issue (GitHub URL or text file), build a container for a team's repository from
its own install files, and turn the final patch into a branch of the user's repository without touching their
working tree."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from pinpoint.agent.config import Config, answer_settings
from pinpoint.agent.preflight import PreflightError, check_imports, check_test_command
from pinpoint.agent.progress import ProgressFn
from pinpoint.agent.runner import INFRA_STATUSES, RunResult, hold_run_folder, run_task
from pinpoint.agent.state import Task
from pinpoint.agent.test_runs import bounded_by, first_run_timeout
from pinpoint.environments import paths
from pinpoint.environments.build_outputs import built_extensions
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.errors import PinpointError, UsageError
from pinpoint.environments.files import scratch_dir, write_atomic
from pinpoint.environments.images import DEBIAN_SUITES, UnsupportedPythonVersion, nearest_suite_version
from pinpoint.environments.local import LocalRuntime, clone_checkout
from pinpoint.environments.project_deps import ProjectFiles, TestDeps, find_test_deps
from pinpoint.environments.repo_image import (
    C_TOOLCHAIN,
    REPO_WORKDIR,
    build_repo_image,
    install_script,
    pip_command,
    repo_name,
)
from pinpoint.environments.runtime import Runtime
from pinpoint.environments.scm_version import version_files
from pinpoint.swebench_eval.layout import RunLayout, safe_name
from pinpoint.tools.run_tests import run_tests

_ISSUE_URL = re.compile(r"^https?://github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)")
#: `OWNER/REPO#N`, as `gh` and GitHub's own text write an issue reference
_ISSUE_REF = re.compile(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#(\d+)$")
GITHUB_API = "https://api.github.com"
#: the final patch's test outcome, beside the trajectory
FINAL_TESTS = "final_tests.json"
#: the box's git trusts the copied checkout, whoever owns its files
TRUST_CHECKOUT = "git config --system --add safe.directory '*'\n"


class IssueError(PinpointError, ValueError):
    """The issue could not be read; the message says why and what to do instead."""


def read_issue(spec: str, timeout: float = 20.0) -> tuple[str, str]:
    """(id, text) of an issue given as a text file, a `gh issue view --json title,body` export, a GitHub issue URL
    or `OWNER/REPO#N` (both read through the GitHub API)."""
    path = Path(spec)
    if path.is_file():
        return _issue_file(path)
    match = _ISSUE_URL.match(spec) or _ISSUE_REF.match(spec)
    if match:
        return _github_issue(spec, *match.groups(), timeout=timeout)
    raise IssueError(f"--issue {spec!r} is neither a readable file, a GitHub issue URL "
                     "(https://github.com/OWNER/REPO/issues/N) nor OWNER/REPO#N")


def _issue_file(path: Path) -> tuple[str, str]:
    """A text file, or the JSON `gh issue view N --json title,body` writes (title and body as the text)."""
    text = path.read_text(errors="replace").strip()
    if not text:
        raise IssueError(f"issue file {path} is empty")
    if path.suffix == ".json" or text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            if path.suffix == ".json":
                raise IssueError(f"issue file {path} is not valid JSON ({exc}); expected the output of "
                                 "`gh issue view N --json title,body`") from None
            data = None
        if isinstance(data, dict) and ("title" in data or "body" in data):
            return path.stem, f"{data.get('title') or ''}\n\n{data.get('body') or ''}".strip()
        if path.suffix == ".json":
            raise IssueError(f"issue file {path} has no title or body; expected `gh issue view N --json title,body`")
    return path.stem, text


def _github_issue(spec: str, owner: str, name: str, number: str, timeout: float) -> tuple[str, str]:
    """The issue's title and body from the GitHub API (`PINPOINT_GITHUB_API` for GitHub Enterprise; GITHUB_TOKEN
    or GH_TOKEN for private repositories and rate limits); a failure is one line saying what to do instead."""
    api = f"{os.environ.get('PINPOINT_GITHUB_API') or GITHUB_API}/repos/{owner}/{name}/issues/{number}"
    headers = {"Accept": "application/vnd.github+json"}
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = httpx.get(api, headers=headers, timeout=timeout, follow_redirects=True)
    except httpx.HTTPError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise IssueError(f"cannot fetch {spec} ({type(exc).__name__}: {reason}); are you offline? Save it with "
                         f"`gh issue view {number} -R {owner}/{name} --json title,body > issue.json` or as text, "
                         "and pass --issue FILE instead") from exc
    if response.status_code != 200:
        raise IssueError(f"GitHub answered {response.status_code} for {api}: {' '.join(response.text[:200].split())}; "
                         "set GITHUB_TOKEN (or GH_TOKEN) for private repositories, or pass --issue FILE")
    data = response.json()
    return f"{owner}__{name}-{number}", f"{data.get('title', '')}\n\n{data.get('body') or ''}".strip()


def head_commit(source: str) -> str:
    """The commit `source` (a local repository) has checked out; URLs resolve in the clone instead."""
    proc = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"{source} is not a git repository with a commit: {proc.stderr.strip()}")
    return proc.stdout.strip()


def build_fix_image(source: str, commit: str, deps: TestDeps, python_version: str = "3.11", network: bool = True,
                    name: str | None = None, log=print) -> str:
    """An image of `source` at `commit` in /testbed, installed from its own files with its test dependencies;
    `name` (the user's repository) names it when `source` is a temporary copy; a project that compiles an
    extension gets a compiler first."""
    script = TRUST_CHECKOUT + (C_TOOLCHAIN if deps.compiles else "") + install_script(deps)
    return build_repo_image(source, commit, python_version=python_version, script=script, network=network, name=name,
                            log=log)


def check_branch(repo: str, branch: str) -> None:
    """Refuse, before any model call, a branch name git would refuse (with git's reason) or one that exists."""
    proc = subprocess.run(["git", "-C", repo, "check-ref-format", "--branch", branch], capture_output=True, text=True)
    if proc.returncode != 0:
        reason = proc.stderr.strip().removeprefix("fatal: ") or "git check-ref-format refuses it"
        raise PreflightError(f"--branch {branch!r} is not a valid branch name: {reason}")
    exists = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                            capture_output=True)
    if exists.returncode == 0:
        raise PreflightError(f"branch {branch!r} already exists in {repo}; choose another --branch name")


def create_branch(repo: str, branch: str, commit: str, patch: str, message: str) -> str:
    """Commit `patch` on a new branch `branch` (from `commit`) of the local repository `repo`, via a temporary
    worktree so the user's checkout and uncommitted work stay untouched. Returns the new commit."""
    git = ["git", "-c", "user.name=pinpoint", "-c", "user.email=pinpoint@localhost"]
    exists = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                            capture_output=True)
    if exists.returncode == 0:
        raise UsageError(f"branch {branch!r} already exists in {repo}; choose another --branch name")
    with scratch_dir("pinpoint-branch-") as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", repo, "worktree", "add", "--quiet", "-b", branch, tree, commit], check=True,
                       capture_output=True)
        try:
            applied = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=tree, input=patch.encode(),
                                     capture_output=True)
            if applied.returncode != 0:
                subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", tree], capture_output=True)
                subprocess.run(["git", "-C", repo, "branch", "-D", branch], capture_output=True)
                raise UsageError(f"the patch does not apply on {commit[:12]}: {applied.stderr.decode()[-500:]}")
            subprocess.run(git + ["add", "-A"], cwd=tree, check=True)
            subprocess.run(git + ["commit", "--quiet", "-m", message], cwd=tree, check=True)
            sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
        finally:
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", tree], capture_output=True)
    return sha


@dataclass(frozen=True)
class FixRequest:
    """What `pinpoint fix` was asked: the repository (path or URL), the issue, and how to run it."""

    repo: str
    issue_id: str
    issue_text: str
    test_command: str | None = None
    local: bool = False
    python: str = "3.11"
    offline: bool = False
    #: `--allow-dirty`: work on the local repository's working tree (its uncommitted tracked changes), not HEAD
    dirty: bool = False
    #: `--extras` / `--group`: the test dependencies to install (None: the conventional test names)
    extras: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None

    @property
    def is_local(self) -> bool:
        return Path(self.repo).is_dir()

    @property
    def title(self) -> str:
        return issue_title(self.issue_text) or self.issue_id

    def task(self) -> Task:
        """The task, named after the repository and the issue's title (what a person recognises in a list)."""
        slug = safe_name(re.sub(r"\W+", "-", self.title.lower()))[:60].strip("-_.")
        name = safe_name(f"{repo_name(self.repo)}-{slug or self.issue_id}")
        return Task(name, self.issue_text, repo=self.repo, test_command=self.test_command)


def issue_title(text: str) -> str:
    """The issue's first non-empty line without its markdown heading marks: its title."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.lstrip("#").strip()


def run_key(request: FixRequest, commit: str, config: Config) -> str:
    """The run's identity: a hash of what it was asked (issue text, base commit, test command, --local, the
    container's Python, --offline and the test dependencies named) and of the config that shapes the answer
    (model, endpoint, budgets, search, agent). Two runs resume each other only when every one of these agrees."""
    settings = answer_settings(config)
    asked = {"issue": request.issue_text, "commit": commit, "test_command": request.test_command,
             "local": request.local, "python": None if request.local else request.python, "config": settings}
    # each only when set, so a run made before these settings existed keeps its key
    asked.update({name: value for name, value in (("offline", request.offline and not request.local),
                                                  ("extras", request.extras), ("groups", request.groups)) if value})
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class FinalTests:
    """The test command's outcome on the final patch, kept beside the run so a finished run reports it again
    without running anything."""

    ok: bool
    passed: int
    failed: int


@dataclass
class FixOutcome:
    """What `fix_repository` produced: the agent's result, the commit it started from, where its files are, the
    test command's outcome on the final patch (None when not run) and how the run began (new, resumed, finished)."""

    result: RunResult
    commit: str
    run_dir: Path
    patch_file: Path
    final_tests: FinalTests | None
    began: str
    #: the test command asked for (None: none given)
    test_command: str | None = None


def previous_run(run_dir: Path) -> str:
    """'new', 'resumed at step N' or 'finished' for the run folder of this run's identity."""
    trajectory = run_dir / "trajectory.json"
    if not (run_dir / "checkpoint.sqlite").exists() or not trajectory.exists():
        return "new"
    try:
        data = json.loads(trajectory.read_text())
    except (OSError, ValueError):
        return "new"
    if data.get("status") in ("running", "crashed", "interrupted", *INFRA_STATUSES):
        return f"resumed at step {data.get('steps', 0)}"
    return "finished"


def fix_repository(request: FixRequest, config: Config, layout: RunLayout, *, fresh: bool = False,
                   log: Callable[[str], None] = print, on_progress: ProgressFn | None = None) -> FixOutcome:
    """Run the agent on a team's repository (a clone for a URL, so image and branch agree on the commit), in a
    container built from its own install files or, with `local`, on a checkout that the tests import; the test
    command is checked on HEAD first and run again on the final patch, which is written beside the trajectory.
    The run folder is keyed by `run_key`, so only the same question resumes (or returns) an earlier answer; one
    process at a time holds it."""
    task = request.task()
    with scratch_dir("pinpoint-src-") as tmp:
        source = request.repo
        if not request.is_local:
            source = str(Path(tmp) / "repo")
            clone_checkout(request.repo, source)
        commit = identity = head_commit(source)
        if request.dirty and request.is_local:
            source, commit, identity = _working_tree_commit(request.repo, commit, Path(tmp) / "tree")
        key = run_key(request, identity, config)
        run_dir = layout.trajectory_dir(f"{task.instance_id}-{key[:10]}")
        patch_file = layout.folder / f"{run_dir.name}.patch"
        with hold_run_folder(run_dir):
            began = "new" if fresh else previous_run(run_dir)
            if began == "finished":
                log(f"pinpoint fix: already finished in {run_dir} (use --fresh to run it again)")
                return FixOutcome(finished_result(run_dir), commit, run_dir, patch_file, _read_final(run_dir), began,
                                  task.test_command)
            deps = find_test_deps(ProjectFiles(source, commit), request.extras, request.groups)
            with _runtime(request, source, commit, deps, config, log) as runtime:
                if task.test_command:
                    if request.local:
                        check_imports(runtime, runtime.workdir, task.test_command)
                    first = check_test_command(runtime, task.test_command, first_run_timeout(config),
                                               hint=_missing_module_hint(request, deps))
                    config, hang = bounded_by(config, first)
                    if hang:
                        log(f"pinpoint fix: {hang}")
                log({"new": f"pinpoint fix: new run {run_dir}"}.get(began, f"pinpoint fix: {began} in {run_dir}"))
                result = run_task(task, runtime, config, run_dir=run_dir, fresh=fresh, on_progress=on_progress,
                                  meta={"repo": request.repo, "commit": commit, "run_key": key,
                                        "title": request.title})
                final = (_final_tests(runtime, task.test_command, config, run_dir)
                         if task.test_command and result.status not in INFRA_STATUSES else None)
            patch_file.parent.mkdir(parents=True, exist_ok=True)
            patch_file.write_text(result.patch)
    return FixOutcome(result, commit, run_dir, patch_file, final, began, task.test_command)


def fix_layout(config: Config, request: FixRequest, log: Callable[[str], None]) -> RunLayout:
    """Where a fix run's results go: the configured runs root (`~` expanded), except that the default root (`runs`
    in the working directory) never lands inside the repository under repair, where it would show as untracked
    files: then the user's data folder ($XDG_DATA_HOME/pinpoint/runs) holds them."""
    root = Path(config.runs.output_dir).expanduser()
    inside = request.is_local and root.resolve().is_relative_to(Path(request.repo).resolve())
    if inside and config.runs.output_dir == str(paths.runs_dir()) and not os.environ.get("PINPOINT_RUNS"):
        data_home = os.environ.get("XDG_DATA_HOME", "")
        root = (Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share") / "pinpoint" / "runs"
        log(f"pinpoint fix: results go to {root} (not inside the repository; --output sets another folder)")
    return RunLayout(config.runs.run_id or "fix", config.llm.model, str(root))


def _missing_module_hint(request: FixRequest, deps: TestDeps) -> str:
    """What to do when the tests miss a module: offline, the box could not download; with --local, the user's
    environment lacks what the project declares; in a box, a dependency the project does not declare."""
    if request.offline and not request.local:
        return ("--offline built the box without network, so it has only what the base image brings (no pytest, "
                "no dependencies): drop --offline, or use --local")
    if request.local:
        return f"install the test dependencies in your environment: {pip_command(deps)}"
    return (f"test dependencies installed: {deps.describe()}; name others with --extras NAME or --group NAME, "
            "or use --local")


def _final_tests(runtime: Runtime, command: str, config: Config, run_dir: Path) -> FinalTests:
    run = run_tests(runtime, command, config.agent.test_timeout_s)
    final = FinalTests(run.ok, run.passed, run.failed)
    write_atomic(run_dir / FINAL_TESTS, json.dumps(dataclasses.asdict(final)))
    return final


def _read_final(run_dir: Path) -> FinalTests | None:
    try:
        return FinalTests(**json.loads((run_dir / FINAL_TESTS).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def finished_result(run_dir: Path) -> RunResult:
    """A finished run's result as its trajectory recorded it, read without rewriting anything."""
    data = json.loads((run_dir / "trajectory.json").read_text())
    return RunResult(
        instance_id=data.get("task", {}).get("instance_id", ""), status=data.get("status", "?"),
        detail=data.get("detail", ""), patch=data.get("final_patch", ""), trajectory=run_dir / "trajectory.json",
        steps=data.get("steps", 0), prompt_tokens=data.get("prompt_tokens", 0),
        completion_tokens=data.get("completion_tokens", 0), cost_usd=data.get("cost_usd"),
        elapsed_s=data.get("elapsed_s", 0.0), edited_lines=data.get("edited_lines") or {"total": 0}, resumed=True)


def _working_tree_commit(repo: str, head: str, dest: Path) -> tuple[str, str, str]:
    """(source, commit, identity) of the working tree of `repo`: a clone of HEAD with the uncommitted tracked
    changes committed in it, the user's repository untouched; the identity is HEAD plus a hash of those changes
    (the temporary commit's own sha changes with its timestamp)."""
    diff = subprocess.run(["git", "-C", repo, "diff", "HEAD", "--binary"], capture_output=True).stdout
    if not diff.strip():
        return repo, head, head
    clone_checkout(repo, dest, head)
    subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=dest, input=diff, check=True,
                   capture_output=True)
    git = ["git", "-c", "user.name=pinpoint", "-c", "user.email=pinpoint@localhost"]
    # HEAD's own dates: the same changes give the same commit, so its image is built once and reused
    date = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%cI", head], capture_output=True,
                          text=True).stdout.strip()
    subprocess.run(git + ["commit", "--quiet", "-am", "pinpoint: the working tree"], cwd=dest, check=True,
                   env={**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return str(dest), head_commit(str(dest)), f"{head}+{hashlib.sha256(diff).hexdigest()}"


def _runtime(request: FixRequest, source: str, commit: str, deps: TestDeps, config: Config,
             log: Callable[[str], None]) -> Runtime:
    """A clone first on the tests' import path (`--local`, with the scm version files and the compiled extensions
    the user's build wrote into their checkout), else a container built from the repository's files and its test
    dependencies."""
    if request.local:
        checkout = Path(request.repo if request.is_local else source)
        built = {**built_extensions(checkout), **version_files(ProjectFiles(source, commit), checkout)}
        return LocalRuntime(source, commit, checkout_first_on_path=True, extra_files=built)
    log(f"pinpoint fix: test dependencies: {deps.describe()}")
    try:
        image = build_fix_image(source, commit, deps, request.python, network=not request.offline,
                                name=repo_name(request.repo), log=log)
    except UnsupportedPythonVersion:
        if not re.fullmatch(r"3\.\d+", request.python):
            raise PreflightError(f"--python {request.python!r}: expected a version like 3.11") from None
        raise PreflightError(f"--python {request.python}: no base image for that Python here (no registry answers, "
                             f"and the Debian releases pinpoint builds from ship Python {', '.join(DEBIAN_SUITES)}); "
                             f"pass --python {nearest_suite_version(request.python)}, or use --local") from None
    # the build had the network it needed; the agent's box has none, and the hardened `runtime.*` limits
    return DockerRuntime(image, workdir=REPO_WORKDIR, settings=config.runtime, network=False)
