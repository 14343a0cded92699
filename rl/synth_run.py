"""`pinpoint rl synthesize`'s fan-out: one executor item per source (a row or a local repository), each prepared
and synthesized where the executor runs it (a thread here, a Ray task on a cluster); the driver is the only writer
of the tasks file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pinpoint.environments.executor import Item, Needs, executor_for
from pinpoint.environments.files import jsonl_records, write_atomic
from pinpoint.rl.synth_sources import source_from_spec
from pinpoint.rl.synthesize import SynthSettings, synthesize


def synthesize_spec(spec: dict[str, Any], work_dir: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One source, start to end, where the executor runs it: prepared (copied, or made whole and its image built)
    and synthesized; plain data back (tasks and stats), so a Ray node returns the same."""
    options = SynthSettings(**settings)
    started = time.monotonic()
    source = source_from_spec(spec, Path(work_dir), options.timeout_s)
    prepared = time.monotonic() - started
    result = synthesize(source, options)
    return {"tasks": result.tasks, "stats": {**asdict(result.stats), "prepare_s": round(prepared, 1)}}


def run_synthesis(specs: list[dict[str, Any]], out: Path, settings: SynthSettings, backend: str = "local",
                  address: str | None = None, workers: int = 1,
                  on_source: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Synthesize every source on the executor and write the tasks to `out` (JSONL, one task a line: a tasks file
    for `rl rollout` and `rl dataset`) as each source finishes; the sources' working repositories go to
    `<out>.repos/`. Returns each source's stats (with `error` when it failed).

    A rerun with the same `out` resumes: the sources `<out>.done` lists (one line each, written after its tasks)
    are skipped with their recorded stats (`resumed`), and the tasks of a source killed before its line are
    dropped, so a killed run loses only the sources in progress."""
    work_dir = out.with_name(out.name + ".repos")
    done_path = out.with_name(out.name + ".done")
    out.parent.mkdir(parents=True, exist_ok=True)
    finished = _finished(out, done_path)
    todo = [(i, spec) for i, spec in enumerate(specs) if _key(spec) not in finished]
    items = [Item(str(i), (spec, str(work_dir.resolve()), asdict(settings)), needs=Needs(1, 1)) for i, spec in todo]
    all_stats = [{**finished[_key(spec)], "resumed": True} for spec in specs if _key(spec) in finished]
    for stats in all_stats:
        if on_source is not None:
            on_source(stats)
    seen = {task_id(task) for task in _records(out)}
    with executor_for(backend, address, workers) as ex, out.open("a") as sink, done_path.open("a") as done:
        for outcome in ex.run(synthesize_spec, items):
            spec = specs[int(outcome.key)]
            if outcome.error is not None:
                stats = {"source": spec.get("instance_id") or spec.get("repo"), "error": _one_line(outcome.error)}
            else:
                stats = outcome.value["stats"]
                for task in outcome.value["tasks"]:
                    if task_id(task) not in seen:
                        seen.add(task_id(task))
                        sink.write(json.dumps(task) + "\n")
                sink.flush()
                if not stats.get("error"):
                    done.write(json.dumps({"spec": _key(spec), "stats": stats}) + "\n")
                    done.flush()
            all_stats.append(stats)
            if on_source is not None:
                on_source(stats)
    return all_stats


def task_id(task: dict[str, Any]) -> str:
    """A task's id: a row's `instance_id`, a local task's `task_id`."""
    return task.get("instance_id") or task["task_id"]


def _key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True)


def _finished(out: Path, done_path: Path) -> dict[str, dict[str, Any]]:
    """The stats of the sources an earlier run with this output finished, by spec; `out` is rewritten without the
    tasks of sources it did not finish (killed between writing their tasks and their line)."""
    if not out.exists():
        done_path.unlink(missing_ok=True)
        return {}
    finished = {r["spec"]: r["stats"] for r in _records(done_path)}
    names = {stats["source"] for stats in finished.values()}
    kept = [task for task in _records(out) if (task.get("synthesis") or {}).get("source") in names]
    write_atomic(out, "".join(json.dumps(task) + "\n" for task in kept))
    return finished


def _records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of `path` (none when it is missing), but a last line a kill cut short."""
    if not path.exists():
        return []
    return [row for _, row, not_json in jsonl_records(path.read_text()) if not not_json]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
