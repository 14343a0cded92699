"""`--registry HOST/PREFIX`: images pushed after they are built, pulled before they would be built.

The registry is a real one: Debian's `docker-registry` (the CNCF distribution registry), run by the fixture on
127.0.0.1 with its own storage folder and stopped by pid afterwards (localhost registries need no TLS for dockerd).
The main engine pushes what it holds (`images build --registry`); then on a two-node Ray cluster whose second node
drives a second, empty Docker engine (tests/two_nodes.py), `images build --all-nodes --backend ray` builds on each
node: the head has every layer, the second node pulls them instead of running a build step, and the pulled
instance image runs there with the image ids of the main engine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from cli_lines import said
from pinpoint.environments.errors import UsageError
from pinpoint.environments.registry import registry_of
from two_nodes import RAY_ENV, EngineUnavailable, SecondEngine, TwoNodeCluster, assert_nothing_left

INSTANCE = "psf__requests-2931"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    """A distribution registry on a free local port, with its own storage; `HOST:PORT/PREFIX` to push to."""
    binary = shutil.which("docker-registry") or shutil.which("registry")
    if binary is None:
        pytest.skip("no registry binary here (apt-get install docker-registry: scripts/setup.sh)")
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    (root / "config.yml").write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                                     f"    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    with open(root / "registry.log", "wb") as log:
        process = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the registry did not start: {(root / 'registry.log').read_text()[-1000:]}")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}/pp-{uuid.uuid4().hex[:6]}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _build(registry: str, cache: Path, docker_host: str | None = None) -> subprocess.CompletedProcess:
    """`pinpoint images build --instances INSTANCE --registry REGISTRY` against the main engine or `docker_host`."""
    env = {**os.environ, "PINPOINT_CACHE": str(cache), "PINPOINT_NO_PULL": "1"}
    env.pop("DOCKER_HOST", None)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return subprocess.run([sys.executable, "-m", "pinpoint", "images", "build", "--instance", INSTANCE,
                           "--registry", registry], env=env, capture_output=True, text=True, timeout=600)


def _plan() -> tuple[str, str, str]:
    """(base, env, instance) tags of INSTANCE, built on the main engine by the caching builder if missing."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image

    plan = build_instance_image(load_instances(ids=[INSTANCE])[0]).plan
    return plan.base_tag, plan.env_tag, plan.instance_tag


@pytest.mark.parametrize("value", ["127.0.0.1:5000/pinpoint", "registry.example.com/team/pp/", "localhost/x",
                                   "127.0.0.1:5000"])
def test_a_registry_is_a_host_docker_reads_as_one_and_an_optional_prefix(value: str) -> None:
    assert registry_of(value) == value.rstrip("/")


@pytest.mark.parametrize("value", ["pinpoint/images", "http://127.0.0.1:5000/pp", "127.0.0.1:5000/Upper",
                                   "host.example.com/a b"])
def test_a_registry_docker_would_not_read_as_one_is_one_line(value: str) -> None:
    with pytest.raises(UsageError) as caught:
        registry_of(value)
    assert "--registry" in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_registry_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _build("pinpoint/images", tmp_path)
    assert done.returncode == 2
    assert len(said(done.stderr.strip())) == 1 and "HOST[:PORT]/PREFIX" in done.stderr


@pytest.mark.docker
def test_a_registry_that_does_not_answer_is_one_line_and_the_build_goes_on_locally(tmp_path: Path) -> None:
    _plan()
    done = _build(f"127.0.0.1:{_free_port()}/pp", tmp_path)
    assert done.returncode == 0, done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "does not answer" in line]
    assert len(said) == 1 and "keeping images locally" in said[0]
    assert "built 1/1" in done.stdout


def _image_id(tag: str, engine: SecondEngine | None = None) -> str:
    if engine is not None:
        return engine.docker("image", "inspect", "-f", "{{.Id}}", tag).stdout.strip()
    return subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True,
                          check=True, env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}).stdout.strip()


