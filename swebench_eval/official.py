"""The official SWE-bench instance images as a source: `<namespace>/sweb.eval.x86_64.<id>:latest`.

SWE-agent, mini-swe-agent and OpenHands run in these images; a user with a registry (Docker Hub's `swebench`, or a
mirror of it) gets every Verified row without building. `$PINPOINT_OFFICIAL_IMAGES` names the namespace
(`swebench`, or `HOST[:PORT]/PREFIX` for a mirror); unset, pinpoint builds its own images. An official image that is
neither here nor pullable is said once and pinpoint's builder makes the row's image instead.

Their layout differs from pinpoint's: the repository is at /testbed as here, but its Python is the conda env
`testbed` under /opt/miniconda3, active only after `source /opt/miniconda3/bin/activate testbed` (the image's PATH
has conda's base Python). `box_env` reads once per image what that activation sets, and every box of the image
(the agent's, the grader's, a pooled one) starts with it, so the command server, the agent's commands, the tracer
and the eval script all run on the env's Python, whatever version it is.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tarfile
from dataclasses import dataclass

import docker
import requests
from pinpoint.environments import engine
from pinpoint.environments.errors import UsageError
from pinpoint.environments.images import image_exists
from pinpoint.environments.labels import container_labels
from pinpoint.environments.runtime import RuntimeFailure
from pinpoint.swebench_eval.datasets import Instance

OFFICIAL_ENV = "PINPOINT_OFFICIAL_IMAGES"
CONDA_ROOT = "/opt/miniconda3"
CONDA_ENV = "testbed"
ACTIVATE = f"{CONDA_ROOT}/bin/activate"
#: pinpoint's own instance images carry this label: their Python is on PATH already, nothing to activate
PINPOINT_LABEL = "pinpoint.swebench"
#: variables a shell sets for itself, not by activation
_SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}
_SPLIT = "PINPOINT-SPLIT"
_NO_CONDA = "PINPOINT-NO-CONDA"
_ANSWER = "/tmp/pinpoint-activation"
_PROBE = (f"[ -f {ACTIVATE} ] || {{ printf {_NO_CONDA}; exit 0; }}\n"
          f"env -0; printf '{_SPLIT}\\0'\n"
          f". {ACTIVATE} {CONDA_ENV} >/dev/null 2>&1 || exit 3\n"
          f"env -0; printf '{_SPLIT}\\0'\n"
          "python -c 'import platform; print(platform.python_version(), end=\"\")'\n")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]*(:\d+)?(/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


@dataclass(frozen=True)
class OfficialImage:
    """An official instance image present on this engine, and how it came (`cached` or `pulled`)."""

    tag: str
    how: str


@dataclass(frozen=True)
class BoxLayout:
    """What a box of an image needs: the variables conda's activation sets ({} when nothing is to activate) and
    the Python its commands run on ('' when unknown)."""

    env: dict[str, str]
    python: str = ""


def namespace() -> str | None:
    """The namespace official images come from ($PINPOINT_OFFICIAL_IMAGES), None when unset; UsageError when
    docker could not read it as one."""
    value = os.environ.get(OFFICIAL_ENV, "").strip().rstrip("/")
    if not value:
        return None
    if not _NAMESPACE.fullmatch(value):
        raise UsageError(f"${OFFICIAL_ENV}={value!r}: expected a namespace such as `swebench` or a mirror's "
                         "HOST[:PORT]/PREFIX (lowercase letters, digits and . _ -)")
    return value


def official_tag(instance_id: str, space: str) -> str:
    """The official harness's remote name of an instance image (`__` is spelled `_1776_` in registries)."""
    return f"{space}/sweb.eval.x86_64.{instance_id.lower()}:latest".replace("__", "_1776_")


_UNAVAILABLE: set[str] = set()


def official_image(instance: Instance, log=lambda line: print(line, file=sys.stderr)) -> OfficialImage | None:
    """The instance's official image when a namespace is set and the image is here or can be pulled; else None
    (said once per image, on stderr: pinpoint's builder takes over). A synthesized row runs in its source row's."""
    space = namespace()
    if space is None:
        return None
    tag = official_tag(instance.image_row().instance_id, space)
    if image_exists(tag):
        return OfficialImage(tag, "cached")
    if tag in _UNAVAILABLE:
        return None
    repository, _, version = tag.rpartition(":")
    try:
        engine.client().images.pull(repository, tag=version)
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        _UNAVAILABLE.add(tag)
        text = getattr(exc, "explanation", None) or str(exc)  # the engine's reason, without its HTTP preamble
        reason = (str(text).strip().splitlines() or [type(exc).__name__])[0][:200]
        log(f"pinpoint: official image {tag} not available ({reason}); building pinpoint's own")
        return None
    return OfficialImage(tag, "pulled")


_LAYOUTS: dict[str, BoxLayout] = {}


def box_layout(image: str) -> BoxLayout:
    """The layout of `image`'s boxes, read once per image: pinpoint's own images need nothing; an image with
    conda at /opt/miniconda3 gets what `activate testbed` sets; RuntimeFailure when that activation fails."""
    client = engine.client()
    found = client.images.get(image)
    if (found.labels or {}).get(PINPOINT_LABEL):
        return BoxLayout({})
    if found.id not in _LAYOUTS:
        _LAYOUTS[found.id] = _probe(client, image)
    return _LAYOUTS[found.id]


def _probe(client, image: str) -> BoxLayout:
    """Source the activation in a throwaway container (no network) and keep what it changed. The answer is read
    from a file in the stopped container, not from its log, which can come back empty on a loaded engine."""
    container = client.containers.create(image, ["bash", "-c", f"{{ {_PROBE}}} > {_ANSWER}"], network_mode="none",
                                         entrypoint=[], labels=container_labels())
    try:
        container.start()
        status = container.wait(timeout=120).get("StatusCode")
        if status != 0:
            raise RuntimeFailure(f"{image}: `source {ACTIVATE} {CONDA_ENV}` failed (exit {status}); is the conda "
                                 f"env `{CONDA_ENV}` in the image?")
        out = _read_file(container, _ANSWER)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
    if out == _NO_CONDA:
        return BoxLayout({})
    before, after, python = out.split(f"{_SPLIT}\0")
    old, new = _variables(before), _variables(after)
    return BoxLayout({k: v for k, v in new.items() if old.get(k) != v and k not in _SHELL_VARS}, python)


def _read_file(container, path: str) -> str:
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.getmembers()[0]
        return tar.extractfile(member).read().decode(errors="replace")


def _variables(block: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in block.split("\0") if "=" in item)
