"""The RL env's oracle suspects (`EnvSettings(suspects="oracle")`, rl/suspects.py) on a real SWE-bench dev row in its
real instance image: the task's FAIL_TO_PASS tests traced in the episode's box with the test patch applied, the
default localizers fused as the agent fuses them, the lines listed in the first observation, the box's tree clean
for the policy, the second reset served from the on-disk cache. The scripted policy actions are a FAKE policy (no
model); the box, the tracer and the localizers are real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pinpoint.agent.config import Config
from pinpoint.environments.errors import UsageError
from pinpoint.environments.settings import ConfigError, build_settings
from pinpoint.rl import suspects as rl_suspects
from pinpoint.rl.env import EnvSettings, RepairEnv
from pinpoint.rl.policies import gold_actions
from pinpoint.rl.suspects import LineSuspect, cache_path, suspects_message
from pinpoint.rl.tasks import RlTask

ROW = "psf__requests-1142"  # gold: requests/models.py, prepare_content_length; FAIL_TO_PASS test_no_content_length


def test_settings_take_the_option_from_a_trainers_dict_and_refuse_bad_values() -> None:
    settings = build_settings(EnvSettings, {"suspects": "oracle", "suspects_top": 3})
    assert (settings.suspects, settings.suspects_top) == ("oracle", 3)
    assert EnvSettings().suspects == "none"  # off unless asked
    with pytest.raises(ConfigError, match="suspects"):
        build_settings(EnvSettings, {"suspects": "gold"})
    with pytest.raises(UsageError, match="suspects_top must be 1..50"):
        EnvSettings(suspects_top=0)


def test_the_listing_names_file_line_function_and_signals_only() -> None:
    lines = [LineSuspect("pkg/a.py", 12, 0.07, ("spectrum", "mbfl"), "Thing.run"), LineSuspect("pkg/b.py", 3, 0.05,
                                                                                              ("bm25",))]
    text = suspects_message(lines)
    assert "1. pkg/a.py:12 in Thing.run (spectrum, mbfl)" in text and "2. pkg/b.py:3 (bm25)" in text
    assert LineSuspect.from_json(lines[0].to_json()) == lines[0]


def test_a_local_task_says_in_one_line_that_it_has_no_oracle_and_the_episode_goes_on(demo_task: RlTask) -> None:
    with RepairEnv(EnvSettings(suspects="oracle")) as env:
        obs, info = env.reset(options={"task": demo_task})
        assert info["suspects"] == [] and "local task" in info["suspects_failure"]
        assert "\n" not in info["suspects_failure"] and "Suspicious lines" not in obs
        assert env.step({"name": "view", "arguments": {"path": "."}})[3] is False


#: a process asking for ROW's suspects with `compute` replaced by a FAKE that records its pid in argv[1] and, with
#: argv[2] = "hold", waits until the file argv[1] + ".go" exists: the lock and the cache are the real ones
ASKER = f"""
import json, os, sys, time
from pathlib import Path
from pinpoint.rl import suspects
from pinpoint.rl.tasks import RlTask
from pinpoint.swebench_eval.datasets import load_instances

calls, hold = Path(sys.argv[1]), sys.argv[2] == "hold"
def compute(task, runtime, config):
    with calls.open("a") as out:
        out.write(f"{{os.getpid()}}\\n")
    while hold and not Path(f"{{calls}}.go").exists():
        time.sleep(0.05)
    return [suspects.LineSuspect("requests/models.py", 389, 0.5, ("spectrum",), "prepare_content_length")]
suspects.compute = compute
task = RlTask.swebench(load_instances(ids=["{ROW}"])[0])
suspects.localization_version()  # its imports take seconds: done before this process says it asks
print("asking", flush=True)
found = suspects.oracle_suspects(task, "an-image", None, 120)
print(json.dumps({{"cached": found.cached, "failure": found.failure, "seconds": found.seconds,
                  "suspects": [s.to_json() for s in found.suspects]}}), flush=True)