@pytest.mark.docker
@pytest.mark.slow
def test_images_build_on_every_node_of_a_cluster_pulls_where_the_layers_are_missing(registry: str,
                                                                                    tmp_path: Path) -> None:
    base, env, instance = _plan()
    assert _build(registry, tmp_path / "cache1").returncode == 0  # the main engine pushes what it holds
    try:
        engine = SecondEngine().start(subnet="10.215.0.1/24")
    except EngineUnavailable as exc:
        pytest.skip(f"no second Docker engine here: {exc}")
    cluster = TwoNodeCluster(engine.host, cpus=2, docker=1)
    try:
        cluster.start()
        assert engine.docker("images", "-q").stdout.strip() == ""
        since = str(int(time.time()))
        env_vars = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "DOCKER_HOST")},
                    **RAY_ENV, "PINPOINT_CACHE": str(tmp_path / "cache2"), "PINPOINT_NO_PULL": "1"}
        done = subprocess.run([sys.executable, "-m", "pinpoint", "images", "build", "--instance", INSTANCE,
                               "--registry", registry, "--backend", "ray", "--address", cluster.address,
                               "--all-nodes"], cwd=tmp_path, env=env_vars, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "on each of 2 node(s)" in done.stderr
        lines = sorted(line for line in done.stdout.splitlines() if line.startswith(f"{INSTANCE} on node "))
        assert len(lines) == 2, done.stdout
        assert sorted(line.rpartition("(")[2] for line in lines) == ["env cached, reference cached, instance cached)",
                                                                      "env pulled, reference pulled, instance pulled)"]
        assert "built 2/2" in done.stdout
        creates = engine.docker("events", "--since", since, "--until", str(int(time.time()) + 1), "--filter",
                                "type=container", "--filter", "event=create", "--format", "{{.Actor.ID}}")
        assert creates.stdout.strip() == "", "a build step ran on the node that should have pulled"
        for tag in (base, env, instance):  # the registry keeps the image config, so the ids agree
            assert _image_id(tag, engine) == _image_id(tag)
        ran = engine.docker("run", "--rm", "--network", "none", instance, "python", "-c",
                            "import os, requests; print(os.getcwd(), requests.__version__)", check=False)
        assert ran.returncode == 0 and ran.stdout.startswith("/testbed "), ran.stderr
    finally:
        cluster.stop()
        engine.stop()
    assert_nothing_left(cluster, engine)


@pytest.mark.docker
def test_the_gzipped_layer_bytes_are_what_the_registry_stores(registry: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`images list --layers --compressed` counts a layer as a registry does: the pushed blob's size."""
    import json

    from pinpoint.swebench_eval.images import instance_layers
    from pinpoint.swebench_eval.layer_gzip import diff_ids, gzip_bytes, gzip_means

    monkeypatch.setenv("PINPOINT_CACHE", str(tmp_path / "measured"))  # where the figures are kept
    _base, env, instance = _plan()
    assert _build(registry, tmp_path / "cache").returncode == 0  # pushes the env and instance images
    host, _, prefix = registry.partition("/")
    repository, _, tag = instance.partition(":")
    request = urllib.request.Request(f"http://{host}/v2/{prefix}/{repository}/manifests/{tag}", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        pushed = [layer["size"] for layer in json.load(answer)["layers"]]
    layers = diff_ids(instance)
    own = layers[len(diff_ids(env)):]  # the reference and instance layers
    ours = gzip_bytes(instance, set(own))
    assert len(pushed) == len(layers)
    for index, diff_id in enumerate(own, start=len(layers) - len(own)):
        assert abs(ours[diff_id] - pushed[index]) <= 0.03 * pushed[index] + 1024, (ours[diff_id], pushed[index])
    # the per-repository means `images list --layers --compressed` prints, on this one instance
    (means,) = gzip_means([row for row in instance_layers() if row["tag"] == instance])
    assert means.repo == "psf/requests" and means.instances == 1
    assert abs(means.own - pushed[-1]) <= 0.03 * pushed[-1] + 1024
    assert abs(means.over_env - sum(pushed[len(layers) - len(own):])) <= 0.03 * sum(pushed) + 1024
    assert means.amortized <= means.over_env  # other built rows on its reference share that layer
    assert means.with_env > means.amortized  # the env layers over the base come on top
