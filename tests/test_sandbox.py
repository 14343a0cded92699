"""The hardened sandbox (issue 17): what a command sees from inside, the adversarial suite through
`pinpoint bench sandbox`, and the `runtime.*` fields that set each limit. Real containers of psf/requests.

No test here sends a packet anywhere but loopback: the network attack only lists interfaces and routes.
"""

from __future__ import annotations

import json

import pytest
from pinpoint.agent.config import ConfigError, load_config
from pinpoint.cli import main as pinpoint
from pinpoint.environments.adversarial import ATTACKS, WRITABLE_HOST_PATHS, probe
from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.environments.sandbox import CTL_DIR, SERVER_CAPABILITIES, parse_size

RAW_SOCKET = "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print(\"raw ok\")'"


@pytest.mark.docker
@pytest.mark.parametrize("channel", ["server", "exec"])
def test_a_command_has_no_capability_no_new_privileges_and_no_writable_host_path(requests_image, channel):
    with DockerRuntime(requests_image, settings=RuntimeSettings(channel=channel)) as rt:
        inside = probe(rt)
        assert inside["channel"] == channel
        for flag in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert inside[flag] == "0000000000000000", (flag, inside)
        assert inside["NoNewPrivs"] == "1"
        assert inside["writable_host_paths"] == []
        assert rt.container.attrs["Mounts"] == []  # no host folder at all: the control socket is in a tmpfs
        config = rt.container.attrs["HostConfig"]
        assert config["CapDrop"] == ["ALL"] and "no-new-privileges" in config["SecurityOpt"]
        assert sorted(config["CapAdd"] or []) == (sorted(SERVER_CAPABILITIES) if channel == "server" else [])
        assert rt.disk_bound in ("quota", "watchdog")
        assert rt.run(f"touch {CTL_DIR}/x").exit_code != 0
        assert rt.run("echo 1.2.3.4 evil >> /etc/hosts").exit_code != 0  # a host file the engine mounts
        assert "raw ok" not in rt.run(RAW_SOCKET).output


@pytest.mark.docker
def test_a_named_capability_is_kept_for_commands_and_nothing_else(requests_image):
    with DockerRuntime(requests_image, settings=RuntimeSettings(command_capabilities="NET_RAW")) as rt:
        assert "raw ok" in rt.run(RAW_SOCKET).output
        assert probe(rt)["CapEff"] == f"{1 << 13:016x}"  # CAP_NET_RAW alone
        assert rt.run(WRITABLE_HOST_PATHS).output.split() == []


@pytest.mark.docker
def test_bench_sandbox_contains_every_attack_and_prints_json(requests_image, capsys):
    """The whole suite, as a user runs it: each attack contained, the next reset clean, the host untouched."""
    assert pinpoint(["bench", "sandbox", "--image", requests_image, "--json"]) == 0
    captured = capsys.readouterr()
    figures, printed = json.loads(captured.out), captured.err
    assert figures["tried"] == len(ATTACKS) and {a["attack"] for a in figures["attacks"]} == {a[0] for a in ATTACKS}
    failed = [a for a in figures["attacks"] if not a["ok"]]
    assert failed == [] and figures["contained"] == figures["tried"], failed
    assert f"attacks contained: {len(ATTACKS)} / {len(ATTACKS)}" in printed
    by_name = {a["attack"]: a for a in figures["attacks"]}
    assert by_name["disk filler"]["status"].startswith("stopped: disk limit")
    assert by_name["memory bomb"]["status"].startswith("stopped: memory limit")
    assert by_name["SIGTERM ignorer"]["status"].startswith("timed out")
    assert figures["inside"]["CapEff"] == "0000000000000000" and figures["inside"]["NoNewPrivs"] == "1"


def test_every_limit_is_a_config_field_checked_when_the_config_is_read():
    config = load_config(overrides=["runtime.disk_limit=2g", "runtime.command_capabilities=NET_RAW",
                                    "runtime.disk_check_s=0.5", "runtime.pids_limit=300"])
    box = config.runtime
    assert box.disk_limit == "2g"
    assert box.command_capabilities == "NET_RAW"
    assert box.disk_check_s == 0.5
    assert box.pids_limit == 300
    assert RuntimeSettings().disk_limit == "10g"  # SWE-bench's task metadata pins 10 GB
    assert parse_size("10g") == 10 * 2**30 and parse_size("512m") == 512 * 2**20 and parse_size("1.5G") == 3 * 2**29
    for bad in (["runtime.disk_limit=lots"], ["runtime.command_capabilities=SYS_GOD"], ["runtime.disk_check_s=0"]):
        with pytest.raises(ConfigError):
            load_config(overrides=bad)


@pytest.mark.docker
def test_commands_as_an_unprivileged_user_own_the_tree_and_cannot_touch_the_server(requests_image):
    """runtime.command_user=1000: commands run as that uid with no capability, edit the tree (handed to them at
    start), cannot signal the server (uid 0) nor open its folders; chmod games and recreated files are undone by
    reset() and given back to the user."""
    from pinpoint.environments.adversarial import chmod_chown_games, control_folder, kill_the_server

    with DockerRuntime(requests_image, settings=RuntimeSettings(command_user="1000")) as rt:
        inside = probe(rt)
        assert inside["uid"] == "1000" and inside["CapEff"] == "0000000000000000" and inside["NoNewPrivs"] == "1"
        modes = rt.run("find . -path ./.git -prune -o -printf '%m %U %p\\n' | sort").output
        assert rt.run("touch requests/new.py && echo $HOME").output.strip() == "/tmp/pinpoint-home"
        assert control_folder(rt)[1] and kill_the_server(rt)[1] and rt.run("true").ok
        chmod_chown_games(rt)
        rt.run("rm -f setup.py && git add -A && git commit -qm gone")
        rt.reset()
        assert rt.diff() == "" and rt.run("find . -path ./.git -prune -o -printf '%m %U %p\\n' | sort").output == modes
        assert rt.run("echo again >> setup.py && git status --short").output.strip() == "M setup.py"
