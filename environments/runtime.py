"""The Runtime contract: one interface for a repository checkout the agent and the harness act on.

Implementations: `environments.local.LocalRuntime` (a temporary git checkout on the host) and
`environments.docker_runtime.DockerRuntime` (a working tree inside a running container). Commands are stateless:
each `run` starts a fresh shell in the repository root, so no hidden session state leaks between steps.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal

from pinpoint.environments.errors import PinpointError, UsageError

TIMEOUT_MARKER = "[pinpoint: command timed out after {seconds:g}s; output above is partial; process group killed]"
#: appended when a sandbox limit stopped or hindered a command (DockerRuntime; docs/security.md)
LIMIT_MARKER = "[pinpoint: sandbox limit hit: {why}]"


class RuntimeFailure(PinpointError):
    """Base class for runtime failures (a container that died, a checkout that vanished)."""


class RuntimeBroken(RuntimeFailure):
    """The runtime can no longer run commands (e.g. its container was killed); `reset()` recovers."""


class BrokenFromInside(RuntimeBroken):
    """A command broke its own box (it killed the command server): the model's doing, not the infrastructure's,
    so an episode can score it as a failure rather than drop it; `reset()` recovers."""


@dataclass
class RuntimeSettings:
    """How big the box is: one config section (`runtime.*`), the same for the agent's container and the grader's,
    so the agent tests in the box that grades it."""

    mem_limit: str = "4g"
    #: CPUs of the container; None: the SWE-bench spec's quota (pylint's multiprocessing tests need it), else 1
    cpus: float | None = None
    pids_limit: int = 1024
    #: how commands reach the container: a small command server (fast), or one `docker exec` per command
    channel: Literal["server", "exec"] = "server"
    #: bytes a container may write (its writable layer: the tree, /tmp, installs); SWE-bench's task metadata pins
    #: 10g. A storage quota where the driver has one, else a watchdog that kills the command (docs/security.md);
    #: "" for none
    disk_limit: str = "10g"
    #: seconds between the disk watchdog's checks while a command runs (it also checks when each command ends)
    disk_check_s: float = 1.0
    #: capabilities commands keep, comma-separated (e.g. "NET_RAW"); default none: uid 0 with an empty set
    command_capabilities: str = ""
    #: who commands run as: "root" (uid 0 with no capability: suites run as under the official harness) or a
    #: numeric uid (e.g. "1000"; the tree is handed to it at start, ~1-2 s; it cannot install into the image's
    #: Python). Grading always runs as root: the eval script reinstalls the package (docs/security.md)
    command_user: str = "root"

    def __post_init__(self) -> None:
        """Bad sizes and unknown capability names fail when the config is read, not when a container starts."""
        from pinpoint.environments.sandbox import capability_numbers, command_uid, parse_size

        if self.disk_limit:
            parse_size(self.disk_limit)
        capability_numbers(self.command_capabilities)
        command_uid(self.command_user)
        if self.disk_check_s <= 0:
            raise UsageError(f"runtime.disk_check_s must be > 0, not {self.disk_check_s}")


@dataclass(frozen=True)
class CommandResult:
    """What one command produced. `exit_code` is None when the command timed out."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    duration_s: float = 0.0
    #: the sandbox limit that stopped or hindered the command (disk, memory, pids), in words; None when none did
    stopped_by: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Runtime(abc.ABC):
    """A repository at a base commit that commands run in and files are read from and written to."""

    #: absolute path of the repository root as seen by commands run in this runtime
    workdir: str
    #: sha of the commit the working tree started from; `diff()` and `reset()` are relative to it
    base_commit: str
    #: absolute folder outside the repository, private to this runtime, for files its commands run that must never
    #: enter the patch (the agent's reproduction script); a container's own /tmp, a local checkout's own folder
    scratch_dir: str = "/tmp/pinpoint-scratch"

    @abc.abstractmethod
    def run(self, command: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> CommandResult:
        """Run `command` with bash in `workdir`; on timeout kill the whole process group and return partial output."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes:
        """Return the bytes of `path` (relative to `workdir`, or absolute). Raises FileNotFoundError."""

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Write `data` to `path`, creating parent folders; str is encoded as UTF-8."""

    @abc.abstractmethod
    def diff(self) -> str:
        """Unified diff (git format, new files included, binary-safe) of the working tree against the base commit."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Restore the working tree to the base commit (fast path in place; recreate only when broken)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every resource (container, temporary folder). Safe to call twice."""

    def read_text(self, path: str) -> str:
        """Read `path` as text, replacing undecodable bytes so non-UTF-8 files never crash a tool."""
        return self.read_file(path).decode("utf-8", errors="replace")

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
