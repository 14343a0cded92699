"""`pinpoint-lab bench harness`: what one SWE-bench instance costs, each figure beside a baseline from the same run.

- instance layer build (cold) vs a cached rebuild (same inputs: only hashing and a tag lookup);
- bytes the instance layer adds vs the whole image an instance needs (what the official harness stores per
  instance, since its instance images are self-contained), for this instance and over every instance built;
- eval wall time of the gold patch (fresh container, patch, reinstall, tests, grading) vs the bare test command in
  an already-running container.
"""

from __future__ import annotations

import time
from typing import Any

from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.evaluate import evaluate_patch
from pinpoint.swebench_eval.images import build_instance_image, instance_layer_sizes, layer_bytes, plan_images
from pinpoint.swebench_eval.scripts import TESTBED
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import spec_for, test_command


def _ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline else "n/a"


def bench_harness(instance: Instance, sources: RepoSources | None = None) -> dict[str, Any]:
    import docker
    from pinpoint.environments.docker_runtime import DockerRuntime

    sources = sources or RepoSources()
    plan = plan_images(instance, sources)
    client = docker.from_env()
    if client.images.list(name=plan.instance_tag):
        client.images.remove(plan.instance_tag)
    cold = build_instance_image(instance, sources)
    start = time.monotonic()
    build_instance_image(instance, sources)
    cached_s = time.monotonic() - start

    added = layer_bytes(plan.instance_tag, plan.reference_tag)
    shared = layer_bytes(plan.reference_tag, plan.env_tag)
    whole = client.images.get(plan.instance_tag).attrs["Size"]
    all_layers = sorted(instance_layer_sizes().values())
    all_full = sum(client.images.get(tag).attrs["Size"] for tag in instance_layer_sizes())

    start = time.monotonic()
    verdict = evaluate_patch(instance, instance.patch, image=plan.instance_tag)
    eval_s = time.monotonic() - start
    with DockerRuntime(plan.instance_tag, workdir=TESTBED, network=False) as runtime:
        start = time.monotonic()
        runtime.run(test_command(instance, spec_for(instance)), timeout=1800)
        bare_s = time.monotonic() - start
    return {
        "instance": instance.instance_id,
        "gold_outcome": verdict.outcome,
        "env_layer_build_s": round(cold.env_seconds, 1),
        "instance_layer_build_s": round(cold.instance_seconds, 1),
        "cached_rebuild_s": round(cached_s, 3),
        "build_cold_vs_cached": _ratio(cold.instance_seconds, cached_s),
        "instance_layer_mb": round(added / 1e6, 1),
        "reference_layer_mb": round(shared / 1e6, 1),
        "full_image_mb": round(whole / 1e6, 1),
        "layer_vs_full_image": _ratio(added, whole),
        "instances_built": len(all_layers),
        "mean_instance_layer_mb": round(sum(all_layers) / len(all_layers) / 1e6, 1),
        "median_instance_layer_mb": round(all_layers[len(all_layers) // 2] / 1e6, 1),
        "mean_full_image_mb": round(all_full / len(all_layers) / 1e6, 1),
        "all_layers_vs_full_images": _ratio(sum(all_layers), all_full),
        "eval_wall_s": round(eval_s, 1),
        "bare_test_command_s": round(bare_s, 1),
        "eval_vs_bare_tests": _ratio(eval_s, bare_s),
    }
