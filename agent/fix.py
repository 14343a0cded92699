"""`pinpoint fix` helpers: read an issue (GitHub URL or text file), build a container for a team's repository from
its own install files, and turn the final patch into a branch of the user's repository without touching their
working tree."""

from __future__ import annotations

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
from pinpoint.agent.preflight import check_imports, check_test_command
from pinpoint.agent.progress import ProgressFn
from pinpoint.agent.runner import INFRA_STATUSES, RunResult, run_task
from pinpoint.agent.state import Task
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.files import scratch_dir
from pinpoint.environments.local import LocalRuntime, clone_checkout
from pinpoint.environments.repo_image import REPO_WORKDIR, VENV, build_repo_image
from pinpoint.environments.runtime import Runtime
from pinpoint.swebench_eval.layout import RunLayout, safe_name
from pinpoint.tools.run_tests import TestRun, run_tests

_ISSUE_URL = re.compile(r"^https?://github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)")
#: `OWNER/REPO#N`, as `gh` and GitHub's own text write an issue reference
_ISSUE_REF = re.compile(r"^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#(\d+)$")
GITHUB_API = "https://api.github.com"
#: install the repository the way its own files say; each step may fail offline, the editable install stays
INSTALL_SCRIPT = f"""git config --system --add safe.directory '*'
cd {REPO_WORKDIR}
python3 -m venv {VENV}
PIP="{VENV}/bin/pip --disable-pip-version-check"
for f in requirements*.txt requirements/*.txt; do
  if [ -f "$f" ]; then $PIP install -r "$f" || echo "pinpoint: could not install $f (offline?)"; fi
done
if [ -f pyproject.toml ] || [ -f setup.py ]; then
  $PIP install -e . || $PIP install --no-deps --no-build-isolation --no-index -e . || echo "pinpoint: no install"
fi
$PIP install pytest || echo "pinpoint: pytest not installed (offline?)"
"""


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
        raise ValueError(f"{source} is not a git repository with a commit: {proc.stderr.strip()}")
    return proc.stdout.strip()


def build_fix_image(source: str, commit: str, python_version: str = "3.11", network: bool = True, log=print) -> str:
    """An image of `source` at `commit` in /testbed, installed from its own requirement/pyproject/setup files."""
    return build_repo_image(source, commit, python_version=python_version, script=INSTALL_SCRIPT, network=network,
                            log=log)


def create_branch(repo: str, branch: str, commit: str, patch: str, message: str) -> str:
    """Commit `patch` on a new branch `branch` (from `commit`) of the local repository `repo`, via a temporary
    worktree so the user's checkout and uncommitted work stay untouched. Returns the new commit."""
    git = ["git", "-c", "user.name=pinpoint", "-c", "user.email=pinpoint@localhost"]
    exists = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                            capture_output=True)
    if exists.returncode == 0:
        raise ValueError(f"branch {branch!r} already exists in {repo}; choose another --branch name")
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
                raise ValueError(f"the patch does not apply on {commit[:12]}: {applied.stderr.decode()[-500:]}")
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

    @property
    def is_local(self) -> bool:
        return Path(self.repo).is_dir()

    @property
    def title(self) -> str:
        return issue_title(self.issue_text) or self.issue_id

    def task(self) -> Task:
        """The task, named after the repository and the issue's title (what a person recognises in a list)."""
        slug = safe_name(re.sub(r"\W+", "-", self.title.lower()))[:60].strip("-_.")
        name = safe_name(f"{Path(self.repo.rstrip('/')).name}-{slug or self.issue_id}")
        return Task(name, self.issue_text, repo=self.repo, test_command=self.test_command)


def issue_title(text: str) -> str:
    """The issue's first non-empty line without its markdown heading marks: its title."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.lstrip("#").strip()


def run_key(request: FixRequest, commit: str, config: Config) -> str:
    """The run's identity: a hash of what it was asked (issue text, base commit, test command, --local and the
    container's Python) and of the config that shapes the answer (model, endpoint, budgets, search, agent). Two
    runs resume each other only when every one of these agrees."""
    settings = answer_settings(config)
    asked = {"issue": request.issue_text, "commit": commit, "test_command": request.test_command,
             "local": request.local, "python": None if request.local else request.python, "config": settings}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class FixOutcome:
    """What `fix_repository` produced: the agent's result, the commit it started from, where its files are, the
    test command's run on the final patch (None without one) and how the run began (new, resumed, finished)."""

    result: RunResult
    commit: str
    run_dir: Path
    patch_file: Path
    final_tests: TestRun | None
    began: str


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
    The run folder is keyed by `run_key`, so only the same question resumes (or returns) an earlier answer."""
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
        began = "new" if fresh else previous_run(run_dir)
        with _runtime(request, source, commit, config) as runtime:
            if task.test_command:
                if request.local:
                    check_imports(runtime, runtime.workdir, task.test_command)
                check_test_command(runtime, task.test_command, config.agent.test_timeout_s)
            log({"new": f"pinpoint fix: new run {run_dir}", "finished": f"pinpoint fix: already finished in "
                 f"{run_dir} (use --fresh to run it again)"}.get(began, f"pinpoint fix: {began} in {run_dir}"))
            result = run_task(task, runtime, config, run_dir=run_dir, fresh=fresh, on_progress=on_progress,
                              meta={"repo": request.repo, "commit": commit, "run_key": key, "title": request.title})
            final = (run_tests(runtime, task.test_command, config.agent.test_timeout_s)
                     if task.test_command and result.status not in INFRA_STATUSES else None)
    patch_file = layout.folder / f"{run_dir.name}.patch"
    patch_file.parent.mkdir(parents=True, exist_ok=True)
    patch_file.write_text(result.patch)
    return FixOutcome(result, commit, run_dir, patch_file, final, began)


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
    subprocess.run(git + ["commit", "--quiet", "-am", "pinpoint: the working tree"], cwd=dest, check=True)
    return str(dest), head_commit(str(dest)), f"{head}+{hashlib.sha256(diff).hexdigest()}"


def _runtime(request: FixRequest, source: str, commit: str, config: Config) -> Runtime:
    """A clone first on the tests' import path (`--local`), else a container built from the repository's files."""
    if request.local:
        return LocalRuntime(source, commit, checkout_first_on_path=True)
    image = build_fix_image(source, commit, request.python, network=not request.offline)
    # the build had the network it needed; the agent's box has none, and the hardened `runtime.*` limits
    return DockerRuntime(image, workdir=REPO_WORKDIR, settings=config.runtime, network=False)
