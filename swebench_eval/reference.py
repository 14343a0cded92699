"""The reference layer between env and instance: one checkout that the instances of a calendar quarter share, so an
instance layer stores only the files its base commit changed, not the whole repository.

The offline archives are shallow (every commit a root, no parents), so no commit can be proven an ancestor of a
base commit. The reference is therefore made so that it cannot leak, whatever its commit:
- its `.git` holds only the objects (blobs and trees) found in the tree of *every* archive commit of the quarter:
  each of them is in the instance's own tree, so the box's object store ends with nothing its base commit lacks;
- its work tree is the checkout of the quarter's oldest archive commit; the instance step rewrites every file that
  differs and deletes every one its base commit lacks, so overlay hides the rest (nothing of it is readable in the
  box).
The choice depends only on the base commit's date and the archive's commits, so it is the same on every machine.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pinpoint.swebench_eval.sources import RepoSources, SourceError

#: months per reference period: 3 (a quarter) measured best for sympy and sphinx (docs/harness.md, "Reference layer")
PERIOD_MONTHS = 3
UPLOAD_PACK = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"


@dataclass(frozen=True)
class Reference:
    """The reference of one period: the commit checked out and the archive commits whose common objects it holds."""

    repo: str
    commit: str
    members: tuple[str, ...]


def _git(git_dir: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SourceError(f"git {' '.join(args[:3])}... failed: {proc.stderr.strip()[-400:]}")
    return proc.stdout


def archive_dir(sources: RepoSources, repo: str) -> Path:
    """The git directory of `repo`'s offline archive (`.git` of a checkout, or the bare repository itself)."""
    path = sources.git_dir(repo)
    return path / ".git" if (path / ".git").exists() else path


@cache
def _dated_commits(git_dir: Path) -> tuple[tuple[int, str], ...]:
    """(committer time, sha) of every commit of the archive, oldest first."""
    listing = _git(git_dir, "log", "--all", "--format=%ct %H")
    return tuple(sorted((int(t), h) for t, h in (line.split() for line in listing.splitlines())))


def period_of(timestamp: int) -> tuple[int, int]:
    """(year, period index) of a committer time, in UTC."""
    when = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return when.year, (when.month - 1) // PERIOD_MONTHS


def choose_reference(sources: RepoSources, repo: str, base_commit: str) -> Reference:
    """The reference of `base_commit`'s period: the period's archive commits, the oldest one checked out."""
    git_dir = archive_dir(sources, repo)
    dated = _dated_commits(git_dir)
    times = {sha: t for t, sha in dated}
    if base_commit not in times:
        raise SourceError(f"commit {base_commit} of {repo} is not in {git_dir}")
    period = period_of(times[base_commit])
    members = [(t, sha) for t, sha in dated if period_of(t) == period]
    return Reference(repo, min(members)[1], tuple(sorted(sha for _, sha in members)))


def tree_objects(git_dir: Path, commit: str) -> set[str]:
    """The blobs and trees of `commit`'s tree (not the commit itself)."""
    listing = _git(git_dir, "rev-list", "--objects", "--no-walk", commit)
    return {line[:40] for line in listing.splitlines() if line[:40] != commit}


def shared_objects(sources: RepoSources, reference: Reference) -> list[str]:
    """The objects in the tree of every member of the period, sorted."""
    git_dir = archive_dir(sources, reference.repo)
    common = tree_objects(git_dir, reference.members[0])
    for member in reference.members[1:]:
        common &= tree_objects(git_dir, member)
    return sorted(common)


def _pack(git_dir: Path, objects: list[str], dest: Path) -> None:
    """One pack (and index) of `objects` from `git_dir` under `dest`, read-only as git keeps its packs."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(git_dir, "pack-objects", "-q", str(dest / "pack"), stdin="\n".join(objects) + "\n")
    for path in dest.glob("pack-*"):
        path.chmod(0o444)


def write_reference_tree(sources: RepoSources, reference: Reference, dest: Path) -> Path:
    """`dest`: the reference commit's work tree, and a fresh `.git` (no commit, no sample hook) holding one pack of
    the period's shared objects."""
    sources.export(reference.repo, reference.commit, dest)
    shutil.rmtree(dest / ".git")
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    for sample in (dest / ".git" / "hooks").glob("*.sample"):
        sample.unlink()
    objects = shared_objects(sources, reference)
    if objects:
        _pack(archive_dir(sources, reference.repo), objects, dest / ".git" / "objects" / "pack")
    return dest


def write_commit_delta(sources: RepoSources, reference: Reference, commit: str, dest: Path) -> Path:
    """What the instance step adds to the reference's `.git` to hold `commit`: a pack of the commit and of the
    objects of its tree the reference lacks, and the `shallow` and `FETCH_HEAD` files a depth-1 fetch of it writes
    (taken from a real fetch into a scratch repository, so they are byte for byte what the export wrote before).

    Adding objects by fetching inside the step would rewrite the reference's pack: git touches the pack of every
    object it receives again, and overlay then copies the whole pack into the instance layer."""
    git_dir = archive_dir(sources, reference.repo)
    scratch = dest / "scratch.git"
    subprocess.run(["git", "init", "-q", "--bare", str(scratch)], check=True)
    _git(scratch, "-c", "protocol.file.allow=always", "fetch", "-q", "--depth", "1", "--upload-pack", UPLOAD_PACK,
         f"file://{sources.git_dir(reference.repo).resolve()}", commit)
    for name in ("shallow", "FETCH_HEAD"):
        shutil.copy(scratch / name, dest / name)
    shutil.rmtree(scratch)
    shared = set(shared_objects(sources, reference))
    _pack(git_dir, [commit, *sorted(tree_objects(git_dir, commit) - shared)], dest)
    return dest
