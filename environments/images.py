"""Image builder: Python base images by version, and committed build steps on top of them.

Base images come from `python:X.Y-slim` (plus git) when a registry answers, else from Debian via debootstrap and
`docker import` (no registry needed); a base image built here is saved as a tarball (`image_cache`) and loaded from
it on the next machine instead of rebuilt. Everything is cached by tag: building twice does nothing, and concurrent
builders of one tag wait on a file lock instead of building it twice.

Build steps that fetch packages get the host CA bundle (`/etc/ssl/certs/ca-certificates.crt`, or
`$PINPOINT_CA_BUNDLE`) copied in for the step only, with PIP_CERT, SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
GIT_SSL_CAINFO pointing at it, so downloads work behind TLS-intercepting proxies; the bundle and those variables
are not left in the committed image.

With a registry (`--registry HOST/PREFIX` or `$PINPOINT_REGISTRY`) every layer is pulled from
`HOST/PREFIX/<tag>` before it would be built, and pushed there once this process has it: the content-addressed
tags stay the same, prefixed by the registry, so every node of a cluster pulls what one node built. A registry that
does not answer is said once and the build goes on locally.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import docker
import requests
from pinpoint.environments import engine, image_cache, paths
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.files import process_tempdir
from pinpoint.environments.labels import MANAGED_LABEL, RUN_LABEL, container_labels
from pinpoint.environments.registry import registry

BASE_REPOSITORY = "pinpoint/base"
#: Debian suite that ships each Python version as python3 (extend with a verified suite per line)
DEBIAN_SUITES: dict[str, str] = {"3.9": "bullseye", "3.11": "bookworm"}
DEBOOTSTRAP_PACKAGES = "python3,python3-venv,python3-pip,git,patch,ca-certificates"
#: what a base image from python:X.Y-slim gets on top (apt names)
SLIM_PACKAGES = "git patch ca-certificates"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CA_IN_CONTAINER = "/tmp/pinpoint-ca.crt"
_STEP_SCRIPT = "/tmp/pinpoint-step.sh"
_PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


class UnsupportedPythonVersion(PinpointError, ValueError):
    """No base image can be made for this Python version here (no registry, no Debian suite ships it)."""


class BuildError(PinpointError, RuntimeError):
    """A build step failed; `log_tail` holds the end of its output."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(f"{message}\n--- last lines of the build log ---\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock named `name` across processes (released when the block ends or the process dies)."""
    locks = paths.cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def split_tag(tag: str) -> tuple[str, str]:
    """("repo/name", "tag") of an image reference; the tag defaults to "latest"."""
    repository, sep, version = tag.rpartition(":")
    return (repository, version) if sep and "/" not in version else (tag, "latest")


def image_exists(tag: str) -> bool:
    try:
        engine.client().images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_tag(python_version: str) -> str:
    """`pinpoint/base:py3.11-<hash of the package lists>`: a machine whose base predates a change of the lists
    (a package added) builds a new one, and every layer above it follows, as their tags name this one."""
    packages = hashlib.sha256(f"{DEBOOTSTRAP_PACKAGES}\n{SLIM_PACKAGES}".encode()).hexdigest()[:8]
    return f"{BASE_REPOSITORY}:py{python_version}-{packages}"


def nearest_suite_version(python_version: str) -> str:
    """The Debian-table version closest to `python_version` (ties go to the older one, which old code prefers)."""
    def key(v: str) -> tuple[int, int]:
        return abs(_minor(v) - _minor(python_version)), _minor(v)
    return min(DEBIAN_SUITES, key=key)


def _minor(version: str) -> int:
    match = re.fullmatch(r"3\.(\d+)", version)
    if not match:
        raise UnsupportedPythonVersion(f"python version {version!r} is not of the form 3.X")
    return int(match.group(1))


def ensure_base_image(python_version: str, *, allow_nearest: bool = False, log=print) -> str:
    """Tag of a base image with Python `python_version`, git, pip and venv; built once, then cached (and shared
    through the registry, when one is named).

    Without a registry only the versions in DEBIAN_SUITES exist. Another version raises UnsupportedPythonVersion
    unless `allow_nearest`, which returns the nearest available image instead: its tag and its `pinpoint.python`
    label say which Python it really has.
    """
    _minor(python_version)
    tag = base_tag(python_version)
    if image_exists(tag) and not _push_due(tag):
        return tag
    with file_lock(tag):
        made = _base_present(tag, log) or _build_base(python_version, tag, log)
        if made:
            push_to_registry(tag, log)
    return tag if made else _nearest_base(python_version, allow_nearest, log)


def _base_present(tag: str, log) -> bool:
    """Here already (another builder was first), or loaded from its tarball, or pulled from the registry."""
    return (image_exists(tag) or (image_cache.load_cached(tag, log) and image_exists(tag))
            or pull_from_registry(tag, log))


def _build_base(python_version: str, tag: str, log) -> bool:
    """From python:X.Y-slim when a registry answers, else debootstrap (saved as a tarball); False when neither
    can make this version."""
    if not (_pull_slim(python_version, tag, log) or python_version in DEBIAN_SUITES):
        return False
    if not image_exists(tag):
        _debootstrap_image(python_version, tag, log)
    _save_to_cache(tag, log)
    return True


def _nearest_base(python_version: str, allow_nearest: bool, log) -> str:
    if not allow_nearest:
        raise UnsupportedPythonVersion(
            f"no base image for Python {python_version}: no registry answers and no Debian suite in "
            f"{sorted(DEBIAN_SUITES)} ships it. Pass allow_nearest=True to use the nearest version "
            f"({nearest_suite_version(python_version)}) knowingly, or make a registry reachable.")
    nearest = nearest_suite_version(python_version)
    log(f"pinpoint: Python {python_version} is unavailable here; using the nearest, {nearest} ({base_tag(nearest)})")
    return ensure_base_image(nearest, log=log)


def ensure_image(tag: str, build: Callable[[], None], log=print) -> Literal["cached", "pulled", "built"]:
    """`tag` on this engine: there already, else pulled from the registry, else made by `build()` (one builder
    per tag across processes); then pushed to the registry. How it came to be here."""
    how: Literal["cached", "pulled", "built"] = "cached"
    with file_lock(tag):  # the push too: two pushers of one tag would remove each other's registry name
        if not image_exists(tag):
            how = "pulled" if pull_from_registry(tag, log) else "built"
            if how == "built":
                build()
        push_to_registry(tag, log)
    return how


#: what a registry that does not answer looks like: the engine's error, or the engine's stream stalling past the
#: client's timeout
_REGISTRY_ERRORS = (docker.errors.APIError, requests.exceptions.RequestException)
#: registries that did not answer in this process (said once, not tried again), and references known to be there
_DEAD_REGISTRIES: set[str] = set()
_IN_REGISTRY: set[str] = set()


def pull_from_registry(tag: str, log=print) -> bool:
    """Pull `tag` from the registry as `tag`: True when it came; False without a registry, when it lacks the
    image, or when it does not answer (one line, once per registry)."""
    reg = registry()
    if reg is None or reg in _DEAD_REGISTRIES:
        return False
    ref = f"{reg}/{tag}"
    client = engine.client()
    try:
        image = client.images.pull(*split_tag(ref))
    except docker.errors.NotFound:
        return False
    except _REGISTRY_ERRORS as exc:
        _registry_failed(reg, exc, log)
        return False
    image.tag(*split_tag(tag))
    client.images.remove(ref)  # the plain tag stays: the only name the rest of pinpoint knows
    _IN_REGISTRY.add(ref)
    log(f"pinpoint: pulled {tag} from {reg}")
    return True


def push_to_registry(tag: str, log=print) -> bool:
    """Push `tag` to the registry as `HOST/PREFIX/<tag>` (once per process); False without a registry or when
    the push fails (one line, once per registry: the image stays here)."""
    if not _push_due(tag):
        return registry() is not None and registry() not in _DEAD_REGISTRIES
    reg = registry()
    ref = f"{reg}/{tag}"
    client = engine.client()
    repository, version = split_tag(ref)
    client.images.get(tag).tag(repository, version)
    try:
        errors = [line["error"] for line in client.images.push(repository, tag=version, stream=True, decode=True)
                  if "error" in line]
    except _REGISTRY_ERRORS as exc:
        errors = [str(exc)]
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(ref)
    if errors:
        _registry_failed(reg, errors[0], log)
        return False
    _IN_REGISTRY.add(ref)
    log(f"pinpoint: pushed {tag} to {reg}")
    return True


def _push_due(tag: str) -> bool:
    """A registry is named, answers (as far as this process knows), and has not had `tag` from it yet."""
    reg = registry()
    return reg is not None and reg not in _DEAD_REGISTRIES and f"{reg}/{tag}" not in _IN_REGISTRY


def _registry_failed(reg: str, error: object, log) -> None:
    """A registry that does not answer (or refuses) is said once; builds go on locally without it."""
    if reg not in _DEAD_REGISTRIES:
        _DEAD_REGISTRIES.add(reg)
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        log(f"pinpoint: registry {reg} does not answer ({first}); building and keeping images locally")


#: registry images this process could not pull (no registry here): not tried again
_UNPULLABLE: set[str] = set()


def _pull_slim(python_version: str, tag: str, log) -> bool:
    """Base image from python:X.Y-slim when a registry answers (git added); False when it does not."""
    source = f"python:{python_version}-slim"
    if os.environ.get("PINPOINT_NO_PULL") or source in _UNPULLABLE:
        return False
    try:
        engine.client().images.pull(source)
    except docker.errors.APIError as exc:
        _UNPULLABLE.add(source)  # asked again for every instance of a batch otherwise, with the same answer
        log(f"pinpoint: cannot pull {source} ({str(exc).splitlines()[0][:200]}); building from Debian instead")
        return False
    commit_build_step(
        source,
        f"apt-get update && apt-get install -y --no-install-recommends {SLIM_PACKAGES} && rm -rf /var/lib/apt/lists/*",
        tag,
        labels={"pinpoint.python": python_version, "pinpoint.base.source": source},
    )
    return True


def _save_to_cache(tag: str, log) -> None:
    """Keep a fresh base image as a tarball (`image_cache`), so the next machine loads it instead of building it;
    a failure to save is said, never fatal (`PINPOINT_NO_IMAGE_CACHE=1` skips it)."""
    if os.environ.get("PINPOINT_NO_IMAGE_CACHE"):
        return
    try:
        path = image_cache.save_image(tag)
    except (OSError, docker.errors.APIError) as exc:
        log(f"pinpoint: built {tag} but could not save it to {image_cache.tarball_path(tag)}: {exc}")
        return
    log(f"pinpoint: saved {tag} to {path} ({path.stat().st_size / 1e6:.0f} MB); `pinpoint env up` or the next build "
        "on a machine sharing $PINPOINT_CACHE loads it")


def apt_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this host uses (deb822 .sources or one-line .list), for debootstrap."""
    if os.environ.get("PINPOINT_DEBIAN_MIRROR"):
        return os.environ["PINPOINT_DEBIAN_MIRROR"]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for block in path.read_text(errors="replace").split("\n\n"):
            fields = dict(re.findall(r"^(URIs|Suites):\s*(.+)$", block, flags=re.M))
            if "URIs" in fields and "security" not in fields.get("Suites", ""):
                return fields["URIs"].split()[0]
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                match = re.match(r"deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                if match and "security" not in match.group(2):
                    return match.group(1)
    return DEFAULT_MIRROR


def _has_debootstrap() -> str | None:
    return shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)


