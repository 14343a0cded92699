"""The official eval script as typed steps, so a warm box can run it in parts and skip a reinstall it already did.

The script `scripts.eval_script` writes stays the source of truth: it is parsed back into steps (a heredoc or a
shell function is one step), never rewritten per repository. Kinds: `header` (shebang, `set`), `env` (`export`,
`cd`: repeated at the top of the second part, which runs in a new shell), `install` (the spec's `pip install` line)
and `command` (everything else, in order).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

StepKind = Literal["header", "env", "install", "command"]

_INSTALL = re.compile(r"^(python3? -m )?pip install\b")
_HEREDOC = re.compile(r"<<-?\s*'?\"?([A-Za-z0-9_]+)'?\"?")
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\(\)\s*\{\s*$")

#: base names of the files an install reads beyond the package's modules (the packaging files and what compiled
#: extensions are built from or are): a tree whose matching files are unchanged installs the same (editable installs)
INSTALL_RELEVANT = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "requirements*.txt", "*version*",
                    "*.c", "*.cc", "*.cpp", "*.cxx", "*.h", "*.hpp", "*.pyx", "*.pxd", "*.pxi", "*.f", "*.f90",
                    "*.so", "*.pyd")


@dataclass(frozen=True)
class Step:
    kind: StepKind
    text: str


def parse(script: str) -> list[Step]:
    """The steps of an eval script, in order; joining their texts with newlines gives the script back."""
    lines = script.rstrip("\n").split("\n")
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        line, end = lines[i], i + 1
        heredoc = _HEREDOC.search(line) if "<<" in line else None
        if heredoc:
            while end < len(lines) and lines[end] != heredoc.group(1):
                end += 1
            end += 1
        elif _FUNCTION.match(line):
            while end < len(lines) and lines[end - 1] != "}":
                end += 1
        steps.append(Step(_kind(line), "\n".join(lines[i:end])))
        i = end
    return steps


def _kind(line: str) -> StepKind:
    if line.startswith("#!") or line.startswith("set "):
        return "header"
    if line.startswith("export ") or line.startswith("cd "):
        return "env"
    return "install" if _INSTALL.match(line) else "command"


def install_patterns(steps: list[Step]) -> list[str] | None:
    """The file names whose content decides what the install steps do: the packaging files for editable installs
    (`pip install -e`: the modules are read from the tree where they are), every file (None) for an install that
    copies the package."""
    installs = [s.text for s in steps if s.kind == "install"]
    return list(INSTALL_RELEVANT) if installs and all(" -e " in f" {t} " for t in installs) else None


@dataclass(frozen=True)
class Parts:
    """The script in three runs: the steps before the install, the install steps (empty when there are none), the
    rest; each but the first starts with the header and env steps again (a new shell)."""

    before: str
    install: str
    after: str


def split(steps: list[Step], skip_install: str | None = None) -> Parts:
    """The three parts of `steps`; with `skip_install` (why) each install step is replaced by a no-op that says so in
    the log (`set -x` echoes it)."""
    installs = [i for i, s in enumerate(steps) if s.kind == "install"]
    first, last = (installs[0], installs[-1]) if installs else (len(steps), len(steps) - 1)
    again = [s.text for s in steps[:first] if s.kind in ("header", "env")]
    install = [_skipped(s, skip_install) if s.kind == "install" and skip_install else s.text
               for s in steps[first:last + 1]]
    return Parts(_join([s.text for s in steps[:first]]), _join(again + install) if installs else "",
                 _join(again + [s.text for s in steps[last + 1:]]))


def _join(texts: list[str]) -> str:
    return "\n".join(texts) + "\n"


def _skipped(step: Step, why: str) -> str:
    return ": " + shlex.quote(f"pinpoint: skipped `{step.text}`: {why}")


def has_install(steps: list[Step]) -> bool:
    return any(s.kind == "install" for s in steps)
