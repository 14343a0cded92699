"""Compiled extension modules an in-place build (`pip install -e .`, `setup.py build_ext --inplace`) left in a
user's checkout. Git ignores them, so a clone of the checkout lacks them: its suite then imports the pure-Python
fallback or skips the extension's tests, passing where the user's own run would test more. `pinpoint fix --local`
copies them into its clone (as they were built: an edit to the C source is not rebuilt)."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

EXTENSION_SUFFIXES = (".so", ".pyd")


def built_extensions(checkout: Path) -> dict[str, bytes]:
    """{path: content} of the ignored extension modules in `checkout` that sit in a folder git tracks (a package
    of the project, never a virtual environment's site-packages)."""
    def git(*args: str) -> list[str]:
        proc = subprocess.run(["git", "-C", str(checkout), *args, "-z"], capture_output=True, text=True)
        return [name for name in proc.stdout.split("\0") if name] if proc.returncode == 0 else []

    tracked = {str(PurePosixPath(name).parent) for name in git("ls-files")}
    # --directory: an ignored folder (a .venv) is one entry, not every file in it
    ignored = git("ls-files", "--others", "--ignored", "--exclude-standard", "--directory")
    return {name: (checkout / name).read_bytes() for name in ignored
            if name.endswith(EXTENSION_SUFFIXES) and str(PurePosixPath(name).parent) in tracked
            and (checkout / name).is_file()}
