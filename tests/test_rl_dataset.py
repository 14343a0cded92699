"""`pinpoint rl dataset`, `pinpoint rl filter` and the curriculum: the training parquet read back as verl's and SkyRL's
dataset classes read it (Hugging Face `datasets` on the Parquet file; SkyRL's env extras are every column but
`prompt` and `env_class`), a task recovered from it by the adapters, GRPO groups with all-equal rewards dropped, and
tasks ordered by earlier pass rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pinpoint.cli import main

INSTANCE = "psf__requests-1142"


@pytest.fixture
def tasks_file(tmp_path: Path, demo_task) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(demo_task.to_row()) + "\n" + json.dumps({"instance_id": INSTANCE}) + "\n")
    return path


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_rl_dataset_writes_rows_verl_and_skyrl_read(tasks_file: Path, tmp_path: Path, demo_task) -> None:
    import datasets
    from pinpoint.rl.adapters import SKYRL_ENV_ID, task_of
    from pinpoint.rl.dataset import PINPOINT_AGENT

    out = tmp_path / "train.parquet"
    assert main(["rl", "dataset", "--tasks", str(tasks_file), "--output", str(out)]) == 0
    rows = datasets.load_dataset("parquet", data_files=str(out), split="train")  # as RLHFDataset/PromptDataset do
    assert len(rows) == 2 and PINPOINT_AGENT == SKYRL_ENV_ID
    local, swebench = rows[0], rows[1]
    for row in (local, swebench):  # verl: agent_name, the prompt's messages, extra_info.task
        assert row["agent_name"] == "pinpoint_repair" and row["env_class"] == "pinpoint_repair"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert '"tool"' in row["prompt"][0]["content"] and "<problem>" in row["prompt"][1]["content"]
        assert task_of({"extra_info": row["extra_info"]}).task_id == row["extra_info"]["task_id"]
        extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}  # SkyRL's env_extras
        assert task_of(extras).task_id == row["extra_info"]["task_id"]
    assert task_of(local) == demo_task
    recovered = task_of(swebench)
    assert recovered.kind == "swebench" and recovered.task_id == INSTANCE and recovered.gold_patch


def test_task_of_takes_a_struct_row_with_other_rows_keys_as_none(demo_task) -> None:
    """A Parquet struct column unifies the keys of every row: a SWE-bench row read back beside a local task carries
    the local task's keys as None (and the other way round); those are not the task's."""
    from pinpoint.rl.adapters import task_of
    from pinpoint.swebench_eval.datasets import load_instances

    instance = load_instances(ids=[INSTANCE])[0]
    swebench, local = instance.to_row(), demo_task.to_row()
    assert task_of({"extra_info": {"task": {**dict.fromkeys(local), **swebench}}}).instance == instance
    assert task_of({"task": {**dict.fromkeys(swebench), **local}}) == demo_task


def _episodes(path: Path, rewards: dict[str, list[float | None]]) -> Path:
    rows = [{"task_id": task, "sample": s, "status": "infra_failure" if r is None else "terminated", "reward": r,
             "reward_info": {} if r is None else {"unit": r}, "messages": [], "step_rewards": [],
             "prompt_ids": [], "response_ids": [], "response_mask": [], "rollout_logprobs": []}
            for task, values in rewards.items() for s, r in enumerate(values)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_rl_filter_drops_groups_whose_rewards_are_all_equal(tmp_path: Path, capsys) -> None:
    from pinpoint.rl.dataset import load_rollouts

    rollouts = _episodes(tmp_path / "episodes.jsonl", {"all-one": [1.0, 1.0], "all-zero": [0.0, 0.0, 0.0],
                                                       "mixed": [1.0, 0.0], "equal-but-a-failure": [1.0, None],
                                                       "mixed-with-a-failure": [None, 0.0, 1.0]})
    for out in (tmp_path / "kept.jsonl", tmp_path / "kept.parquet"):
        assert main(["rl", "filter", str(rollouts), "--output", str(out)]) == 0
        kept = load_rollouts(out)
        assert sorted((r["task_id"], r["sample"]) for r in kept) == [
            ("mixed", 0), ("mixed", 1), ("mixed-with-a-failure", 0), ("mixed-with-a-failure", 1),
            ("mixed-with-a-failure", 2)]
        assert "dropped 3 group(s)" in capsys.readouterr().out


def test_curriculum_orders_tasks_by_earlier_pass_rates(tmp_path: Path, demo_task) -> None:
    import dataclasses

    import pyarrow.parquet as pq

    names = ["hard", "easy", "never-run", "medium"]
    tasks = [dataclasses.replace(demo_task, task_id=name) for name in names]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t.to_row()) + "\n" for t in tasks))
    rollouts = _episodes(tmp_path / "episodes.jsonl", {"hard": [0.0, 0.0, 0.0, 1.0], "easy": [1.0, 1.0, None],
                                                       "medium": [1.0, 0.0]})
    out = tmp_path / "train.parquet"
    assert main(["rl", "dataset", "--tasks", str(tasks_file), "--output", str(out), "--curriculum", str(rollouts)]) == 0
    assert [e["task_id"] for e in pq.read_table(out).column("extra_info").to_pylist()] == [
        "easy", "medium", "hard", "never-run"]
    assert main(["rl", "dataset", "--tasks", str(tasks_file), "--output", str(out), "--curriculum", str(rollouts),
                 "--hardest-first"]) == 0
    assert [e["task_id"] for e in pq.read_table(out).column("extra_info").to_pylist()] == [
        "hard", "medium", "easy", "never-run"]


def test_bad_input_is_one_line_and_exit_2(tasks_file: Path, tmp_path: Path, capsys) -> None:
    assert "Parquet" in _refused(capsys, ["rl", "dataset", "--tasks", str(tasks_file), "--output", "x.jsonl"])
    assert "cannot read tasks file" in _refused(capsys, ["rl", "dataset", "--tasks", str(tmp_path / "none.jsonl"),
                                                         "--output", str(tmp_path / "t.parquet")])
    assert "no such rollout dataset" in _refused(capsys, ["rl", "dataset", "--tasks", str(tasks_file), "--output",
                                                          str(tmp_path / "t.parquet"), "--curriculum",
                                                          str(tmp_path / "none.jsonl")])
    assert "--curriculum" in _refused(capsys, ["rl", "dataset", "--tasks", str(tasks_file), "--output",
                                               str(tmp_path / "t.parquet"), "--hardest-first"])
    broken = tmp_path / "broken.parquet"
    broken.write_text("not parquet")
    assert "not a rollout dataset" in _refused(capsys, ["rl", "filter", str(broken), "--output",
                                                        str(tmp_path / "kept.jsonl")])
    assert "no such rollout dataset" in _refused(capsys, ["rl", "filter", str(tmp_path / "none.jsonl"), "--output",
                                                          str(tmp_path / "kept.jsonl")])


def test_rl_filter_that_drops_every_group_still_writes_a_loadable_parquet(tmp_path: Path, capsys) -> None:
    """All-zero rewards are the normal case early in training: the empty result keeps the input's full schema and
    has no row group, so Hugging Face `datasets` (as verl and SkyRL read it) loads it beside a non-empty one and
    pyarrow concatenates the two. (`datasets` refuses a split of 0 rows whatever the file: "corresponds to no
    data".)"""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import load_dataset

    rollouts = _episodes(tmp_path / "episodes.jsonl", {"a": [0.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 0.0]})
    empty, full = tmp_path / "empty.parquet", tmp_path / "full.parquet"
    assert main(["rl", "filter", str(_episodes(tmp_path / "zeros.jsonl", {"a": [0.0, 0.0], "b": [1.0, 1.0]})),
                 "--output", str(empty)]) == 0
    assert main(["rl", "filter", str(rollouts), "--output", str(full)]) == 0
    assert "kept 0 of 4 row(s)" in capsys.readouterr().out
    table = pq.read_table(empty)
    assert table.num_rows == 0 and {"task_id", "sample", "reward", "prompt_ids", "response_mask"} <= set(
        table.column_names)
    loaded = load_dataset("parquet", data_files=[str(empty), str(full)], split="train")
    assert loaded.num_rows == 2 and set(loaded.column_names) == set(table.column_names)
    both = pa.concat_tables([table, pq.read_table(full)])
    assert both.num_rows == 2 and both.column("task_id").to_pylist() == ["c", "c"]
