"""LocalRuntime on a real repository (psf/requests): commands, timeouts, files, diff and reset."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest
from pinpoint.environments.local import LocalRuntime
from pinpoint.environments.runtime import TIMEOUT_MARKER, RuntimeBroken


def wait_dead(pid: int, within_s: float = 10.0) -> bool:
    """True once `pid` no longer runs (gone or a zombie); polls because SIGKILL delivery is asynchronous."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_run_returns_exit_code_and_output(local_requests):
    result = local_requests.run("echo out; echo err >&2; exit 3")
    assert result.exit_code == 3 and not result.timed_out and not result.ok
    assert "out" in result.output and "err" in result.output
    assert local_requests.run("git rev-parse HEAD").output.strip() == local_requests.base_commit


def test_timeout_keeps_partial_output_and_marks_it(local_requests):
    result = local_requests.run("echo before; sleep 30; echo never-printed", timeout=1)
    assert result.timed_out and result.exit_code is None and not result.ok
    assert "before" in result.output and "never-printed" not in result.output
    assert TIMEOUT_MARKER.format(seconds=1) in result.output


def test_timeout_kills_forked_children(local_requests):
    result = local_requests.run("sleep 300 & echo $! > child.pid; (sleep 300; echo x) & echo $! >> child.pid; sleep 300",
                                timeout=1)
    assert result.timed_out
    pids = [int(p) for p in local_requests.read_text("child.pid").split()]
    assert len(pids) == 2 and all(wait_dead(pid) for pid in pids)


def test_background_children_do_not_outlive_a_finished_command(local_requests):
    result = local_requests.run("sleep 300 & echo $! > child.pid; echo done", timeout=30)
    assert result.ok and "done" in result.output
    assert wait_dead(int(local_requests.read_text("child.pid")))


def test_binary_and_non_utf8_files_round_trip(local_requests):
    blob = bytes(range(256)) * 4
    local_requests.write_file("data/blob.bin", blob)
    assert local_requests.read_file("data/blob.bin") == blob
    local_requests.write_file("latin1.txt", "café".encode("latin-1"))
    assert local_requests.read_file("latin1.txt") == b"caf\xe9"
    assert local_requests.read_text("latin1.txt") == "caf\ufffd"
    assert "caf\ufffd" in local_requests.run("cat latin1.txt").output
    local_requests.write_file("unicode.txt", "naïve ✓")
    assert local_requests.read_file("unicode.txt") == "naïve ✓".encode()


def test_read_missing_file_raises(local_requests):
    with pytest.raises(FileNotFoundError):
        local_requests.read_file("no/such/file.py")


def test_diff_has_edits_new_and_binary_files_and_leaves_index_alone(local_requests, requests_repo, requests_commit):
    original = local_requests.read_text("requests/__version__.py")
    local_requests.write_file("requests/__version__.py", original.replace("2.27.0", "9.9.9"))
    local_requests.write_file("requests/new_module.py", "X = 1\n")
    local_requests.write_file("tests/fixture.bin", b"\x00\x01\xff" * 10)
    local_requests.run("rm HISTORY.md")
    patch = local_requests.diff()
    assert "+__version__ = '9.9.9'" in patch
    assert "new file mode" in patch and "+X = 1" in patch
    assert "GIT binary patch" in patch
    assert "deleted file mode" in patch
    # the repository's own index is untouched: nothing staged, new files still untracked
    assert local_requests.run("git diff --cached --name-only").output == ""
    assert "?? requests/new_module.py" in local_requests.run("git status --porcelain").output
    # the patch reproduces the same tree on a fresh checkout
    with LocalRuntime(requests_repo, requests_commit) as other:
        other.write_file("model.patch", patch.encode("utf-8", errors="surrogateescape"))
        assert other.run("git apply model.patch && rm model.patch").ok
        assert other.diff() == patch


def test_diff_is_against_the_base_even_after_a_commit(local_requests):
    local_requests.write_file("README.md", "changed\n")
    commit = local_requests.run("git -c user.name=a -c user.email=a@b commit -qam wip && git rev-parse HEAD")
    assert commit.ok and commit.output.strip() != local_requests.base_commit
    assert "+changed" in local_requests.diff()
    local_requests.reset()
    assert local_requests.diff() == ""
    assert local_requests.run("git rev-parse HEAD").output.strip() == local_requests.base_commit


def test_reset_restores_the_base_state(local_requests):
    before = local_requests.run("git status --porcelain --ignored").output
    local_requests.write_file("requests/api.py", "broken\n")
    local_requests.write_file("requests/agent_new.py", "new\n")
    local_requests.write_file("build/lib/artefact.py", "ignored but new\n")  # build/ is in .gitignore
    local_requests.run("rm setup.py && git add requests/api.py")
    local_requests.reset()
    assert local_requests.diff() == ""
    assert local_requests.run("git status --porcelain --ignored").output == before
    assert local_requests.read_text("requests/api.py").startswith("#")


