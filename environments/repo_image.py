"""A small "repo image": a real repository at a commit in /testbed, editable-installed into /opt/venv.

Used by `pinpoint bench env` and the real-container tests; built offline (no network) on a pinpoint base image,
cached by a tag that names the repository, the commit, the Python version and the recipe.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
from pathlib import Path

from environments.images import cache_dir, commit_build_step, ensure_base_image, file_lock, image_exists
from environments.local import clone_checkout

#: the read-only shared data (../shared/data beside the project; override with PINPOINT_SHARED_DATA, as everywhere)
SHARED_DATA = Path(os.environ.get("PINPOINT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
REPO_WORKDIR = "/testbed"
VENV = "/opt/venv"
#: editable install without downloads: the base image's venv brings setuptools, dependencies are not installed
EDITABLE_INSTALL = f"""git config --system --add safe.directory '*'
cd {REPO_WORKDIR}
python3 -m venv {VENV}
{VENV}/bin/pip install --quiet --no-deps --no-build-isolation --no-index -e .
"""


def extract_shared_repo(name: str, dest: str | os.PathLike | None = None) -> Path:
    """Path of the bare repository ../shared/data/repos/<name>.git.tar, extracted into `dest` (default: cache)."""
    tar_path = SHARED_DATA / "repos" / f"{name}.git.tar"
    if not tar_path.is_file():
        raise FileNotFoundError(
            f"{tar_path} is missing: the shared data must sit at {SHARED_DATA} (or set PINPOINT_SHARED_DATA)")
    target = Path(dest) if dest is not None else cache_dir() / "repos"
    repo = target / f"{name}.git"
    with file_lock(f"extract-{target}-{name}"):
        if not (repo / "HEAD").exists():
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(tar_path) as tar:
                tar.extractall(target, filter="tar")
    return repo


def repo_image_tag(source: str | os.PathLike, commit: str, python_version: str, script: str) -> str:
    name = Path(str(source).rstrip("/")).name.removesuffix(".git").lower()
    recipe = hashlib.sha256(script.encode()).hexdigest()[:8]
    return f"pinpoint/repo:{name}-{commit[:12]}-py{python_version}-{recipe}"


def build_repo_image(
    source: str | os.PathLike,
    commit: str,
    *,
    python_version: str = "3.11",
    script: str = EDITABLE_INSTALL,
    log=print,
) -> str:
    """Tag of an image with `source` checked out at `commit` in /testbed and `script` run there; cached."""
    tag = repo_image_tag(source, commit, python_version, script)
    if image_exists(tag):
        return tag
    base = ensure_base_image(python_version, log=log)
    with file_lock(tag):
        if image_exists(tag):
            return tag
        log(f"pinpoint: building {tag}")
        with tempfile.TemporaryDirectory(prefix="pinpoint-repo-") as tmp:
            checkout = os.path.join(tmp, "repo")
            sha = clone_checkout(source, checkout, commit)
            commit_build_step(
                base, script, tag, network=False, copy_in={checkout: REPO_WORKDIR},
                labels={"pinpoint.repo": Path(str(source)).name, "pinpoint.commit": sha,
                        "pinpoint.python": python_version},
                changes=[f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         f"WORKDIR {REPO_WORKDIR}"],
            )
    return tag
