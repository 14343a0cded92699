"""Repository sources: find a repository's history offline (a `.git.tar`, a bare repo, a local path) or clone it
once from a URL, and export one commit as a small standalone checkout for an image layer.

The export keeps the real commit (same sha, so `git checkout <base_commit> -- <files>` in the eval script works)
but nothing newer, so an agent in the container cannot read the fix from later history.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.repo_image import extract_git_tar

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class SourceError(PinpointError, RuntimeError):
    """A repository or commit that cannot be found in any configured source."""


def _lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SourceError(f"git {' '.join(args[:4])}... failed: {proc.stderr.strip()[-400:]}")
    return proc.stdout


class RepoSources:
    """Resolves `owner/name` to a local git directory holding its history.

    Lookup order: an explicit mapping (`overrides`: repo -> local path or git URL), then `<repos_dir>/<owner>__<name>`
    as `.git.tar` (extracted once into the cache), `.git` (bare) or a plain checkout.
    """

    def __init__(self, repos_dir: Path | str | None = None, overrides: dict[str, str] | None = None,
                 cache_dir: Path | str | None = None) -> None:
        self.repos_dir = Path(repos_dir or paths.repos_dir())
        self.overrides = dict(overrides or {})
        self.cache_dir = Path(cache_dir or paths.cache_dir()) / "repos"

    def git_dir(self, repo: str) -> Path:
        """A directory git can read `repo`'s history from (bare or with a work tree)."""
        key = repo.replace("/", "__")
        with _lock(key):
            if repo in self.overrides:
                return self._from_location(key, self.overrides[repo])
            for candidate in (self.repos_dir / f"{key}.git.tar", self.repos_dir / f"{key}.git", self.repos_dir / key):
                if candidate.exists():
                    return self._from_location(key, str(candidate))
        raise SourceError(f"no source for {repo}: none of {self.repos_dir}/{key}.git.tar, .git or a checkout exists "
                          "(pass --source DIR, a folder of sources, or --source REPO=PATH_OR_URL)")

    def _from_location(self, key: str, location: str) -> Path:
        if location.endswith(".git.tar"):
            target = self.cache_dir / f"{key}-{_origin(location)}.git"
            try:
                return extract_git_tar(Path(location), target)
            except ValueError as exc:
                raise SourceError(str(exc)) from None
        if "://" in location or location.startswith("git@"):
            target = self.cache_dir / f"{key}-{_origin(location)}.git"
            if not (target / "HEAD").exists():
                tmp = Path(tempfile.mkdtemp(dir=self._ensure_cache()))
                _git("clone", "--bare", location, str(tmp / "repo.git"))
                (tmp / "repo.git").rename(target)
                shutil.rmtree(tmp, ignore_errors=True)
            return target
        path = Path(location)
        if not path.exists():
            raise SourceError(f"repository path does not exist: {path}")
        return path

    def _ensure_cache(self) -> Path:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        return self.cache_dir

    def has_commit(self, repo: str, commit: str) -> bool:
        git_dir = self.git_dir(repo)
        probe = subprocess.run(["git", "--git-dir", str(_dot_git(git_dir)), "cat-file", "-e", f"{commit}^{{commit}}"],
                               capture_output=True)
        return probe.returncode == 0

    def later_commits(self, repo: str, commit: str) -> list[str]:
        """Commits of the offline history committed after `commit`, oldest first (empty if `commit` is not there)."""
        if not self.has_commit(repo, commit):
            return []
        git = ["git", "--git-dir", str(_dot_git(self.git_dir(repo)))]
        when = int(subprocess.run([*git, "log", "-1", "--format=%ct", commit], capture_output=True, text=True,
                                  check=True).stdout)
        listing = subprocess.run([*git, "log", "--all", "--format=%ct %H"], capture_output=True, text=True,
                                 check=True).stdout
        dated = sorted((int(t), h) for t, h in (line.split() for line in listing.splitlines()))
        return [h for t, h in dated if t > when]

    def show(self, repo: str, commit: str, path: str) -> str | None:
        """The text of `path` at `commit`, or None when the file (or the commit) is not there."""
        proc = subprocess.run(["git", "--git-dir", str(_dot_git(self.git_dir(repo))), "show", f"{commit}:{path}"],
                              capture_output=True)
        return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None

    def export(self, repo: str, commit: str, dest: Path) -> Path:
        """Write a checkout of `commit` with a one-commit history (no remote, nothing newer) into `dest`."""
        source = self.git_dir(repo)
        if not self.has_commit(repo, commit):
            raise SourceError(f"commit {commit} of {repo} is not in {source}")
        dest.mkdir(parents=True, exist_ok=True)
        _git("init", "-q", str(dest))
        upload_pack = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
        _git("-c", "protocol.file.allow=always", "fetch", "-q", "--depth", "1", "--upload-pack", upload_pack,
             f"file://{source.resolve()}", commit, cwd=dest)
        _git("-c", "advice.detachedHead=false", "checkout", "-q", commit, cwd=dest)
        return dest


def _origin(location: str) -> str:
    """A short digest of where a cached copy came from (a URL, or a tar's absolute path, size and mtime): one cache
    serves several `--source` folders, and a replaced tar is extracted again, instead of answering from another copy."""
    if "://" in location or location.startswith("git@") or not Path(location).exists():
        identity = location  # a missing tar is said by the extraction, with its own message
    else:
        path = Path(location).resolve()
        stat = path.stat()
        identity = f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def _dot_git(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path
