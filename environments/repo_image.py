"""A small "repo image": a real repository at a commit in /testbed, editable-installed into /opt/venv.

Used by `pinpoint bench env` and the real-container tests (built offline), and by `pinpoint fix` with its own
recipe; built on a pinpoint base image, cached by a tag that names the repository, the commit, the Python version
and the recipe.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.environments.errors import UsageError
from pinpoint.environments.files import scratch_dir
from pinpoint.environments.images import commit_build_step, ensure_base_image, file_lock, image_exists
from pinpoint.environments.local import clone_checkout
from pinpoint.environments.project_deps import TestDeps

REPO_WORKDIR = "/testbed"
VENV = "/opt/venv"
#: editable install without downloads: the base image's venv brings setuptools, dependencies are not installed
EDITABLE_INSTALL = f"""git config --system --add safe.directory '*'
cd {REPO_WORKDIR}
python3 -m venv {VENV}
{VENV}/bin/pip install --quiet --no-deps --no-build-isolation --no-index -e .
"""


#: a C compiler and the Python headers, for a project that compiles an extension at install (a box built with
#: network; the base images bring neither, and setuptools then quietly installs the pure-Python fallback)
C_TOOLCHAIN = """if ! command -v cc >/dev/null; then
  PKGS="gcc libc6-dev"
  [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || PKGS="$PKGS python3-dev"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PKGS \\
    && rm -rf /var/lib/apt/lists/*; } >/dev/null || echo "pinpoint: no C compiler installed (offline?)"
fi
"""


def install_script(deps: TestDeps, workdir: str = REPO_WORKDIR, venv: str = VENV, python: str = "python3") -> str:
    """The one recipe that installs a team's repository as its own files say: a venv, every requirement file, the
    project editable with its test extras, its test groups, and pytest. Each step may fail (offline, a private
    index) without stopping the next; the editable install falls back to no extras, then to no downloads. A
    container image runs it at `/testbed`; with `--local` the user's own environment runs the tests, and a
    missing test dependency is answered with `pip_command` of the same dependencies."""
    pip = f"{shlex.quote(venv)}/bin/pip --disable-pip-version-check"
    lines = [f"cd {shlex.quote(workdir)}", f"{python} -m venv {shlex.quote(venv)}", f'PIP="{pip}"']
    for name in deps.files:
        quoted = shlex.quote(name)
        lines.append(f'$PIP install -r {quoted} || echo "pinpoint: could not install {name} (offline?)"')
    target = shlex.quote(f".[{','.join(deps.extras)}]") if deps.extras else "."
    lines += ["if [ -f pyproject.toml ] || [ -f setup.py ]; then",
              f"  $PIP install -e {target} || {{ echo 'pinpoint: could not install {target}; trying without extras'; "
              "$PIP install -e .; } || $PIP install --no-deps --no-build-isolation --no-index -e . || "
              'echo "pinpoint: no install"', "fi"]
    if deps.requirements:
        words = " ".join(shlex.quote(r) for r in deps.requirements)
        lines.append(f"$PIP install {words} || for r in {words}; do $PIP install \"$r\" || "
                     'echo "pinpoint: could not install $r"; done')
    lines.append('$PIP install pytest || echo "pinpoint: pytest not installed (offline?)"')
    return "\n".join(lines) + "\n"


def pip_command(deps: TestDeps, python: str = "python") -> str:
    """The one pip command that installs the project editable with its test dependencies (what `install_script`
    does, for a user's own environment)."""
    target = shlex.quote(f".[{','.join(deps.extras)}]") if deps.extras else "."
    words = "".join(f" {shlex.quote(r)}" for r in deps.requirements)
    files = "".join(f" -r {shlex.quote(f)}" for f in deps.files)
    return f"{python} -m pip install -e {target}{words}{files} pytest"


def extract_git_tar(archive: Path, target: Path) -> Path:
    """The bare repository in `archive` (a tar of one `<name>.git` folder), extracted once to `target`.

    Extraction goes to a temporary folder beside `target` and is renamed into place, under a lock, so concurrent
    callers and a killed extraction never leave a half-written repository."""
    if not archive.is_file():
        raise UsageError(f"{archive} is missing: the shared data must sit at {paths.shared_data()} "
                                "(or set PINPOINT_SHARED_DATA / PINPOINT_REPOS_DIR)")
    with file_lock(f"extract-{target}"):
        if not (target / "HEAD").exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
            try:
                with tarfile.open(archive) as tar:
                    tar.extractall(tmp, filter="data")
                inner = [p for p in tmp.iterdir() if (p / "HEAD").exists()]
                if len(inner) != 1:
                    raise ValueError(f"{archive} does not hold exactly one git directory")
                inner[0].rename(target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def extract_shared_repo(name: str, dest: str | os.PathLike | None = None) -> Path:
    """The offline repository `<repos_dir>/<name>.git.tar`, extracted into `dest` (default: the cache)."""
    target = Path(dest) if dest is not None else paths.cache_dir() / "repos"
    return extract_git_tar(paths.repos_dir() / f"{name}.git.tar", target / f"{name}.git")


def repo_name(source: str | os.PathLike) -> str:
    """The repository's name as a person knows it: the folder's own name (`.` resolved first) or the URL's last
    part, without `.git`."""
    text = str(source).rstrip("/")
    path = Path(text)
    if "://" not in text and not text.startswith("git@") and path.exists():
        path = path.resolve()
    return path.name.removesuffix(".git") or "repo"


def repo_image_tag(source: str | os.PathLike, commit: str, python_version: str, script: str) -> str:
    """`pinpoint/repo:<name>-<commit>-py<version>-<recipe>`, the name cut to what a Docker tag allows."""
    name = re.sub(r"[^a-z0-9_.-]+", "-", repo_name(source).lower()).strip(".-")[:60] or "repo"
    recipe = hashlib.sha256(script.encode()).hexdigest()[:8]
    return f"pinpoint/repo:{name}-{commit[:12]}-py{python_version}-{recipe}"


def build_repo_image(
    source: str | os.PathLike,
    commit: str,
    *,
    python_version: str = "3.11",
    script: str = EDITABLE_INSTALL,
    network: bool = False,
    name: str | None = None,
    log=print,
) -> str:
    """Tag of an image with `source` checked out at `commit` in /testbed and `script` run there; cached.

    `network` lets the script download (`pinpoint fix` installs a repository's own requirements); it is part of
    the recipe, so an offline build and an online one never share a tag. `name` names the image when `source` is
    a temporary copy."""
    tag = repo_image_tag(name or source, commit, python_version, script + ("\n# network" if network else ""))
    if image_exists(tag):
        return tag
    base = ensure_base_image(python_version, log=log)
    with file_lock(tag):
        if image_exists(tag):
            return tag
        log(f"pinpoint: building {tag}")
        with scratch_dir("pinpoint-repo-") as tmp:  # named by pid: a killed build's clone goes at the next build
            checkout = os.path.join(tmp, "repo")
            sha = clone_checkout(source, checkout, commit)
            commit_build_step(
                base, script, tag, network=network, copy_in={checkout: REPO_WORKDIR},
                labels={"pinpoint.repo": repo_name(name or source), "pinpoint.commit": sha,
                        "pinpoint.python": python_version},
                changes=[f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         f"WORKDIR {REPO_WORKDIR}"],
            )
    return tag
