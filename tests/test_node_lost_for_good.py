"""A node lost for good (tests/two_nodes.py: two Ray nodes on this machine, the second on a second dockerd): every
process of the second node is SIGKILLed while its engine holds the box of `eval`'s only row, its reaper included,
as a machine dying would. The row is graded again on the head and written once; the run ends (exit 0) with one
line naming the boxes left on the lost node's engine and the command that removes them; they are still there. When
the node rejoins, the next run's probe of it removes them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_reaper import INSTANCE, Driver, _wait_for
from two_nodes import RAY_ENV, SecondEngine, TwoNodeCluster, cluster_on, load_instance

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: holds the head's only box slot until a file appears, so the row must start on the second node
HOLDER = """
import pathlib, sys, time
import ray
ray.init(address=sys.argv[1])
hold = ray.remote(num_cpus=0, resources={"docker": 1, "head": 1})(type("Hold", (), {"ping": lambda self: 1}))
actor = hold.remote()
ray.get(actor.ping.remote())
print("holding", flush=True)
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.5)
"""


@pytest.fixture
def cluster(instance_engine: SecondEngine) -> Iterator[tuple[TwoNodeCluster, SecondEngine]]:
    """A head with one box slot (which HOLDER takes) and a second node with one, on the session's second engine."""
    load_instance(instance_engine, INSTANCE)
    with cluster_on(instance_engine, cpus=2, docker=1, head={"docker": 1, "head": 1}) as nodes:
        yield nodes, instance_engine


def _boxes(engine: SecondEngine, run_id: str) -> list[str]:
    return engine.docker("ps", "-aq", "--filter", f"label=pinpoint.run={run_id}").stdout.split()


def _kill_reapers_of(engine: SecondEngine) -> None:
    """SIGKILL the reapers that prune the second engine (first: they would prune as soon as the node's workers die)."""
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "pinpoint.environments.reaper" in (proc.info["cmdline"] or []) and \
                    proc.environ().get("DOCKER_HOST") == engine.host:
                proc.kill()


def test_a_node_lost_for_good_is_named_with_the_prune_command_and_reaped_when_it_rejoins(cluster, tmp_path) -> None:
    nodes, engine = cluster
    release = tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, nodes.address, str(release)], env=nodes._env(),
                              stdout=subprocess.PIPE, text=True)
    argv = ["eval", "--gold", "-i", INSTANCE, "--backend", "ray", "--address", nodes.address, "-o",
            str(tmp_path / "runs")]
    try:
        assert holder.stdout.readline().strip() == "holding"
        driver = Driver(argv, tmp_path / "one", env=RAY_ENV)
        try:
            run_id = driver.run_id()
            _wait_for(lambda: _boxes(engine, run_id) or driver.proc.poll() is not None, 300, "no box on node 2")
            _kill_reapers_of(engine)  # the whole machine dies: its reapers with its Ray processes
            nodes.kill_second()
            left = _boxes(engine, run_id)
            assert left, "the lost node's box went with it"
            release.touch()
            assert driver.proc.wait(timeout=900) == 0, driver.err.read_text()[-3000:]
        finally:
            driver.close()
        err = driver.err.read_text()
        assert f"{INSTANCE}: its worker was lost; graded again (2 attempts)" in err
        [line] = [line for line in err.splitlines() if "did not come back" in line]
        assert f"its boxes of run {run_id}" in line
        assert f"`DOCKER_HOST={engine.host} pinpoint env prune --label {run_id}`" in line
        [summary] = (tmp_path / "runs").glob("*/summary.json")
        assert json.loads(summary.read_text())["ids"]["resolved"] == [INSTANCE]
        assert _boxes(engine, run_id) == left
        nodes.start_second()  # the node rejoins; the next run on the cluster probes it
        again = Driver(argv, tmp_path / "two", env=RAY_ENV)
        try:
            assert again.proc.wait(timeout=600) == 0, again.err.read_text()[-3000:]
        finally:
            again.close()
        assert not _boxes(engine, run_id), "the rejoined node kept the lost run's box"
    finally:
        release.touch()
        holder.wait(timeout=60)
        Path(release).unlink(missing_ok=True)
