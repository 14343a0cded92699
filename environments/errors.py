"""The root of every error pinpoint expects and explains.

A `PinpointError` carries a message that says what happened and what to do; the console script prints it as one
line (`pinpoint <command>: <message>`) and exits 2. Subclasses also derive from the builtin they refine (ValueError
for bad input, RuntimeError for broken infrastructure), so callers that catch the builtin keep working. Anything
else that escapes a command is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno


class PinpointError(Exception):
    """An expected failure with a message written for the user."""


class UsageError(PinpointError, ValueError):
    """Arguments or input files that cannot be used as given."""


#: packages whose exceptions mean the machinery failed (the engine's client and its HTTP stack)
_INFRA_MODULES = ("docker.", "requests.", "urllib3.", "httpx.", "httpcore.")
#: OSError numbers of a machine in trouble: disk full, over quota, read-only or failing storage
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def is_storage_failure(exc: BaseException) -> bool:
    """A disk that is full, over quota, read-only or failing (an OSError, or SQLite's own 'disk is full')."""
    return (isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS) or "disk is full" in str(exc)


def is_infrastructure(exc: BaseException) -> bool:
    """Whether `exc` is the infrastructure failing (an engine lost, a disk full, an endpoint down) rather than bad
    input or a bug: what a batch reports apart and a rerun retries."""
    if isinstance(exc, PinpointError):
        return not isinstance(exc, ValueError)
    return is_storage_failure(exc) or type(exc).__module__.startswith(_INFRA_MODULES)
