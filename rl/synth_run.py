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
    `<out>.repos/`. Returns each source's stats (with `error` when it failed)."""
    work_dir = out.with_name(out.name + ".repos")
    items = [Item(str(i), (spec, str(work_dir.resolve()), asdict(settings)), needs=Needs(1, 1))
             for i, spec in enumerate(specs)]
    out.parent.mkdir(parents=True, exist_ok=True)
    all_stats: list[dict[str, Any]] = []
    seen: set[str] = set()
    with executor_for(backend, address, workers) as ex, out.open("w") as sink:
        for outcome in ex.run(synthesize_spec, items):
            if outcome.error is not None:
                spec = specs[int(outcome.key)]
                stats = {"source": spec.get("instance_id") or spec.get("repo"), "error": _one_line(outcome.error)}
            else:
                stats = outcome.value["stats"]
                for task in outcome.value["tasks"]:
                    if task["task_id"] not in seen:
                        seen.add(task["task_id"])
                        sink.write(json.dumps(task) + "\n")
                sink.flush()
            all_stats.append(stats)
            if on_source is not None:
                on_source(stats)
    return all_stats


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
