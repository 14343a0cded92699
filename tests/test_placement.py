"""`run_on_workers` (what `rl rollout --backend ray` runs on) spreads its actors over the nodes that have room,
instead of packing them on the node the driver joined: a real Ray cluster of two nodes on this machine (two raylets,
`ray.cluster_utils.Cluster`), each offering room for several boxes."""

from __future__ import annotations

import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial]


#: the driver, in a fresh process as the CLI's is (an earlier `ray.init` in this test process leaves Ray's
#: driver state behind: a later session's actors were cancelled as unreferenced); prints each worker's node
DRIVER = """
import json, sys
from pinpoint.environments.executor import Item, Needs, RayExecutor

class WhereAmI:
    def run(self, key):
        import ray
        return ray.get_runtime_context().get_node_id()

with RayExecutor(sys.argv[1]) as executor:
    items = [Item(f"task-{i}", (f"task-{i}",), group=f"task-{i}") for i in range(2)]
    outcomes = list(executor.run_on_workers(WhereAmI, (), items, workers=2, needs=Needs(cpus=0, docker=1)))
    print(json.dumps({"nodes": len(executor.nodes), "ran_on": [o.value for o in outcomes],
                      "errors": [str(o.error) for o in outcomes if o.error is not None]}))
"""


def _nap(seconds: float) -> None:
    import time

    time.sleep(seconds)


def test_two_workers_with_one_box_each_land_on_two_nodes(monkeypatch) -> None:
    import json
    import subprocess

    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # for the nodes the cluster starts and the driver alike
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"docker": 4}})
    try:
        cluster.add_node(num_cpus=2, resources={"docker": 4})
        cluster.wait_for_nodes()
        done = subprocess.run([sys.executable, "-c", DRIVER, cluster.address], capture_output=True, text=True,
                              timeout=600)
    finally:
        cluster.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["nodes"] == 2 and not result["errors"], result
    assert len(set(result["ran_on"])) == 2, "both workers ran on one node"


def test_a_lost_node_leaves_no_raylet_message_in_the_commands_output(monkeypatch, capfd) -> None:
    """A node killed under a running task: Ray's driver would print the dead raylet's last log lines and each
    retry in ANSI colour on stdout; with the executor they stay out of the output."""
    import time

    import ray
    from pinpoint.environments.executor import RayExecutor
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        node = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with RayExecutor(cluster.address) as executor:
            other = next(n for n in executor.nodes if n != ray.get_runtime_context().get_node_id())
            nap = ray.remote(num_cpus=1, max_retries=3)(_nap)
            ref = nap.options(scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=True)).remote(15)
            time.sleep(5)
            cluster.remove_node(node, allow_graceful=False)
            ray.get(ref, timeout=120)  # retried on the head
            time.sleep(5)  # the error listener's messages arrive after the node is marked dead
    finally:
        ray.shutdown()
        cluster.shutdown()
    out, err = capfd.readouterr()
    assert "(raylet)" not in out + err and "\x1b[" not in out + err, (out + err)[-2000:]


def test_a_ray_client_address_is_one_line(tmp_path) -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "pinpoint.cli", "eval", "--gold", "-i", "pallets__flask-5014",
                           "--backend", "ray", "--address", "ray://head:10001", "-o", str(tmp_path / "runs")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if not line.startswith("run id: ")]
    assert "a Ray Client address, which pinpoint does not use" in line and "HOST:6379" in line
