"""DockerRuntime, the image builder and prune, on real containers of a real repository image (psf/requests)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import time
import uuid

import docker
import pytest
from pinpoint.cli import main as pinpoint
from pinpoint.environments import images
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.images import (
    BuildError,
    UnsupportedPythonVersion,
    commit_build_step,
    ensure_base_image,
)
from pinpoint.environments.labels import MANAGED_LABEL, PID_LABEL, RUN_LABEL, USER_LABEL, prune_containers
from pinpoint.environments.runtime import TIMEOUT_MARKER, RuntimeBroken, RuntimeSettings

pytestmark = pytest.mark.docker
#: where the editable install points (the image installs requests without its dependencies: built offline)
FIND_REQUESTS = "python -c 'import importlib.util as u; print(u.find_spec(\"requests\").origin)'"


@pytest.fixture(params=["server", "exec"])
def rt(request, requests_image):
    """A runtime on each command channel: the in-container server (default) and the docker-exec fallback."""
    with DockerRuntime(requests_image, settings=RuntimeSettings(mem_limit="1g", pids_limit=256, channel=request.param)) as runtime:
        assert runtime.channel == request.param
        yield runtime


def gone_in_container(runtime: DockerRuntime, pids: list[str], within_s: float = 10.0) -> bool:
    """True once none of `pids` runs in the container (reaped, or a zombie); polls since SIGKILL is asynchronous."""
    check = " ".join(f"$(grep -s '^State' /proc/{p}/status | grep -v zombie)" for p in pids)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if runtime.run(f"echo {check}").output.strip() == "":
            return True
        time.sleep(0.1)
    return False


def test_container_is_limited_labelled_and_offline(rt, requests_commit):
    config = rt.container.attrs["HostConfig"]
    assert config["NetworkMode"] == "none"
    assert config["Memory"] == 1024**3 and config["NanoCpus"] == 10**9 and config["PidsLimit"] == 256
    assert rt.container.labels[MANAGED_LABEL] == "1"
    assert rt.run("ls /sys/class/net").output.split() == ["lo"]
    assert rt.base_commit == requests_commit
    result = rt.run(f"echo out; echo err >&2; {FIND_REQUESTS}; exit 4")
    assert result.exit_code == 4
    assert "out" in result.output and "err" in result.output and "/testbed/requests/__init__.py" in result.output


CONNECT = """python3 -c "
import socket
for host in ('10.255.255.1', '8.8.8.8'):
    try:
        socket.create_connection((host, 80), timeout=1)
    except OSError as exc:
        print(host, 'timeout' if isinstance(exc, socket.timeout) else type(exc).__name__)
try:
    socket.getaddrinfo('httpbin.org', 80)
except OSError as exc:
    print('lookup', type(exc).__name__)
" """


def test_offline_container_can_make_private_addresses_time_out_like_the_internet(requests_image):
    """requests' connect-timeout tests expect 10.255.255.1 to hang; offline it must not fail at once instead."""
    with DockerRuntime(requests_image) as plain:
        assert "10.255.255.1 OSError" in plain.run(CONNECT).output  # no route: fails at once
    with DockerRuntime(requests_image, private_addresses_hang=True) as firewalled:
        out = firewalled.run(CONNECT).output
        assert "10.255.255.1 timeout" in out  # the connect hung until its timeout
        assert "8.8.8.8 OSError" in out and "lookup gaierror" in out  # still offline, lookups fail
        assert firewalled.run("ls /sys/class/net").output.split() == ["lo"]


def test_timeout_returns_partial_output_and_kills_forked_children(rt):
    result = rt.run("echo before; sleep 300 & echo $! > /tmp/c.pid; (sleep 300; echo x) & echo $! >> /tmp/c.pid;"
                    " sleep 300", timeout=2)
    assert result.timed_out and result.exit_code is None
    assert result.output.startswith("before") and TIMEOUT_MARKER.format(seconds=2) in result.output
    assert gone_in_container(rt, rt.read_text("/tmp/c.pid").split())
    assert rt.run("echo still usable").output == "still usable\n"


def test_background_children_do_not_outlive_a_finished_command(rt):
    assert rt.run("sleep 300 & echo $! > /tmp/c.pid; echo done", timeout=30).ok
    assert gone_in_container(rt, rt.read_text("/tmp/c.pid").split())