"""


def _asker(calls: Path, hold: bool, cache: Path) -> subprocess.Popen:
    """A real process asking for ROW's suspects (ASKER), started once it is about to take the lock."""
    env = {**os.environ, "PINPOINT_CACHE": str(cache)}
    process = subprocess.Popen([sys.executable, "-c", ASKER, str(calls), "hold" if hold else "go"], env=env,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "asking"
    return process


def _wait_for_calls(calls: Path, n: int) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = calls.read_text().split() if calls.exists() else []
        if len(pids) >= n:
            return pids
        time.sleep(0.05)
    pytest.fail(f"{n} computation(s) never started")


def _answer(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_asking_at_once_compute_once_and_the_second_reads_the_firsts_lines(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    first = _asker(calls, True, tmp_path)
    (holder,) = _wait_for_calls(calls, 1)
    second = _asker(calls, False, tmp_path)
    time.sleep(1.0)  # the second is past its cache read, on the lock
    assert calls.read_text().split() == [holder]
    (tmp_path / "calls.go").touch()
    one, two = _answer(first), _answer(second)
    assert calls.read_text().split() == [holder]  # computed once
    assert (one["cached"], two["cached"]) == (False, True) and one["failure"] == two["failure"] == ""
    assert two["suspects"] == one["suspects"] and two["seconds"] > 0.5  # it waited, then read the cache


def test_a_holder_that_dies_mid_computation_does_not_block_the_next_which_computes(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    first = _asker(calls, True, tmp_path)
    _wait_for_calls(calls, 1)
    second = _asker(calls, False, tmp_path)
    first.kill()  # SIGKILL: no cleanup runs, the kernel drops its lock
    first.communicate(timeout=30)
    answer = _answer(second)
    assert len(_wait_for_calls(calls, 2)) == 2 and answer["cached"] is False and answer["failure"] == ""
    assert [row["line"] for row in answer["suspects"]] == [389]
    assert len(list((tmp_path / "rl-suspects").glob("*.json"))) == 1  # the second's lines are cached


def test_two_threads_of_one_process_compute_once(requests_row: RlTask, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINPOINT_CACHE", str(tmp_path))
    started, go, calls = threading.Event(), threading.Event(), []

    def compute(task, runtime, config) -> list[LineSuspect]:
        calls.append(threading.get_ident())
        started.set()
        go.wait(30)
        return [LineSuspect("requests/models.py", 389, 0.5, ("spectrum",))]

    monkeypatch.setattr(rl_suspects, "compute", compute)
    found: dict[str, rl_suspects.Found] = {}

    def ask(name: str) -> None:
        found[name] = rl_suspects.oracle_suspects(requests_row, "an-image", None, 60)

    threads = [threading.Thread(target=ask, args=(name,)) for name in ("first", "second")]
    threads[0].start()
    assert started.wait(30)
    threads[1].start()
    time.sleep(0.5)
    go.set()
    for thread in threads:
        thread.join(60)
    assert len(calls) == 1 and found["first"].cached is False and found["second"].cached is True
    assert found["second"].suspects == found["first"].suspects


def test_a_failed_computation_caches_nothing_and_a_waiter_computes_again(requests_row: RlTask, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINPOINT_CACHE", str(tmp_path))
    monkeypatch.setattr(rl_suspects, "compute", lambda *a: (_ for _ in ()).throw(RuntimeError("the box died\nat")))
    found = rl_suspects.oracle_suspects(requests_row, "an-image", None, 60)
    assert found.failure == "suspects: the computation failed: RuntimeError: the box died" and found.broken
    assert found.suspects == [] and not list((tmp_path / "rl-suspects").glob("*.json"))


def test_a_new_computation_removes_the_lines_an_older_localization_version_cached_for_the_task(
        requests_row: RlTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINPOINT_CACHE", str(tmp_path))
    folder = tmp_path / "rl-suspects"
    folder.mkdir()
    stem = requests_row.task_id
    old = {"task": stem, "image": "an-image", "version": "an-old-version", "suspects": []}
    (folder / f"{stem}-0ld.json").write_text(json.dumps(old))
    (folder / f"{stem}-0ld.json.lock").write_text("")
    (folder / f"{stem}-other-image.json").write_text(json.dumps({**old, "image": "another-image"}))
    (folder / f"{stem}-not-json.json").write_text("{")
    monkeypatch.setattr(rl_suspects, "compute", lambda *a: [LineSuspect("requests/models.py", 389, 0.5, ())])
    found = rl_suspects.oracle_suspects(requests_row, "an-image", None, 60)
    assert not found.failure and [s.line for s in found.suspects] == [389]
    left = sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))
    # the old version's file and its lock are gone; another image's lines and a file it cannot read stay
    assert left == sorted([cache_path(requests_row, "an-image", Config()).name, f"{stem}-not-json.json",
                           f"{stem}-other-image.json"])
    assert not (folder / f"{stem}-0ld.json.lock").exists()
    assert rl_suspects.oracle_suspects(requests_row, "an-image", None, 60).cached  # the new lines are read back


def test_prepare_says_a_local_task_has_no_suspects_and_rollout_refuses_an_unknown_mode(
        tmp_path: Path, demo_task: RlTask, capsys: pytest.CaptureFixture) -> None:
    from pinpoint.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(demo_task.to_row()) + "\n")
    assert main(["rl", "prepare", "--tasks", str(tasks), "--suspects", "oracle"]) == 0
    assert capsys.readouterr().out.strip().endswith("; no suspects (a local task has no FAIL_TO_PASS tests)")
    with pytest.raises(SystemExit):
        main(["rl", "rollout", "--tasks", str(tasks), "--policy", "noop", "--output", str(tmp_path / "o.jsonl"),
              "--suspects", "gold"])
    assert "invalid choice: 'gold'" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


def test_a_trainers_env_config_carries_suspects_beside_its_trainer_fields() -> None:
    from pinpoint.rl.adapters import env_settings
    from pinpoint.rl.trainer_config import split_config

    env_part, trainer = split_config({"suspects": "oracle", "suspects_top": 5, "pool_size": 2})
    settings = env_settings(env_part)
    assert (settings.suspects, settings.suspects_top, trainer.pool_size) == ("oracle", 5, 2)


@pytest.fixture(scope="module")
def requests_row() -> RlTask:
    from pinpoint.swebench_eval.datasets import load_instances

    return RlTask.swebench(load_instances(ids=[ROW])[0])


@pytest.fixture(scope="module")
def requests_task(docker_client) -> RlTask:
    from pinpoint.swebench_eval.datasets import load_instances

    return RlTask.swebench(load_instances(ids=[ROW])[0])


def _cache_file(env: RepairEnv, task: RlTask):
    return cache_path(task, env._box(task).image, Config())


def _tree_state(env: RepairEnv) -> tuple[str, str]:
    """`git status` of the episode's box (ignored files too, but the install's egg-info) and the files that name
    the row's failing test (the test patch adds it), in the tree or /tmp."""
    runtime = env._episode.runtime
    status = runtime.run("git status --porcelain --ignored | grep -v egg-info || true").output.strip()
    named = runtime.run("grep -rl test_no_content_length . /tmp --exclude-dir=.git || true").output.strip()
    return status, named


@pytest.mark.docker
def test_a_computation_past_its_time_is_one_line_and_the_episode_starts_clean(requests_task: RlTask) -> None:
    with RepairEnv(EnvSettings(suspects="oracle", suspects_timeout_s=0.05)) as env:
        _cache_file(env, requests_task).unlink(missing_ok=True)
        obs, info = env.reset(options={"task": requests_task})
        assert info["suspects"] == [] and "not computed within 0.05 s" in info["suspects_failure"]
        assert "Suspicious lines" not in obs and _tree_state(env) == ("", "")  # a fresh box, not the one cut off
        assert not _cache_file(env, requests_task).exists()
        _, info = env.reset(options={"task": requests_task})  # this env does not try again at every reset
        assert "not computed" in info["suspects_failure"] and info["suspects_s"] == 0.0


@pytest.mark.docker
def test_a_box_that_dies_mid_computation_is_one_line_and_the_episode_starts_in_a_fresh_box(
        requests_task: RlTask, monkeypatch: pytest.MonkeyPatch) -> None:
    def compute(task: RlTask, runtime, config) -> list[LineSuspect]:
        runtime.close()  # the container is gone: the next command in it fails as a dead box's does
        return [LineSuspect("x.py", 1, 1.0, ("spectrum",))] if runtime.run("true").exit_code == 0 else []

    monkeypatch.setattr(rl_suspects, "compute", compute)
    with RepairEnv(EnvSettings(suspects="oracle")) as env:
        _cache_file(env, requests_task).unlink(missing_ok=True)
        obs, info = env.reset(options={"task": requests_task})
        failure = info["suspects_failure"]
        assert failure.startswith("suspects: the computation failed: ") and "\n" not in failure
        assert info["suspects"] == [] and "Suspicious lines" not in obs and not _cache_file(env, requests_task).exists()
        observation, _, terminated, _, step_info = env.step({"name": "view", "arguments": {"path": "setup.py"}})
        assert not terminated and "infra_failure" not in step_info and "setup(" in observation  # a live box
        assert _tree_state(env) == ("", "")


@pytest.mark.docker
def test_oracle_suspects_name_the_gold_file_from_a_clean_tree_and_the_second_reset_reads_the_cache(
        requests_task: RlTask, monkeypatch: pytest.MonkeyPatch) -> None:
    with RepairEnv(EnvSettings(suspects="oracle", suspects_top=5)) as env:
        cached = _cache_file(env, requests_task)
        cached.unlink(missing_ok=True)
        obs, info = env.reset(options={"task": requests_task})
        assert "suspects_failure" not in info and info["suspects_cached"] is False
        shown = info["suspects"]
        assert len(shown) == 5 and all(isinstance(s, LineSuspect) and s.signals for s in shown)
        assert "requests/models.py" in {s.path for s in shown}  # the gold file
        assert any(s.function and "prepare" in s.function for s in shown)
        assert f"1. {shown[0].path}:{shown[0].line}" in obs and info["messages"][1]["content"] == obs
        assert "test_no_content_length" not in obs and not any("test" in s.path for s in shown)
        assert _tree_state(env) == ("", "")  # neither the test patch nor a mutant is left for the policy
        assert cached.exists()
        written = cached.stat().st_mtime_ns
        env.end_episode()

        monkeypatch.setattr(rl_suspects, "compute", lambda *a: pytest.fail("computed again despite the cache"))
        obs, info = env.reset(options={"task": requests_task})
        assert info["suspects_cached"] is True and info["suspects"] == shown and "suspects_failure" not in info
        assert cached.stat().st_mtime_ns == written and _tree_state(env) == ("", "")


@pytest.mark.docker
def test_the_localization_reward_is_the_same_with_or_without_suspects(requests_task: RlTask) -> None:
    """A policy that reads the suspects earns nothing for it: the potential stays the gold lines'."""
    def episode(suspects: str, actions: list[dict] | None) -> tuple[list[float], list[dict], list[LineSuspect]]:
        with RepairEnv(EnvSettings(reward="localization", suspects=suspects)) as env:
            _, info = env.reset(options={"task": requests_task})
            shown = info.get("suspects", [])
            if actions is None:  # look at every suspect line listed, then make the gold fix
                actions = [{"name": "view", "arguments": {"path": s.path, "view_range": [s.line, s.line]}}
                           for s in shown] + gold_actions(requests_task.gold_patch) + [{"name": "submit",
                                                                                         "arguments": {}}]
            rewards = [env.step(a)[1] for a in actions]
        return rewards, actions, shown

    with_suspects, actions, shown = episode("oracle", None)
    without, _, none_shown = episode("none", actions)
    assert shown and none_shown == []
    assert without == with_suspects and sum(without) == pytest.approx(1.0)


@pytest.mark.docker
def test_oracle_mode_runs_every_targeted_signal_before_the_test_patch_is_removed(requests_task: RlTask) -> None:
    """MBFL's mutants and the predicate switches run the failing tests: run after the reset, those tests (added by
    the test patch) would be gone and the results cached under the same key."""
    from pinpoint.agent.solve import oracle_localizers
    from pinpoint.swebench_eval.runtime import runtime_for

    runtime, _ = runtime_for(requests_task.instance)
    with runtime:
        localizers = oracle_localizers(requests_task.instance, runtime, Config())
        execution = next(loc.execution for loc in localizers if getattr(loc, "execution", None) is not None)
        assert execution.mutation is not None and execution.switches is not None  # ran before the reset
        (failing,) = requests_task.instance.FAIL_TO_PASS
        assert execution.mutation.baseline[failing].outcome == "failed"
        assert runtime.diff() == ""


@pytest.mark.docker
@pytest.mark.slow
def test_prepare_computes_the_suspects_the_env_and_rollout_then_read_from_the_cache(
        requests_task: RlTask, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from pinpoint.cli import main
    from pinpoint.rl.rollout import read_rows

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": ROW}) + "\n")
    with RepairEnv(EnvSettings(suspects="oracle")) as env:
        cached = _cache_file(env, requests_task)
    cached.unlink(missing_ok=True)
    assert main(["rl", "prepare", "--tasks", str(tasks), "--suspects", "oracle"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{ROW}: ready (") and "; suspects computed in " in line and " lines)" in line
    assert main(["rl", "prepare", "--tasks", str(tasks), "--suspects", "oracle"]) == 0
    assert capsys.readouterr().out.strip().endswith("; suspects cached")

    with RepairEnv(EnvSettings(suspects="oracle")) as env:  # the key prepare wrote is the one the env reads
        _, info = env.reset(options={"task": requests_task})
        assert info["suspects_cached"] is True and "suspects_failure" not in info
    out = tmp_path / "rows.jsonl"
    assert main(["rl", "rollout", "--tasks", str(tasks), "--policy", "noop", "--reward", "localization", "--suspects",
                 "oracle", "--output", str(out)]) == 0
    (row,) = read_rows(out)
    first = info["suspects"][0]
    assert "Suspicious lines" in row["messages"][1]["content"]
    assert f"1. {first.path}:{first.line}" in row["messages"][1]["content"]
