"""docs/cluster.md's commands, run as written: every block marked `<!-- step: NAME -->` runs in `bash`, after the
page's own `variables` block, with the values set for two nodes on this machine (the head on the main engine, the
"second machine" a Ray node whose DOCKER_HOST is a second dockerd: tests/two_nodes.py). The page's commands bring
the cluster up, grade an instance on it, and tear it down; afterwards nothing of the cluster runs, its folder is
gone, and the main engine's containers and `docker0` are untouched. The images are moved to the second engine with
`docker save | docker load` (the page's third way; its registry commands are tested by tests/test_registry.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from two_nodes import EngineUnavailable, SecondEngine, _processes_mentioning, assert_engine_gone, image_tags

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOC = Path(__file__).resolve().parents[1] / "docs" / "cluster.md"
INSTANCE = "pallets__flask-5014"


def doc_steps() -> dict[str, str]:
    """Each `<!-- step: NAME -->` block of the page, by name."""
    found = re.findall(r"<!-- step: ([\w-]+) -->\n```sh\n(.*?)```", DOC.read_text(), flags=re.S)
    return dict(found)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Machine:
    """Runs the page's steps in bash as a user of one machine would: the `variables` block, then this layout's
    values, then the step; `docker_host` for the second machine's engine."""

    def __init__(self, steps: dict[str, str], values: dict[str, str], folder: Path, docker_host: str | None = None):
        self.steps, self.values, self.folder = steps, values, folder
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DOCKER_HOST", "PINPOINT_RUN_ID")}
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # pinpoint, ray, python of this venv
        self.env = {**env, **({"DOCKER_HOST": docker_host} if docker_host else {})}

    def run(self, name: str, timeout: float = 600) -> subprocess.CompletedProcess:
        script = self.folder / f"{name}.sh"  # a file: `pkill -f $RAY_TMP/` must not match this bash's command line
        values = "\n".join(f"{key}={value}" for key, value in self.values.items())
        script.write_text(f"set -e\n{self.steps['variables']}\n{values}\n{self.steps[name]}")
        return subprocess.run(["bash", str(script)], cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=timeout)


def test_the_pages_commands_bring_a_two_node_cluster_up_run_on_it_and_tear_it_down(tmp_path) -> None:
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import RUN_LABEL

    steps = doc_steps()
    assert {"variables", "check", "head", "node", "run", "teardown"} <= set(steps)
    tags = image_tags(INSTANCE)
    try:
        engine = SecondEngine().start()
    except EngineUnavailable as exc:
        pytest.skip(f"no second Docker engine here: {exc}")
    ray_tmp = Path(tempfile.mkdtemp(prefix="pp-doc-ray."))  # short: Ray's socket paths live under it
    values = {"HEAD": "127.0.0.1", "PORT": str(_free_port()), "RAY_TMP": str(ray_tmp), "CPUS": "2", "BOXES": "1"}
    head = Machine(steps, values, tmp_path)
    second = Machine(steps, values, tmp_path, docker_host=engine.host)
    main = client()
    bystander = main.containers.run(tags[-1], ["sleep", "900"], detach=True, network_mode="none")
    try:
        for tag in tags:
            engine.load_from_main(tag)
        for machine in (head, second):
            done = machine.run("check")
            assert done.returncode == 0, done.stderr
        for machine, step in ((head, "head"), (second, "node")):
            done = machine.run(step)
            assert done.returncode == 0, done.stdout + done.stderr
        ran = head.run("run")
        assert ran.returncode == 0, ran.stderr[-3000:]
        first = ran.stderr.splitlines()[0]
        assert first.startswith("run id: "), ran.stderr[:500]
        run_id = first.removeprefix("run id: ")
        [summary] = (tmp_path / "runs").glob("*/summary.json")
        assert json.loads(summary.read_text())["resolved_instances"] == 1
        assert not main.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})
        assert not engine.docker("ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}").stdout.split()
        down = head.run("teardown", timeout=120)
        assert down.returncode == 0, down.stderr
        assert not _processes_mentioning(f"{ray_tmp}/") and not ray_tmp.exists()
        bystander.reload()
        assert bystander.status == "running", "the teardown touched the main engine's containers"
    finally:
        for proc in _processes_mentioning(f"{ray_tmp}/"):  # what a failed step left
            with contextlib.suppress(Exception):
                proc.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        with contextlib.suppress(Exception):
            bystander.remove(force=True)
        engine.stop()
    assert_engine_gone(engine)  # the main engine's docker0 included
