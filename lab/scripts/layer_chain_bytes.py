"""What a delta chain of instance layers would store, estimated from the offline archives without building.

A chain orders a repository's rows by their base commit's committer time and builds each row's checkout layer on
the previous row's, so a layer holds only the files that changed between consecutive base commits (whole files:
overlay copies a changed file whole), and its `.git` only the objects its tree has and the previous tree lacks
(loose, zlib level 6 as git writes them). Used to decide whether chaining beats the per-quarter reference
layer (docs/harness.md, "Bytes per instance, per repository"); the install part of a row's layer is not counted here
(measure it on built images with `swebench_eval.images.top_layer_files`).

The floor: what any overlay layering of the same trees must store at least (see `floor`).

    python lab/scripts/layer_chain_bytes.py --repo sympy/sympy [--ids ID ...] [--verbose]
"""

from __future__ import annotations

import argparse
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.reference import archive_dir
from pinpoint.swebench_eval.sources import RepoSources


@dataclass(frozen=True)
class Link:
    """One row's layer in the chain: the bytes of its changed files and of its new git objects."""

    commit: str
    files: int
    objects: int


def _git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], input=stdin, capture_output=True,
                          check=True).stdout


def _blobs(git_dir: Path, commit: str) -> dict[str, tuple[str, int]]:
    """(sha, bytes) of every file of `commit`, by path."""
    out = {}
    for line in _git(git_dir, "ls-tree", "-r", "-l", "-z", commit).split(b"\0"):
        if line:
            meta, path = line.split(b"\t", 1)
            _mode, kind, sha, size = meta.split()
            if kind == b"blob":
                out[path.decode()] = (sha.decode(), int(size) if size != b"-" else 0)
    return out


def _objects(git_dir: Path, commit: str) -> set[str]:
    listing = _git(git_dir, "rev-list", "--objects", "--no-walk", commit).decode()
    return {line[:40] for line in listing.splitlines() if line[:40] != commit}


def _loose_bytes(git_dir: Path, shas: list[str]) -> int:
    """Bytes of `shas` as loose objects (header + content, zlib level 6)."""
    raw = _git(git_dir, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in shas).encode())
    total, at = 0, 0
    while at < len(raw):
        end = raw.index(b"\n", at)
        _sha, kind, size = raw[at:end].split()
        body = raw[end + 1:end + 1 + int(size)]
        total += len(zlib.compress(kind + b" " + size + b"\0" + body, 6))
        at = end + 1 + int(size) + 1
    return total


def chain(git_dir: Path, commits: list[str]) -> list[Link]:
    """The links of `commits` in committer-time order; the first holds its whole tree."""
    times = dict(line.split()[::-1] for line in _git(git_dir, "log", "--all", "--format=%ct %H").decode().splitlines())
    links, before, before_objects = [], {}, set()
    for commit in sorted(dict.fromkeys(commits), key=lambda c: int(times[c])):
        blobs, objects = _blobs(git_dir, commit), _objects(git_dir, commit)
        files = sum(size for path, (sha, size) in blobs.items() if before.get(path, ("",))[0] != sha)
        links.append(Link(commit, files, _loose_bytes(git_dir, sorted(objects - before_objects))))
        before, before_objects = blobs, objects
    return links


def floor(git_dir: Path, commits: list[str]) -> Link:
    """What any overlay layering of these trees stores at least: every distinct (path, content) once (a box reads
    each file of its tree from some layer, stored whole), and every distinct object once as a loose object."""
    versions: dict[tuple[str, str], int] = {}
    objects: set[str] = set()
    for commit in dict.fromkeys(commits):
        versions.update({(path, sha): size for path, (sha, size) in _blobs(git_dir, commit).items()})
        objects |= _objects(git_dir, commit)
    return Link("", sum(versions.values()), _loose_bytes(git_dir, sorted(objects)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="owner/name, e.g. sympy/sympy")
    parser.add_argument("--ids", nargs="*", help="only these rows (default: every row of the repository)")
    parser.add_argument("--dataset", help="JSONL rows (default: the dev rows)")
    parser.add_argument("--verbose", action="store_true", help="print every link")
    args = parser.parse_args()
    rows = load_instances(args.dataset, ids=args.ids, repos=[args.repo])
    git_dir, commits = archive_dir(RepoSources(), args.repo), [row.base_commit for row in rows]
    links, least = chain(git_dir, commits), floor(git_dir, commits)
    if args.verbose:
        for link in links:
            print(f"{link.commit[:8]} files {link.files / 1e6:6.2f} MB  objects {link.objects / 1e6:6.2f} MB")
    first, rest = links[0], links[1:]
    total = sum(link.files + link.objects for link in links)
    after = sum(link.files + link.objects for link in rest) / max(len(rest), 1)
    print(f"{args.repo}: {len(links)} base commits; first layer {(first.files + first.objects) / 1e6:.2f} MB; "
          f"mean link after it {after / 1e6:.2f} MB; chain per row {total / len(links) / 1e6:.2f} MB "
          f"(files {sum(link.files for link in links) / len(links) / 1e6:.2f}, "
          f"objects {sum(link.objects for link in links) / len(links) / 1e6:.2f}); floor per row: distinct file "
          f"versions {least.files / len(links) / 1e6:.2f}, distinct objects {least.objects / len(links) / 1e6:.2f}")


if __name__ == "__main__":
    main()
