"""The root of every error pinpoint expects and explains.

A `PinpointError` carries a message that says what happened and what to do; the console script prints it as one
line (`pinpoint <command>: <message>`) and exits 2. Subclasses also derive from the builtin they refine (ValueError
for bad input, RuntimeError for broken infrastructure), so callers that catch the builtin keep working. Anything
else that escapes a command is a bug and keeps its traceback.
"""

from __future__ import annotations


class PinpointError(Exception):
    """An expected failure with a message written for the user."""


class UsageError(PinpointError, ValueError):
    """Arguments or input files that cannot be used as given."""


#: packages whose exceptions mean the machinery failed (the engine's client and its HTTP stack)
_INFRA_MODULES = ("docker.", "requests.", "urllib3.", "httpx.", "httpcore.")
#: OSError numbers of a machine in trouble: disk full, quota, read-only or failing storage
_INFRA_ERRNOS = frozenset({28, 122, 30, 5})  # ENOSPC, EDQUOT, EROFS, EIO


def is_infrastructure(exc: BaseException) -> bool:
    """Whether `exc` is the infrastructure failing (an engine lost, a disk full, an endpoint down) rather than bad
    input or a bug: what a batch reports apart and a rerun retries."""
    if isinstance(exc, PinpointError):
        return not isinstance(exc, ValueError)
    if isinstance(exc, OSError) and exc.errno in _INFRA_ERRNOS:
        return True
    return type(exc).__module__.startswith(_INFRA_MODULES) or "disk is full" in str(exc)
