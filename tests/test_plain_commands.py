"""The command server runs a plain command (no shell syntax, no builtin) without bash: same output, exit code and
environment as through `bash -c`, and anything bash would treat differently still goes through bash."""

from __future__ import annotations

import pytest
from pinpoint.environments.container_server import plain_argv
from pinpoint.environments.docker_runtime import DockerRuntime


@pytest.mark.parametrize("cmd, argv", [
    ("ls -la src", ["ls", "-la", "src"]),
    ("python -m pytest tests/test_x.py --tb=short -q", ["python", "-m", "pytest", "tests/test_x.py", "--tb=short", "-q"]),
    ("  git   status ", ["git", "status"]),
    ("true", ["true"]),
    ("env A=1 printenv A", ["env", "A=1", "printenv", "A"]),
])
def test_plain_commands_split_as_bash_would(cmd, argv):
    assert plain_argv(cmd, {"PATH": "/usr/bin"}) == argv


@pytest.mark.parametrize("cmd", [
    "ls *.py", "echo hi", "cd src", "A=1 env", "ls | wc", "ls > out", "ls; ls", "ls && ls", "cat 'a b'", 'cat "$HOME"',
    "ls ~", "ls # comment", "ls\nls", "ls\tsrc", "ls {a,b}", "true --help", "time ls", "exec ls", "ls $(pwd)", "", " ",
    "if", "export A=1", "source x", ". x", "[ -f x ]",
])
def test_shell_syntax_and_builtins_go_through_bash(cmd):
    assert plain_argv(cmd, {"PATH": "/usr/bin"}) is None


@pytest.mark.parametrize("hook", ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "BASH_FUNC_ls%%"])
def test_an_environment_that_makes_bash_run_code_goes_through_bash(hook):
    assert plain_argv("ls", {"PATH": "/usr/bin", hook: "x"}) is None


@pytest.mark.docker
def test_plain_and_bash_commands_agree_in_a_box(requests_image):
    """Each plain command gives what the same command gives through bash (`bash -c CMD`, itself a plain command
    whose bash execs CMD): output, exit code, and the environment the program sees."""
    with DockerRuntime(requests_image) as rt:
        rt.run("printf 'echo from-script\\n' > /tmp/noshebang && chmod +x /tmp/noshebang && mkdir -p /tmp/d")
        for cmd in ["env", "ls -a /testbed", "ls /nonexistent", "false", "true", "python -c pass", "nosuchprogram x",
                    "/tmp/noshebang", "/tmp/d", "git status --short", "printenv PWD"]:
            plain, bashed = rt.run(cmd), rt.run(f"bash -c '{cmd}'")
            assert (plain.exit_code, sorted(plain.output.splitlines())) == (
                bashed.exit_code, sorted(bashed.output.splitlines())), cmd
        assert rt.run("printenv PWD").output.strip() == rt.workdir
        assert rt.run("nosuchprogram").exit_code == 127
