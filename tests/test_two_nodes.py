"""Two Ray nodes on one machine, each with its own Docker engine: an eval's boxes stay on their node's engine.

The head node uses this machine's engine; the second node is `ray start --address` with DOCKER_HOST pointing at a
second dockerd (own data root, exec root, pidfile, socket and bridge: tests/two_nodes.py). Each node offers one
`docker` slot, so two gold evaluations submitted at once must run one per node. Which engine ran which box is read
from the engines themselves (`docker events` streamed during the run: each engine's container creates with this
run's label). The second engine is the session's (`two_nodes.instance_engine`): it starts empty and the instance
images are moved to it once with `docker save | docker load` (the same image id on both: checked). Afterwards no
process of the cluster is left; at the session's end the second dockerd is stopped, its bridge and folders gone,
and the main engine's docker0 still there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from two_nodes import INSTANCES, RAY_ENV, cluster_on, creates_on

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_each_nodes_boxes_run_on_its_own_engine(tmp_path: Path, instance_engine) -> None:
    engine = instance_engine
    images = {i: instance for i, (*_, instance) in engine.tags.items()}
    assert all(main == second for main, second in engine.loaded.values()), engine.loaded  # save | load keeps ids
    run_id = uuid.uuid4().hex[:12]
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "DOCKER_HOST")},
           **RAY_ENV, "PINPOINT_RUN_ID": run_id}
    with cluster_on(engine, cpus=4, docker=1) as cluster, creates_on((None, engine.host), run_id, tmp_path) as watch:
        done = subprocess.run([sys.executable, "-m", "pinpoint.cli", "eval", "--gold", "--instance", *INSTANCES,
                               "--output", str(tmp_path / "runs"), "--backend", "ray", "--address",
                               cluster.address], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        main, second = (w.stop() for w in watch)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "2 node(s)" in " ".join(done.stderr.split())
    outcomes = {i: json.loads((tmp_path / "runs" / "gold" / "gold" / "eval" / i / "report.json").read_text())[i]
                for i in INSTANCES}
    assert outcomes["psf__requests-2931"]["resolved"] is True
    # graded on whichever node, not an infrastructure failure (1921's gold needs httpbin: unresolved offline)
    assert {v["pinpoint"]["outcome"] for v in outcomes.values()} <= {"resolved", "unresolved"}
    assert len(main) >= 1 and len(second) >= 1, (main, second)
    assert main | second == set(images.values())
    assert not main & second, (main, second)  # each instance's boxes on one engine, not both