def test_files_are_binary_safe_and_keep_their_mode(rt):
    blob = bytes(range(256)) * 64
    rt.write_file("new/dir/blob.bin", blob)
    assert rt.read_file("new/dir/blob.bin") == blob
    rt.write_file("latin1.txt", "café".encode("latin-1"))
    assert rt.read_file("/testbed/latin1.txt") == b"caf\xe9" and rt.read_text("latin1.txt") == "caf\ufffd"
    rt.run("printf '#!/bin/sh\\necho one\\n' > tool.sh && chmod 755 tool.sh")
    rt.write_file("tool.sh", "#!/bin/sh\necho two\n")
    assert rt.run("./tool.sh").output == "two\n"
    with pytest.raises(FileNotFoundError):
        rt.read_file("no/such.py")
    with pytest.raises(IsADirectoryError):
        rt.read_file("requests")


def test_diff_has_new_and_binary_files_but_not_install_artefacts(rt):
    assert rt.run("test -d requests.egg-info").ok  # the editable install's artefact, present at the base state
    rt.write_file("requests/__version__.py", rt.read_text("requests/__version__.py").replace("2.27.0", "9.9.9"))
    rt.write_file("requests/brand_new.py", "Y = 2\n")
    rt.write_file("tests/data.bin", b"\x00\xff" * 50)
    patch = rt.diff()
    assert "+__version__ = '9.9.9'" in patch and "+Y = 2" in patch and "GIT binary patch" in patch
    assert "egg-info" not in patch
    assert rt.run("git diff --cached --name-only").output == ""


def test_reset_restores_tree_keeps_install_and_removes_agent_files(rt):
    before = rt.run("git status --porcelain --ignored").output
    rt.write_file("requests/api.py", "broken = True\n")
    rt.write_file("requests/agent_new.py", "new\n")
    rt.run("mkdir -p build && touch build/agent.o && rm setup.py && python -m compileall -q requests")
    rt.reset()
    assert rt.diff() == ""
    assert rt.run("git status --porcelain --ignored").output == before
    assert rt.run(FIND_REQUESTS).output == "/testbed/requests/__init__.py\n"  # the editable install still resolves


def test_reset_brings_back_deleted_install_artefacts(rt):
    """In place from pristine copies (server channel) or by recreating the container (exec channel)."""
    rt.run("rm -rf requests.egg-info && git -c user.name=a -c user.email=a@b commit -qam wip --allow-empty")
    rt.reset()
    assert rt.run("test -d requests.egg-info").ok
    assert rt.run(FIND_REQUESTS).output == "/testbed/requests/__init__.py\n"
    assert rt.run("git rev-parse HEAD").output.strip() == rt.base_commit and rt.diff() == ""


def test_container_killed_from_outside_is_a_clear_error_and_reset_recovers(rt, docker_client):
    rt.write_file("requests/api.py", "edited\n")
    docker_client.containers.get(rt.container.id).kill()
    with pytest.raises(RuntimeBroken, match="reset"):
        rt.run("true")
    rt.reset()
    assert rt.run("echo back").output == "back\n"
    assert rt.diff() == ""


def test_a_runtime_dropped_without_close_still_removes_its_container(requests_image, docker_client):
    runtime = DockerRuntime(requests_image)
    cid = runtime.container.id
    del runtime
    gc.collect()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(cid)


def test_close_is_idempotent(requests_image, docker_client):
    runtime = DockerRuntime(requests_image)
    cid = runtime.container.id
    runtime.close()
    runtime.close()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(cid)
    with pytest.raises(RuntimeBroken, match="closed"):
        runtime.run("true")


def test_prune_removes_labelled_containers_left_by_a_crashed_run(docker_client, base_image_311):
    crashed_run = uuid.uuid4().hex[:12]
    left = [docker_client.containers.run(base_image_311, ["sleep", "infinity"], detach=True, network_mode="none",
                                         labels={MANAGED_LABEL: "1", RUN_LABEL: crashed_run}) for _ in range(2)]
    other = docker_client.containers.run(base_image_311, ["sleep", "infinity"], detach=True, network_mode="none",
                                         labels={"not.pinpoint": "1"})
    try:
        assert prune_containers(docker_client, crashed_run) == 1 + 1
        for container in left:
            with pytest.raises(docker.errors.NotFound):
                docker_client.containers.get(container.id)
        assert docker_client.containers.get(other.id).status == "running"
        stray = docker_client.containers.run(base_image_311, ["sleep", "infinity"], detach=True,
                                             labels={MANAGED_LABEL: "1", RUN_LABEL: crashed_run})
        assert pinpoint(["env", "prune", "--label", crashed_run]) == 0
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(stray.id)
    finally:
        other.remove(force=True)


