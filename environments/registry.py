"""The image registry a run shares its layers through: `--registry HOST/PREFIX`, else `$PINPOINT_REGISTRY`.

A command's flag is checked here and exported as the variable, so every build in the process (and, through the
executor's forwarding of `PINPOINT_*`, every Ray worker) reads the same one; `environments.images` pulls and
pushes. Kept apart from it so the CLI can offer the flag without importing the Docker client.
"""

from __future__ import annotations

import os
import re

from pinpoint.environments.errors import UsageError

REGISTRY_ENV = "PINPOINT_REGISTRY"
#: one path component of an image name (docker's reference grammar)
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")


def registry_of(value: str | None) -> str | None:
    """The registry prefix `value` names, `HOST[:PORT]/PREFIX` (a trailing slash dropped), None for ''/None;
    UsageError when docker would not read it as a registry (a bare name would go to Docker Hub)."""
    value = (value or "").strip().rstrip("/")
    if not value:
        return None
    host, _, prefix = value.partition("/")
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", host) or not ("." in host or ":" in host or host == "localhost"):
        raise UsageError(f"--registry {value!r}: expected HOST[:PORT]/PREFIX with a host docker reads as a "
                         "registry (a dot, a port or localhost), e.g. 127.0.0.1:5000/pinpoint")
    bad = [part for part in prefix.split("/") if prefix and not _COMPONENT.fullmatch(part)]
    if bad:
        raise UsageError(f"--registry {value!r}: {bad[0]!r} is not a valid image path component "
                         "(lowercase letters, digits and . _ - between them)")
    return value


def use_registry(value: str | None) -> str | None:
    """A command's `--registry`: checked, and exported as $PINPOINT_REGISTRY, which every build in this process
    reads and the executor forwards to Ray workers (None leaves the variable as it is); the registry in use."""
    if value is not None:
        os.environ[REGISTRY_ENV] = registry_of(value) or ""
    return registry()


def registry() -> str | None:
    """The registry images are pulled from and pushed to ($PINPOINT_REGISTRY), None for none."""
    return registry_of(os.environ.get(REGISTRY_ENV))


def registry_arg(parser) -> None:
    """`--registry`, the same on every command that builds images."""
    parser.add_argument("--registry", metavar="HOST/PREFIX", help="pull each image from HOST/PREFIX/<tag> before "
                        "building it, push it there after (default: $PINPOINT_REGISTRY)")
