"""RepairEnv on real repositories: the demo's real HumanEvalFix bug as a local task (no container), and a SWE-bench
dev row in its real instance image (`-m docker`). The scripted gold policy is a fake (it replays the reference
patch); its rewards are known by hand."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from pinpoint.environments.errors import UsageError
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.rl.env import BoxKey, EnvSettings, RepairEnv, box_for
from pinpoint.rl.policies import GoldPolicy, NoopPolicy
from pinpoint.rl.rewards import precise_reward
from pinpoint.rl.tasks import RlTask, load_tasks
from pinpoint.swebench_eval.metrics import edit_metrics
from pinpoint.tools.protocol import NO_ACTION, Action, ActionError, parse_action


def _episode(env: RepairEnv, task: RlTask, actions: list) -> tuple[float | None, dict, int]:
    env.reset(options={"task": task})
    for number, action in enumerate(actions, 1):
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info, number
    raise AssertionError("the episode did not end")


def test_gold_policy_gets_unit_reward_one_and_noop_zero(demo_task: RlTask) -> None:
    with RepairEnv(EnvSettings(reward="unit")) as env:
        obs, info = env.reset(options={"task": demo_task})
        assert "truncate_number" in obs and info["messages"][0]["role"] == "system"
        assert {t["function"]["name"] for t in info["tools"]} >= {"view", "str_replace_editor", "submit"}
        gold = GoldPolicy(demo_task.gold_patch)
        reward, info, steps = _episode(env, demo_task, [gold.act([])[0] for _ in range(5)])
        assert (reward, info["outcome"], steps) == (1.0, "resolved", 2)
        assert info["patch"] == demo_task.gold_patch
        reward, info, _ = _episode(env, demo_task, [NoopPolicy().act([])[0]])
        assert (reward, info["outcome"], info["patch"]) == (0.0, "empty_patch", "")


def test_precise_reward_equals_the_hand_computation(demo_task: RlTask) -> None:
    """The gold edit plus one needless line: tests pass, precision 1/2, recall gated to 1, F1 2/3, so the reward
    is 2/3·1 + 1/3·2/3 = 8/9."""
    gold = GoldPolicy(demo_task.gold_patch).act([])[0]
    extra = {"name": "str_replace_editor", "arguments": {
        "command": "str_replace", "path": "README.md", "old_str": "Small numeric helpers",
        "new_str": "Small numeric helpers (checked)"}}
    with RepairEnv(EnvSettings(reward="precise")) as env:
        reward, info, _ = _episode(env, demo_task, [gold, extra, '{"tool": "submit", "arguments": {}}'])
    assert info["unit"] == 1.0
    assert (info["edit"]["precision"], info["edit"]["edited_lines"]) == (0.5, 2)
    assert reward == pytest.approx(8 / 9)
    assert reward == pytest.approx(precise_reward(1.0, edit_metrics(info["patch"], demo_task.gold_patch)))


def test_localization_reward_is_dense_and_sums_to_the_final_potential(demo_task: RlTask) -> None:
    path = "numeric/functions.py"
    line = next(int(h.split()[1].split(",")[0][1:]) for h in demo_task.gold_patch.splitlines() if h.startswith("@@"))
    actions = [{"name": "view", "arguments": {"path": "README.md"}},
               {"name": "view", "arguments": {"path": path}},
               {"name": "view", "arguments": {"path": path, "view_range": [line, line + 10]}},
               {"name": "submit", "arguments": {}}]
    with RepairEnv(EnvSettings(reward="localization")) as env:
        env.reset(options={"task": demo_task})
        rewards = [env.step(action)[1] for action in actions]
    assert rewards[0] == 0.0  # not a gold file
    assert rewards[1] == pytest.approx(0.5)  # the gold file, viewed whole: file credit only
    assert rewards[2] > 0.0  # a focused view over the gold lines
    assert sum(rewards) <= 1.0 + 1e-9


def test_bad_actions_are_observations_and_budgets_truncate(demo_task: RlTask) -> None:
    with RepairEnv(EnvSettings(reward="unit", max_steps=3)) as env:
        env.reset(options={"task": demo_task})
        obs, reward, terminated, truncated, info = env.step("I think the bug is in line 3.")
        assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, True)
        assert '"tool"' in obs
        obs, *_ = env.step({"name": "view", "arguments": {"path": 3}})
        assert "Invalid arguments for view" in obs
        _, reward, terminated, truncated, info = env.step({"name": "no_such_tool", "arguments": {}})
        assert (terminated, truncated, info["truncated_by"], reward) == (False, True, "steps", 0.0)
        with pytest.raises(UsageError):
            env.step({"name": "submit", "arguments": {}})


def test_actions_in_every_accepted_shape() -> None:
    assert parse_action('```json\n{"tool": "view", "arguments": {"path": "a.py"}}\n```') == Action("view", {"path": "a.py"})
    assert parse_action({"function": {"name": "submit", "arguments": "{}"}}) == Action("submit", {})  # read once, here
    assert parse_action({"tool": "view", "arguments": {"path": "."}}) == Action("view", {"path": "."})
    error = parse_action('```json\n{"tool": "view", "arguments": {\n```')
    assert isinstance(error, ActionError) and "could not be read" in error.message
    assert parse_action("I think the bug is in a.py.") == ActionError(NO_ACTION)
    with pytest.raises(UsageError), RepairEnv() as env:
        env.reset(options={})


def test_tasks_file_loads_local_and_swebench_rows(tmp_path: Path, demo_task: RlTask) -> None:
    import json

    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(demo_task.to_row()) + "\n" + json.dumps({"instance_id": "psf__requests-1142"}) + "\n")
    tasks = load_tasks(path)
    assert [t.kind for t in tasks] == ["local", "swebench"]
    assert tasks[0] == demo_task and tasks[1].gold_patch.startswith("diff --git")
    path.write_text('{"instance_id": "no-such-row"}\n')
    with pytest.raises(UsageError, match="no-such-row"):
        load_tasks(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(UsageError, match=":1: expected a JSON object"):
        load_tasks(path)


@pytest.fixture(scope="module")
def requests_task(docker_client) -> RlTask:
    from pinpoint.swebench_eval.datasets import load_instances

    return RlTask.swebench(load_instances(ids=["psf__requests-1142"])[0])


@pytest.mark.docker
def test_gold_policy_resolves_a_real_dev_row_and_a_killed_container_is_not_a_zero(requests_task: RlTask) -> None:
    with RepairEnv(EnvSettings(reward="precise", grader="fresh")) as env:
        gold = GoldPolicy(requests_task.gold_patch)
        reward, info, _ = _episode(env, requests_task, [gold.act([])[0] for _ in range(4)])
        assert (reward, info["outcome"], info["edit"]["f1"]) == (1.0, "resolved", 1.0)

        env.reset(options={"task": requests_task})
        env._episode.runtime.container.kill()  # the box dies mid-episode (as an OOM kill would)
        obs, reward, terminated, truncated, info = env.step({"name": "view", "arguments": {"path": "setup.py"}})
        assert math.isnan(reward) and truncated and not terminated and "infra_failure" in info
        assert "not usable" in info["infra_failure"] and "infrastructure failure" in obs

        reward, info, _ = _episode(env, requests_task, [NoopPolicy().act([])[0]])
        assert (reward, info["outcome"]) == (0.0, "empty_patch")
        assert env.pool.stats.replaced_dead + env.pool.stats.started >= 2

    with RepairEnv(EnvSettings(reward="unit")) as env:  # the default: graded in a pooled, primed box of the same image
        reward, info, _ = _episode(env, requests_task, [gold.act([])[0] for gold in [GoldPolicy(
            requests_task.gold_patch)] for _ in range(4)])
        assert (reward, info["outcome"]) == (1.0, "resolved")
        grader_key = env._boxes[requests_task.task_id].grader_key
        assert env.pool.wait_idle(grader_key, timeout=120)  # the grader's box went back to the pool, not closed


def test_prepare_and_rollout_commands_check_their_input(tmp_path: Path, demo_task: RlTask, capsys) -> None:
    import json

    from pinpoint.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(demo_task.to_row()) + "\n")
    assert main(["rl", "prepare", "--tasks", str(tasks)]) == 0
    assert "demo-Python-2: ready" in capsys.readouterr().out
    assert main(["rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold", "--workers", "0",
                 "--output", str(tmp_path / "o.jsonl")]) == 2
    assert main(["rl", "rollout", "--tasks", str(tasks), "--policy", "gpt-4", "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "expected scripted-gold" in err and "Traceback" not in err
    assert not (tmp_path / "o.jsonl").exists()


def test_localization_credits_the_gold_lines_of_the_final_diff(demo_task: RlTask) -> None:
    gold = GoldPolicy(demo_task.gold_patch)
    with RepairEnv(EnvSettings(reward="localization")) as env:
        env.reset(options={"task": demo_task})
        edit_reward = env.step(gold.act([])[0])[1]
        submit = env.step(gold.act([])[0])
    assert edit_reward == pytest.approx(0.5)  # the gold file
    assert submit[1] == pytest.approx(0.5) and submit[2]  # its gold lines, edited in the submitted diff


@pytest.mark.docker
def test_a_command_that_kills_its_own_box_is_the_models_failure(requests_task: RlTask) -> None:
    from pinpoint.environments.adversarial import KILL_SERVER

    with RepairEnv(EnvSettings(reward="unit")) as env:
        env.reset(options={"task": requests_task})
        obs, reward, terminated, _, info = env.step({"name": "run_tests", "arguments": {"command": KILL_SERVER}})
        assert (reward, terminated, info["outcome"]) == (0.0, True, "broke_its_box")
        assert "infra_failure" not in info and "killed from inside" in info["model_failure"]
        reward, info, _ = _episode(env, requests_task, [NoopPolicy().act([])[0]])
        assert (reward, info["outcome"]) == (0.0, "empty_patch")


def test_pool_keys_are_typed_values_equal_for_the_same_box(demo_task: RlTask) -> None:
    """The warm pool matches boxes by key: the same task and settings give equal, hashable keys (no text to parse)."""
    key = box_for(demo_task, RuntimeSettings()).key
    assert isinstance(key, BoxKey) and key == box_for(demo_task, RuntimeSettings()).key
    assert {key: 1}[box_for(demo_task, RuntimeSettings()).key] == 1 and not key.grading
    assert key != dataclasses.replace(key, grading=True)
