"""Shared fixtures: real repositories from ../shared/data and real images built by the (caching) builders."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the read-only shared material (../shared from the project root; override with PINPOINT_SHARED)
SHARED = Path(os.environ.get("PINPOINT_SHARED", ROOT.parent / "shared"))
REPOS = SHARED / "data" / "repos"
#: psf/requests v2.27.0, the base commit of a SWE-bench Verified dev row
REQUESTS_COMMIT = "0192aac24123735b3eaf9b08df46429bb770c283"


def extract_repo(name: str, dest: Path) -> Path:
    """Extract ../shared/data/repos/<name>.git.tar into `dest`; return the bare repository's path."""
    tar_path = REPOS / f"{name}.git.tar"
    if not tar_path.is_file():
        raise FileNotFoundError(f"{tar_path} is missing: the shared data must sit at {SHARED} (or PINPOINT_SHARED)")
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="tar")
    return dest / f"{name}.git"


@pytest.fixture(scope="session")
def requests_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of a bare psf/requests repository (HEAD names no commit: pass `requests_commit`)."""
    return extract_repo("psf__requests", tmp_path_factory.mktemp("repos"))


@pytest.fixture(scope="session")
def requests_commit() -> str:
    return REQUESTS_COMMIT


@pytest.fixture
def local_requests(requests_repo: Path, requests_commit: str):
    """A LocalRuntime on psf/requests at `requests_commit`, closed after the test."""
    from environments.local import LocalRuntime

    with LocalRuntime(requests_repo, requests_commit) as runtime:
        yield runtime


@pytest.fixture(scope="session")
def docker_client():
    """A client for a Docker engine that answers (installing/starting one where `pinpoint env up` can)."""
    from environments.engine import ensure_engine

    return ensure_engine()


@pytest.fixture(scope="session")
def base_image_311(docker_client) -> str:
    """Tag of the real Python 3.11 base image (built once, then cached by the builder)."""
    from environments.images import ensure_base_image

    return ensure_base_image("3.11")


@pytest.fixture(scope="session")
def requests_image(docker_client, requests_repo: Path, requests_commit: str) -> str:
    """Tag of an image with psf/requests at `requests_commit` in /testbed, editable-installed in /opt/venv."""
    from environments.repo_image import build_repo_image

    return build_repo_image(requests_repo, requests_commit, python_version="3.11")