def _debootstrap_path(log) -> str:
    found = _has_debootstrap()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise BuildError("no registry answers and debootstrap is missing; install debootstrap (as root) or make a "
                         "registry reachable so python:X-slim can be pulled")
    log("pinpoint: installing debootstrap")
    _check_call(["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"], "installing debootstrap")
    return "/usr/sbin/debootstrap"


def _check_call(cmd: list[str], what: str, timeout: float = 1800) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}", (proc.stdout + proc.stderr)[-4000:])


def _unmount_below(path: Path) -> None:
    """Unmount anything debootstrap left mounted inside the rootfs, so deleting it cannot reach the host."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(path) + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)


def _debootstrap_image(python_version: str, tag: str, log) -> None:
    if os.geteuid() != 0:
        raise BuildError("building a base image without a registry needs root (debootstrap); run as root or make "
                         "a registry reachable")
    suite = DEBIAN_SUITES[python_version]
    mirror = apt_mirror()
    log(f"pinpoint: first-time setup: building the base image {tag} from Debian {suite} ({mirror}) with "
        f"debootstrap{'' if _has_debootstrap() else ', after apt-installing debootstrap'}: usually 1-3 minutes on "
        f"2 cores (168 s measured on a bare engine), once per machine; it is then saved as a tarball under "
        f"{image_cache.tarball_dir()} so another machine sharing it loads it in seconds")
    tmp = process_tempdir("pinpoint-rootfs-", os.environ.get("PINPOINT_BUILD_TMP"))
    rootfs = tmp / "rootfs"
    try:
        _check_call([_debootstrap_path(log), "--variant=minbase", f"--include={DEBOOTSTRAP_PACKAGES}", suite,
                     str(rootfs), mirror], f"debootstrap {suite}")
        real = os.readlink(rootfs / "usr/bin/python3").removeprefix("python")
        if real != python_version:
            raise BuildError(f"Debian {suite} ships Python {real}, not {python_version}: fix DEBIAN_SUITES")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        archive = tmp / "rootfs.tar"
        _check_call(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."], "packing the rootfs")
        repository, version_tag = split_tag(tag)
        engine.client().api.import_image_from_file(str(archive), repository=repository, tag=version_tag, changes=[
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            'CMD ["bash"]',
            f'LABEL pinpoint.python="{real}" pinpoint.base.source="debootstrap:{suite}"',
        ])
    finally:
        _unmount_below(rootfs)
        shutil.rmtree(tmp, ignore_errors=True)
    if not image_exists(tag):
        raise BuildError(f"docker import did not produce {tag}")


def ca_bundle() -> Path | None:
    """The host CA bundle build steps trust ($PINPOINT_CA_BUNDLE, else the Debian bundle), if present."""
    path = Path(os.environ.get("PINPOINT_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
    return path if path.is_file() else None


def _tar_of(entries: dict[str, Path | bytes]) -> bytes:
    """A tar placing host paths (files or folders) or bytes at absolute container paths, for put_archive at /."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for target, source in entries.items():
            name = target.lstrip("/")
            if isinstance(source, bytes):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(source), 0o644
                tar.addfile(info, io.BytesIO(source))
            else:
                tar.add(str(source), arcname=name)
    return data.getvalue()


