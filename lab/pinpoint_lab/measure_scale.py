"""Measure the per-instance costs the scale simulation (pinpoint_lab/simulate_scale.py) is fed with, on real rows here.

Per row: env and instance layer build seconds and bytes (built again under throwaway tags, so nobody's cached
image is touched, then removed), container boot (a fresh instance box's first command), the bare test command, a
gold grading in a fresh box. Per engine: boxes booted N at a time (throughput on container create). Per driver:
fsynced row appends per second. Writes one JSON object (lab/scale.md says how the numbers are used).

    .venv/bin/python -m pinpoint_lab.measure_scale --instances psf__requests-2931 pallets__flask-5014 --out costs.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pinpoint.environments import engine
from pinpoint.environments.images import commit_build_step
from pinpoint.swebench_eval.datasets import Instance, load_instances
from pinpoint.swebench_eval.evaluate import evaluate_patch
from pinpoint.swebench_eval.images import (
    ENV_CHANGES,
    build_instance_image,
    commit_instance_layer,
    plan_images,
)
from pinpoint.swebench_eval.predictions import append_prediction
from pinpoint.swebench_eval.runtime import instance_runtime
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import spec_for, test_command

THROWAWAY = "pinpoint-scale-measure"


def _timed(fn, *args, **kwargs) -> tuple[float, Any]:
    start = time.monotonic()
    value = fn(*args, **kwargs)
    return time.monotonic() - start, value


def _size(tag: str) -> int:
    return int(engine.client().images.get(tag).attrs["Size"])


def _build_layers(instance: Instance, sources: RepoSources) -> dict[str, float]:
    """The env and instance layers built again from the real scripts, each on its real parent (the instance on its
    reference layer), under throwaway tags."""
    plan = plan_images(instance, sources)
    build_instance_image(instance, sources)  # the real parents exist (cached: nothing rebuilt)
    env_tag, inst_tag = f"{THROWAWAY}:env-{os.getpid()}", f"{THROWAWAY}:inst-{os.getpid()}"
    client = engine.client()
    try:
        env_s, _ = _timed(commit_build_step, plan.base_tag, plan.env_script, env_tag, changes=ENV_CHANGES)
        inst_s, _ = _timed(commit_instance_layer, plan, instance, sources, inst_tag)
        return {"env_build_s": env_s, "instance_build_s": inst_s,
                "env_layer_mb": (_size(env_tag) - _size(plan.base_tag)) / 1e6,
                "reference_layer_mb": (_size(plan.reference_tag) - _size(plan.env_tag)) / 1e6,
                "instance_layer_mb": (_size(inst_tag) - _size(plan.reference_tag)) / 1e6,
                "image_mb": _size(plan.instance_tag) / 1e6, "base_mb": _size(plan.base_tag) / 1e6}
    finally:
        for tag in (inst_tag, env_tag):
            if client.images.list(name=tag):
                client.images.remove(tag, noprune=False)


def _box_costs(instance: Instance, tag: str) -> dict[str, float]:
    """Boot (a fresh box started, its first command), the bare test command, a gold grading in a fresh box."""
    start = time.monotonic()
    box = instance_runtime(instance, tag)  # the box starts here
    try:
        box.run("true")
        boot_s = time.monotonic() - start
        test_s, _ = _timed(box.run, test_command(instance, spec_for(instance)), timeout=1800)
    finally:
        box.close()
    grade_s, verdict = _timed(evaluate_patch, instance, instance.patch, image=tag)
    return {"boot_s": boot_s, "test_s": test_s, "grade_s": grade_s, "gold_outcome": verdict.outcome}


def _boot_and_close(instance: Instance, tag: str) -> None:
    box = instance_runtime(instance, tag)
    try:
        box.run("true")
    finally:
        box.close()


def engine_boot_rate(instance: Instance, tag: str, boxes: int, concurrency: int) -> float:
    """Boxes booted (started, one command, removed) per second on this engine, `concurrency` at a time."""
    with ThreadPoolExecutor(concurrency) as pool:
        wall, _ = _timed(lambda: list(pool.map(lambda _: _boot_and_close(instance, tag), range(boxes))))
    return boxes / wall


def driver_write_rate(rows: int) -> float:
    """Fsynced prediction appends per second (the driver writes every row this way)."""
    folder = Path(tempfile.mkdtemp(prefix="pinpoint-scale-writes-"))
    try:
        wall, _ = _timed(lambda: [append_prediction(folder / "preds.jsonl", f"row-{i}", "x" * 2000, "m")
                                  for i in range(rows)])
        return rows / wall
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", nargs="+", required=True)
    parser.add_argument("--boxes", type=int, default=8, help="boxes per engine-throughput sample")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sources = RepoSources()
    rows = []
    for instance in load_instances(ids=args.instances):
        tag = plan_images(instance, sources).instance_tag
        row = {"instance": instance.instance_id, "repo": instance.repo, "load": os.getloadavg()[0]}
        row.update(_build_layers(instance, sources))
        row.update(_box_costs(instance, tag))
        rows.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        print(json.dumps(rows[-1]), flush=True)
    first = load_instances(ids=args.instances[:1])[0]
    first_tag = plan_images(first, sources).instance_tag
    rates = {str(c): round(engine_boot_rate(first, first_tag, args.boxes, c), 2) for c in (1, 2, 4, 8)}
    result = {"machine": f"{os.cpu_count()} cores", "rows": rows, "engine_boots_per_s": rates,
              "engine_boots_load": round(os.getloadavg()[0], 2),
              "driver_rows_per_s": round(statistics.median(driver_write_rate(200) for _ in range(3)), 1)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    main()
