"""Run inside a build box (stdlib only, the box's Python >= 3.9): the bookkeeping that lets the env and reference
layers hold the dependencies an instance's install pulls in while the instance still ends with what a fresh install
gives.

The env step records the env as the spec made it (`snapshot`) and installs, with `--no-deps`, the repository's
shared pins it lacks (`absent`; swebench_eval.shared_pins). The reference step installs, the same way, the
distributions a dry run of the spec's install resolves for the reference commit that neither has (`shared`). Both
drop pip's REQUESTED mark from them, as a fresh install leaves its dependencies unrequested (`unrequest`), and list
them in one file. The instance step hides those distributions' metadata (`hide`), dry-runs its own install over the
env alone (the fresh resolution), puts them back (`unhide`), uninstalls those the fresh resolution does not pick at
that version (`drop`), runs the install as written, and fails unless the installed set is the env's updated by the
fresh resolution (`check`).
Embedded in the scripts by swebench_eval.scripts (so its text is part of the layers' tags).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from importlib import metadata


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> list[tuple[str, str, str]]:
    """(canonical name, version, metadata directory) of every distribution on sys.path."""
    found = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.append((canonical(name), dist.version, str(getattr(dist, "_path", ""))))
    return found


def pairs() -> list[tuple[str, str]]:
    return sorted({(name, version) for name, version, _ in installed()})


def resolved(report: str) -> dict[str, str]:
    """{canonical name: version} of what the dry run's report would install, the project itself included."""
    with open(report) as handle:
        items = json.load(handle)["install"]
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in items}


def read_pins(path: str) -> list[list[str]]:
    with open(path) as handle:
        return [line.strip().split("==") for line in handle if line.strip()]


def snapshot(out: str) -> None:
    with open(out, "w") as handle:
        json.dump(pairs(), handle)


def shared(report: str, env: str, out: str) -> None:
    with open(report) as handle:
        items = json.load(handle)["install"]
    with open(env) as handle:
        env_names = {name for name, _ in json.load(handle)}
    pins = sorted(f"{item['metadata']['name']}=={item['metadata']['version']}" for item in items
                  if not item.get("is_direct") and canonical(item["metadata"]["name"]) not in env_names)
    with open(out, "w") as handle:
        handle.write("".join(pin + "\n" for pin in pins))


def absent(pins_path: str, env: str, out: str) -> None:
    """The pins whose distribution the env lacks under any version (one it has stays as the env made it)."""
    with open(env) as handle:
        env_names = {name for name, _ in json.load(handle)}
    pins = [f"{name}=={version}" for name, version in read_pins(pins_path) if canonical(name) not in env_names]
    with open(out, "w") as handle:
        handle.write("".join(pin + "\n" for pin in pins))


def _dirs(pins: list[list[str]]) -> list[str]:
    wanted = {(canonical(name), version) for name, version in pins}
    return [path for name, version, path in installed() if (name, version) in wanted]


def unrequest(pins_path: str) -> None:
    """Remove REQUESTED and its RECORD row: pip writes it for what the command names, a fresh install's
    dependencies lack it (RECORD rows are sorted, so dropping one leaves what pip would have written)."""
    for path in _dirs(read_pins(pins_path)):
        mark = os.path.join(path, "REQUESTED")
        if os.path.exists(mark):
            os.remove(mark)
            record = os.path.join(path, "RECORD")
            with open(record) as handle:
                rows = [row for row in handle if row.split(",", 1)[0] != os.path.basename(path) + "/REQUESTED"]
            with open(record, "w") as handle:
                handle.writelines(rows)


def hide(pins_path: str, hidden: str) -> None:
    moved = {}
    for index, path in enumerate(_dirs(read_pins(pins_path))):
        target = os.path.join(hidden, str(index))
        shutil.move(path, target)
        moved[target] = path
    with open(os.path.join(hidden, "moved.json"), "w") as handle:
        json.dump(moved, handle)


def unhide(hidden: str) -> None:
    with open(os.path.join(hidden, "moved.json")) as handle:
        moved = json.load(handle)
    for target, path in moved.items():
        shutil.move(target, path)
    shutil.rmtree(hidden)


def drop(pins_path: str, report: str, out: str) -> None:
    fresh = resolved(report)
    names = [name for name, version in read_pins(pins_path) if fresh.get(canonical(name)) != version]
    with open(out, "w") as handle:
        handle.write("".join(name + "\n" for name in names))


def check(env: str, report: str) -> None:
    with open(env) as handle:
        expected = {(name, version) for name, version in json.load(handle)}
    fresh = resolved(report)
    expected = {(n, v) for n, v in expected if n not in fresh} | set(fresh.items())
    actual = set(pairs())
    if actual != expected:
        print(f"pinpoint: the installed distributions differ from a fresh install's: extra "
              f"{sorted(actual - expected)}, missing {sorted(expected - actual)}", file=sys.stderr)
        sys.exit(1)
    print(f"pinpoint: installed distributions = the env's + the fresh resolution ({len(actual)})")


COMMANDS = {"snapshot": snapshot, "shared": shared, "absent": absent, "unrequest": unrequest, "hide": hide, "unhide": unhide,
            "drop": drop, "check": check}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