def commit_build_step(
    base_image: str,
    script: str,
    tag: str,
    *,
    network: bool = True,
    copy_in: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    changes: list[str] | None = None,
    timeout: float = 1800,
) -> str:
    """Run `script` (bash -e -o pipefail) in a container of `base_image` and commit the result as `tag`.

    `copy_in` maps host paths to container paths, copied before the script runs. `env` and the CA variables hold
    during the step only; `changes` are Dockerfile instructions (ENV, WORKDIR, ...) applied to the committed image.
    The container is removed afterwards; a failure or timeout raises BuildError with the log tail.
    """
    client = engine.client()
    step_env = dict(env or {})
    if network:
        step_env.update({k: os.environ[k] for k in _PROXY_VARS if k in os.environ and k not in step_env})
    files: dict[str, Path | bytes] = {host_target: Path(host) for host, host_target in (copy_in or {}).items()}
    bundle = ca_bundle()
    if bundle is not None:
        files[CA_IN_CONTAINER] = bundle.read_bytes()
        for var in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"):
            step_env.setdefault(var, CA_IN_CONTAINER)
    files[_STEP_SCRIPT] = script.encode()
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in step_env.items())
    command = (f"{exports}bash -e -o pipefail {_STEP_SCRIPT}; rc=$?\n"
               f"rm -f {_STEP_SCRIPT} {CA_IN_CONTAINER}\nexit $rc\n")
    config = client.images.get(base_image).attrs.get("Config") or {}
    keep = [f"CMD {json.dumps(config.get('Cmd') or ['bash'])}"]
    entry = {}
    if config.get("Entrypoint"):
        entry["entrypoint"] = ["bash", "-c"]
        keep.append(f"ENTRYPOINT {json.dumps(config['Entrypoint'])}")
        argv: list[str] = [command]
    else:
        argv = ["bash", "-c", command]
    container = client.containers.create(
        base_image, argv, network_mode="host" if network else "none",
        labels=container_labels(**{"pinpoint.build": tag}), **entry)
    try:
        if not container.put_archive("/", _tar_of(files)):
            raise BuildError(f"copying files into the build container for {tag} failed")
        container.start()
        try:
            status = container.wait(timeout=timeout)
        except Exception as exc:  # requests raises ReadTimeout/ConnectionError when the wait times out
            container.kill()
            raise BuildError(f"build step for {tag} timed out after {timeout:g}s ({type(exc).__name__})",
                             _logs(container)) from exc
        if status.get("StatusCode") != 0:
            raise BuildError(f"build step for {tag} failed with exit {status.get('StatusCode')}", _logs(container))
        # the build container's labels would be inherited by the image (docker merges them): neutralise them so
        # containers later started from the image are not mistaken for this build's leftovers by `env prune`
        image_labels = {MANAGED_LABEL: "image", RUN_LABEL: "", **(labels or {})}
        label_change = " ".join(f"{k}={json.dumps(str(v))}" for k, v in image_labels.items())
        repository, version_tag = split_tag(tag)
        container.commit(repository=repository, tag=version_tag,
                         changes=[*keep, f"LABEL {label_change}", *(changes or [])])
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
    return tag


def _logs(container) -> str:
    try:
        return container.logs(tail=80).decode("utf-8", errors="replace")
    except docker.errors.APIError as exc:
        return f"(logs unavailable: {exc})"
