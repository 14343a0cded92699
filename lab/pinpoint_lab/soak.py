"""`pinpoint-lab bench soak`: one environment through many resets and commands, and many environments at once, with
what leaked afterwards (processes, file descriptors, threads, containers, temporary folders, disk) and whether the
latencies stayed put (p95 of the last tenth of the run beside the first tenth).

Leaks are counted against a baseline taken just before, in this process and on this host: containers by a label
only this run puts on its own, so other users of the engine cannot make the figures lie.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from pinpoint.environments import engine
from pinpoint.environments.bench import ms_percentile
from pinpoint.environments.docker_runtime import DockerRuntime

SOAK_LABEL = "pinpoint.soak"
#: what a step of an agent leaves behind before a reset: an edit, a new file, an ignored artefact
DIRTY = "echo x >> README.md && echo y > new_file.py && mkdir -p build && touch build/out.o"


def footprint(client, tag: str) -> dict:
    """What a leak would show in: this process's fds, threads and child processes, the containers of this soak,
    the entries of the temporary folder (run_soak points it at a private one), the free disk."""
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "child_processes": len(descendants(os.getpid())),
        "containers": len(client.containers.list(all=True, filters={"label": f"{SOAK_LABEL}={tag}"})),
        "temp_folders": len(os.listdir(tempfile.gettempdir())),
        "disk_free_mb": engine.free_disk_bytes() >> 20,
    }


def descendants(root: int) -> list[int]:
    """Host processes below `root` (what this process started and left running)."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _stability(samples: list[float]) -> dict:
    """p95 of the first and last tenth of a run, and their ratio (about 1 when nothing degrades)."""
    tenth = max(1, len(samples) // 10)
    first, last = ms_percentile(samples[:tenth], 95), ms_percentile(samples[-tenth:], 95)
    return {"p50_ms": ms_percentile(samples, 50), "p95_ms": ms_percentile(samples, 95), "first_tenth_p95_ms": first,
            "last_tenth_p95_ms": last, "last_vs_first_p95": round(last / first, 2) if first else float("nan")}


def one_environment(image: str, tag: str, resets: int, commands: int) -> dict:
    """`resets` dirty-then-reset cycles (each checked clean) and `commands` round trips in one environment."""
    reset_s, command_s, dirty_after_reset, failed_commands = [], [], 0, 0
    with DockerRuntime(image, labels={SOAK_LABEL: tag}) as rt:
        for _ in range(resets):
            rt.run(DIRTY)
            reset_s.append(_timed(rt.reset))
            dirty_after_reset += rt.diff() != ""
        for i in range(commands):
            start = time.perf_counter()
            result = rt.run(f"echo {i}")
            command_s.append(time.perf_counter() - start)
            failed_commands += result.output.strip() != str(i)
    return {"resets": resets, "dirty_after_reset": dirty_after_reset, "reset": _stability(reset_s),
            "commands": commands, "failed_commands": failed_commands, "command": _stability(command_s)}


def _start_and_check(image: str, tag: str) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        with DockerRuntime(image, labels={SOAK_LABEL: tag}) as rt:
            ok = rt.run("echo ok").output.strip() == "ok"
    except Exception:  # noqa: BLE001 - a failure to start counts as a failure; the soak goes on
        ok = False
    return time.perf_counter() - start, ok


def many_at_once(image: str, tag: str, count: int) -> dict:
    """`count` environments started at once, each running one command and closing."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=count) as pool:
        results = list(pool.map(lambda _: _start_and_check(image, tag), range(count)))
    per_env = [elapsed for elapsed, _ in results]
    return {"environments": count, "failures": sum(not ok for _, ok in results),
            "wall_s": round(time.perf_counter() - start, 1), "env_p50_ms": ms_percentile(per_env, 50),
            "env_p95_ms": ms_percentile(per_env, 95)}


def leaks(before: dict, after: dict) -> dict:
    """After minus before, per footprint item; disk counts only a loss beyond 256 MiB (other writers move it)."""
    delta = {key: after[key] - before[key] for key in before if key != "disk_free_mb"}
    delta["disk_lost_mb"] = max(0, before["disk_free_mb"] - after["disk_free_mb"] - 256)
    return delta


def run_soak(image: str, *, resets: int = 1000, commands: int = 1000, concurrent: int = 64, log=print) -> dict:
    """The whole soak; every figure in one dict."""
    client = engine.client()
    tag = uuid.uuid4().hex[:12]
    # every temporary folder this process makes lands in a private one, so other users of /tmp cannot move the count
    saved = tempfile.tempdir
    private = tempfile.mkdtemp(prefix="pinpoint-soak-")
    tempfile.tempdir = private
    try:
        before = footprint(client, tag)
        log(f"one environment: {resets} resets, {commands} commands")
        single = one_environment(image, tag, resets, commands)
        log(f"{concurrent} environments at once")
        crowd = many_at_once(image, tag, concurrent)
        time.sleep(1.0)  # let the engine's and the threads' last work finish before counting
        after = footprint(client, tag)
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(private, ignore_errors=True)
    leaked = leaks(before, after)
    return {"image": image, "one_environment": single, "at_once": crowd, "before": before, "after": after,
            "leaked": leaked, "leak_free": all(value <= 0 for value in leaked.values())}