def test_plain_prune_removes_only_your_ended_runs_boxes(docker_client, base_image_311, capsys):
    """`env prune` on a shared engine: your boxes whose process is gone go; your live run's box and another user's
    box stay; `--all` (here with the run id, to leave other tests alone) takes the rest."""
    run = uuid.uuid4().hex[:12]
    dead_pid = str(_a_dead_pid())
    me, other_user = str(os.getuid()), str(os.getuid() + 4242)
    boxes = {name: docker_client.containers.run(
        base_image_311, ["sleep", "infinity"], detach=True, network_mode="none",
        labels={MANAGED_LABEL: "1", RUN_LABEL: run, PID_LABEL: pid, USER_LABEL: user})
        for name, (pid, user) in {"mine, ended": (dead_pid, me), "mine, live": (str(os.getpid()), me),
                                  "another user's": (dead_pid, other_user)}.items()}
    try:
        assert pinpoint(["env", "prune"]) == 0
        left = {name for name, box in boxes.items() if _exists(docker_client, box.id)}
        assert left == {"mine, live", "another user's"}
        assert pinpoint(["env", "prune", "--all", "--label", run]) == 0
        assert not any(_exists(docker_client, box.id) for box in boxes.values())
    finally:
        for box in boxes.values():
            with contextlib.suppress(docker.errors.NotFound):
                box.remove(force=True)


