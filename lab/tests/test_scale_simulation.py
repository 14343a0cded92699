"""pinpoint_lab.simulate_scale on a tiny input: the properties a planner reads off its table (lab/scale.md)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
from pinpoint_lab import simulate_scale as sim

COSTS = json.loads(sim.COSTS.read_text())
DESIGNS = list(itertools.product(("spread", "grouped"), ("none", "push-pull", "build-once")))


def _run(instances, nodes: int, samples: int = 3, **design):
    return sim.simulate(instances, samples, sim.cluster_from(COSTS, nodes, slots=2, **design))


@pytest.fixture(scope="module")
def tiny():
    """12 instances in the dataset's env groups, with the costs measured here."""
    return sim.workload(COSTS, 12, "measured")


@pytest.mark.parametrize(("policy", "registry"), DESIGNS)
def test_every_sample_of_every_instance_finishes_and_disk_stays_within_the_images(tiny, policy, registry):
    for nodes in (1, 3, 8):
        r = _run(tiny, nodes, policy=policy, registry=registry)
        assert r.finished == 12 * 3
        assert r.instance_builds + r.pulls >= 12  # each instance's image reached a node at least once
        assert sim.cluster_from(COSTS, nodes).base_mb < r.peak_disk_mb <= r.disk_bound_mb + 1e-6
        assert 0 <= r.build_share <= 1 and r.engine_busy <= 1 + 1e-9 and r.slot_busy <= 1 + 1e-9


@pytest.mark.parametrize(("policy", "registry"), DESIGNS)
def test_more_nodes_are_never_slower_while_there_is_work_for_every_slot(tiny, policy, registry):
    walls = [_run(tiny, nodes, policy=policy, registry=registry).wall_s for nodes in (1, 2, 3, 6)]
    assert walls == sorted(walls, reverse=True), walls
    assert walls[0] / walls[-1] > 2  # and they do pay: 6 nodes well under half of one


def test_a_registry_builds_each_image_fewer_times_and_build_once_builds_each_once(tiny):
    envs = len({inst.env for inst in tiny})
    alone = _run(tiny, 4, registry="none")
    once = _run(tiny, 4, registry="build-once")
    pushed = _run(tiny, 4, registry="push-pull")
    assert alone.env_builds > envs and alone.instance_builds > 12  # every node builds what it meets
    assert (once.env_builds, once.instance_builds) == (envs, 12)
    assert once.env_builds <= pushed.env_builds <= alone.env_builds
    assert once.build_share < alone.build_share


def test_grouping_an_instances_samples_builds_it_once_and_holds_less_per_node(tiny):
    spread, grouped = _run(tiny, 4, policy="spread"), _run(tiny, 4, policy="grouped")
    assert grouped.instance_builds == 12 < spread.instance_builds
    assert grouped.peak_disk_mb < spread.peak_disk_mb


def test_a_slow_engine_or_driver_bounds_the_wall_time(tiny):
    slow_engine = sim.simulate(tiny, 3, sim.cluster_from(COSTS, 2, slots=2, creates_per_s=0.1))
    creates = 12 * 3 + slow_engine.env_builds + slow_engine.instance_builds  # one per grading and build
    assert slow_engine.wall_s >= creates / 2 / 0.1 and slow_engine.engine_busy > 0.9
    slow_driver = sim.simulate(tiny, 3, sim.cluster_from(COSTS, 2, slots=2, rows_per_s=0.05))
    assert slow_driver.wall_s >= 36 / 0.05 and slow_driver.driver_busy > 0.9


def test_the_command_prints_the_table_of_every_design():
    out = subprocess.run([sys.executable, "-m", "pinpoint_lab.simulate_scale", "--nodes", "1", "2", "--instances", "10", "--samples", "2"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 2 + 2 * len(DESIGNS) * 2  # header, rule; two mixes x designs x node counts
    assert all(line.count("|") == 14 for line in out)
