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