def _a_dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _exists(client, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def test_base_image_is_real_cached_and_labelled(docker_client, base_image_311, monkeypatch):
    image = docker_client.images.get(base_image_311)
    assert image.labels["pinpoint.python"] == "3.11"
    out = docker_client.containers.run(base_image_311, ["bash", "-c", "python3 --version; git --version"], remove=True)
    assert b"Python 3.11" in out and b"git version" in out
    monkeypatch.setattr(images, "_debootstrap_image", lambda *a: pytest.fail("cached image rebuilt"))
    monkeypatch.setattr(images, "_pull_slim", lambda *a: pytest.fail("cached image pulled"))
    assert ensure_base_image("3.11") == base_image_311


def test_python_without_a_suite_is_refused_unless_nearest_is_allowed(base_image_311, monkeypatch):
    monkeypatch.setenv("PINPOINT_NO_PULL", "1")  # the no-registry situation, even where a registry answers
    with pytest.raises(UnsupportedPythonVersion, match="allow_nearest"):
        ensure_base_image("3.10")
    monkeypatch.setattr(images, "DEBIAN_SUITES", {"3.11": "bookworm"})  # nearest = the cached 3.11 image
    assert ensure_base_image("3.10", allow_nearest=True) == base_image_311


def test_build_step_commits_labels_and_files_but_not_step_secrets(docker_client, base_image_311, tmp_path):
    (tmp_path / "in.txt").write_text("copied in\n")
    tag = f"pinpoint/test-step:{uuid.uuid4().hex[:8]}"
    try:
        commit_build_step(base_image_311, "cp /opt/in.txt /opt/out.txt; test -s \"$PIP_CERT\"; echo $STEP_ONLY > /opt/env",
                          tag, network=False, copy_in={str(tmp_path / "in.txt"): "/opt/in.txt"},
                          env={"STEP_ONLY": "yes"}, labels={"pinpoint.test": "1"})
        image = docker_client.images.get(tag)
        assert image.labels["pinpoint.test"] == "1"
        assert image.labels[MANAGED_LABEL] != "1"  # containers started from it are not a build's leftovers
        assert not any(e.startswith(("STEP_ONLY", "PIP_CERT")) for e in image.attrs["Config"]["Env"])
        out = docker_client.containers.run(tag, ["bash", "-c", "cat /opt/out.txt /opt/env; ls /tmp"], remove=True)
        assert out == b"copied in\nyes\n"
    finally:
        docker_client.images.remove(tag, force=True)


def test_failed_build_step_raises_with_the_log_tail(base_image_311):
    with pytest.raises(BuildError, match="exit 7") as info:
        commit_build_step(base_image_311, "echo step-output-here; exit 7", "pinpoint/test-step:never", network=False)
    assert "step-output-here" in info.value.log_tail


TREE_FINGERPRINT = ("{ find . -path ./.git -prune -o -printf '%p %y %m %s\\n' | sort;"
                    " find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 md5sum; } | md5sum")


def test_reset_undoes_type_changes_modes_links_and_nested_files(rt):
    before = rt.run(TREE_FINGERPRINT).output
    damage = ("rm requests/api.py && mkdir -p requests/api.py/sub && touch requests/api.py/sub/x"
              " && rm -rf docs && echo x > docs && ln -s /etc/passwd newlink && chmod 755 setup.py"
              " && mkdir -p a/b/c && touch a/b/c/d && echo >> requests/models.py && sed -i 's/a/b/' README.md")
    assert rt.run(damage).ok
    assert rt.run(TREE_FINGERPRINT).output != before
    rt.reset()
    assert rt.run(TREE_FINGERPRINT).output == before
    assert rt.diff() == "" and rt.run("git status --porcelain").output == ""


def test_bench_env_prints_its_figures_as_json(requests_image, capsys):
    assert pinpoint(["bench", "env", "--repeats", "2", "--concurrency", "2", "--image", requests_image,
                     "--json"]) == 0
    printed = capsys.readouterr()
    figures = json.loads(printed.out)
    assert "reset() ms p50" in printed.err  # the table, for whoever watches
    assert figures["reset_incorrect"] == 0 and figures["concurrent_failures"] == 0
    for key in ("reset_ms_p50", "baseline_fresh_container_reset_ms_p50", "reset_speedup_p50",
                "command_round_trip_ms_p95", "shell_command_round_trip_ms_p50", "container_start_ms_p50",
                "concurrent_wall_ms"):
        assert figures[key] > 0


def test_bad_bench_arguments_are_refused(capsys):
    assert pinpoint(["bench", "env", "--repeats", "1"]) == 2
    assert "--repeats" in capsys.readouterr().err


def test_image_without_python_falls_back_to_docker_exec(base_image_311):
    tag = "pinpoint/test-nopython:1"
    if not images.image_exists(tag):
        commit_build_step(base_image_311, "rm -f /usr/bin/python3*; mkdir -p /testbed && cd /testbed && git init -q"
                          " && echo a > a.txt && git add a.txt && git -c user.name=a -c user.email=a@b commit -qm a",
                          tag, network=False)
    with DockerRuntime(tag) as runtime:
        assert runtime.channel == "exec"
        runtime.write_file("a.txt", "b\n")
        assert "+b" in runtime.diff()
        runtime.reset()
        assert runtime.read_file("a.txt") == b"a\n"


@pytest.fixture(scope="module")
def image_with_untracked_file(requests_image):
    """The requests image plus a file git does not know and does not ignore, present at the base state."""
    tag = f"pinpoint/test-untracked:{requests_image.rsplit(':', 1)[1][:40]}"
    if not images.image_exists(tag):
        commit_build_step(requests_image, "echo generated > /testbed/GENERATED_AT_BUILD.txt", tag, network=False)
    return tag


@pytest.mark.parametrize("channel", ["server", "exec"])
def test_untracked_files_of_the_base_state_are_neither_diffed_nor_reset(image_with_untracked_file, channel):
    with DockerRuntime(image_with_untracked_file, settings=RuntimeSettings(channel=channel)) as runtime:
        assert runtime.diff() == ""
        runtime.write_file("GENERATED_AT_BUILD.txt", "changed by the agent\n")
        runtime.write_file("agent.txt", "new\n")
        assert "agent.txt" in runtime.diff() and "GENERATED_AT_BUILD" not in runtime.diff()
        runtime.reset()
        assert runtime.run("ls agent.txt").exit_code != 0
        # kept either way; only the server channel has a pristine copy to restore its content from
        restored = "generated\n" if channel == "server" else "changed by the agent\n"
        assert runtime.read_text("GENERATED_AT_BUILD.txt") == restored
        assert runtime.diff() == ""
