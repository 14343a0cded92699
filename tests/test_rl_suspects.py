"""The RL env's oracle suspects (`EnvSettings(suspects="oracle")`, rl/suspects.py) on a real SWE-bench dev row in its
real instance image: the task's FAIL_TO_PASS tests traced in the episode's box with the test patch applied, the
default localizers fused as the agent fuses them, the lines listed in the first observation, the box's tree clean
for the policy, the second reset served from the on-disk cache. The scripted policy actions are a FAKE policy (no
model); the box, the tracer and the localizers are real."""

from __future__ import annotations

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