def test_close_is_idempotent_and_later_use_is_a_clear_error(requests_repo, requests_commit):
    runtime = LocalRuntime(requests_repo, requests_commit)
    workdir = runtime.workdir
    runtime.close()
    runtime.close()
    assert not os.path.exists(workdir)
    with pytest.raises(RuntimeBroken, match="closed"):
        runtime.run("true")


def one_commit_repo(tmp_path):
    """A git repository with one commit of one file, a.txt."""
    src = tmp_path / "src"
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "a.txt").write_text("a\n")
    subprocess.run("git add a.txt && git -c user.name=a -c user.email=a@b commit -qm one", shell=True, cwd=src,
                   check=True)
    return src


def test_default_base_is_the_source_head(tmp_path):
    src = one_commit_repo(tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    with LocalRuntime(src) as runtime:
        assert runtime.base_commit == head
        assert runtime.read_text("a.txt") == "a\n"


def test_source_without_head_names_its_branches(requests_repo):
    with pytest.raises(ValueError, match="base_commit.*base-"):
        LocalRuntime(requests_repo)


def test_a_runtime_dropped_without_close_still_deletes_its_checkout(requests_repo, requests_commit):
    runtime = LocalRuntime(requests_repo, requests_commit)
    folder = os.path.dirname(runtime.workdir)
    del runtime
    gc.collect()
    assert not os.path.exists(folder)


def test_a_same_size_edit_right_after_reset_shows_in_the_diff(tmp_path):
    """git's racy-clean check needs the index copy's own mtime; a fresh copy hid such an edit."""
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "m.py").write_text("x = 1 - 2\n")
    subprocess.run("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm base",
                   shell=True, cwd=repo, check=True)
    with LocalRuntime(str(repo)) as runtime:
        runtime.diff()
        runtime.reset()
        runtime.write_file("m.py", "x = 1 + 2\n")  # same size, same second as the index write
        time.sleep(1.1)
        assert "+x = 1 + 2" in runtime.diff()


def _checkout_in_a_process(source) -> tuple[subprocess.Popen, str]:
    """A Python process holding a LocalRuntime of `source`; returns it and its checkout's folder."""
    code = ("import sys, time; from pinpoint.environments.local import LocalRuntime; "
            "r = LocalRuntime(sys.argv[1]); print(r.workdir, flush=True); time.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(source)], stdout=subprocess.PIPE, text=True)
    return holder, os.path.dirname(holder.stdout.readline().strip())


def test_a_killed_process_checkout_is_removed_by_the_next_one_and_a_live_one_is_kept(tmp_path):
    """SIGKILL runs no cleanup: a killed `fix` or Ray worker would leave its clone in /tmp for good."""
    src = one_commit_repo(tmp_path)
    killed, killed_folder = _checkout_in_a_process(src)
    live, live_folder = _checkout_in_a_process(src)
    try:
        killed.kill()
        killed.wait()
        assert os.path.isdir(killed_folder)
        with LocalRuntime(src):
            assert not os.path.exists(killed_folder)
            assert os.path.isdir(live_folder)
    finally:
        live.kill()
        live.wait()
        with LocalRuntime(src):
            pass
    assert not os.path.exists(live_folder)


def test_a_dead_process_folder_of_another_machine_sharing_the_folder_is_kept(tmp_path):
    """The pid in a folder's name means something only on the machine that wrote it."""
    from pinpoint.environments.files import _host, process_tempdir

    gone = subprocess.Popen(["true"])
    gone.wait()
    here, elsewhere = tmp_path / f"pinpoint-t-{_host()}.{gone.pid}-a", tmp_path / f"pinpoint-t-other.{gone.pid}-a"
    here.mkdir()
    elsewhere.mkdir()
    made = process_tempdir("pinpoint-t-", str(tmp_path))
    assert not here.exists() and elsewhere.is_dir() and made.is_dir()


def test_every_kind_of_folder_a_dead_process_left_goes_and_live_or_foreign_ones_stay(tmp_path):
    """What the suite's end (and any caller) sweeps: each pinpoint prefix, only this machine's dead processes."""
    from pinpoint.environments.files import _host, remove_orphan_folders

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = [tmp_path / f"pinpoint-{kind}-{_host()}.{gone.pid}-x1" for kind in ("local", "repo", "src", "ref")]
    live = tmp_path / f"pinpoint-local-{_host()}.{os.getpid()}-x2"
    foreign = tmp_path / f"pinpoint-local-other.{gone.pid}-x3"
    not_ours = tmp_path / f"other-{_host()}.{gone.pid}-x4"
    for folder in (*dead, live, foreign, not_ours):
        folder.mkdir()
    removed = remove_orphan_folders(parent=str(tmp_path))
    assert sorted(removed) == sorted(folder.name for folder in dead)
    assert not any(folder.exists() for folder in dead)
    assert live.is_dir() and foreign.is_dir() and not_ours.is_dir()
