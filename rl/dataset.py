"""Training data for trainers: the prompt parquet verl and SkyRL read, GRPO group filtering, and a curriculum.

One file serves both trainers (`pinpoint rl dataset --tasks FILE -o train.parquet`). Each row holds:

- `prompt`: the episode's first chat (system prompt with the tools, the task), as both trainers' datasets expect
  (verl's `RLHFDataset` and SkyRL's `PromptDataset` apply the chat template to it to drop overlong prompts). The
  repository listing the env adds at `reset()` is not in it (it needs the box), so the real first prompt is longer;
  the adapters build the real chat from the task, never from this column.
- `agent_name: pinpoint_repair`: verl's agent loop picks `pinpoint.rl.verl_loop.PinpointAgentLoop` by it (verl
  examples/data_preprocess/gsm8k_tool_agent_loop.py at 030a519a).
- `env_class: pinpoint_repair`: SkyRL's env for the row. SkyRL's `PromptDataset` hands every other column to the env
  as `env_extras` (skyrl-train/skyrl_train/dataset/dataset.py, tyler-griggs/SkyRL at 3633a41c), so the top-level
  `task` column is `env_extras["task"]`.
- `task` and `extra_info.task`: the task as a tasks-file row in JSON text (a full row: trainer nodes need no dataset
  lookup; text, so rows of different shapes share one Parquet column), read by `pinpoint.rl.adapters.task_of`.
- `data_source`, `reward_model` / `reward_spec` (`style`/`method: env`): what verl's and SkyRL's readers expect to
  find; the reward itself comes from the env.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pinpoint.agent import prompts
from pinpoint.rl.rollout import JSON_COLUMNS, read_dataset
from pinpoint.rl.tasks import RlTask
from pinpoint.tools.protocol import describe_tools_for_text_mode
from pinpoint.tools.registry import default_tools, openai_schemas

#: verl's agent-loop name and SkyRL's env id (`pinpoint.rl.verl_loop`, `pinpoint.rl.adapters.SKYRL_ENV_ID`)
PINPOINT_AGENT = "pinpoint_repair"
TREE_NOTE = "(listed when the episode starts)"


def first_messages(task: RlTask) -> list[dict[str, str]]:
    """The chat an episode starts from, as `RepairEnv.reset` writes it, without the repository listing."""
    system = f"{prompts.SYSTEM}\n\n{describe_tools_for_text_mode(openai_schemas(default_tools()))}"
    user = prompts.task_message(task.problem_statement, TREE_NOTE, test_command=task.test_command)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def training_row(task: RlTask, index: int, split: str = "train") -> dict[str, Any]:
    """One row of the training parquet, for verl's agent loop and SkyRL's generator at once."""
    text = json.dumps(task.to_row())
    return {"data_source": f"pinpoint/{task.kind}", "agent_name": PINPOINT_AGENT, "env_class": PINPOINT_AGENT,
            "prompt": first_messages(task), "task": text, "ability": "repair",
            "reward_model": {"style": "env", "ground_truth": ""}, "reward_spec": {"method": "env", "ground_truth": ""},
            "extra_info": {"task": text, "task_id": task.task_id, "index": index, "split": split}}


def write_training_parquet(tasks: Sequence[RlTask], out: Path, split: str = "train") -> int:
    """Write the training parquet of `tasks` (in their order) to `out` atomically; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([training_row(task, i, split) for i, task in enumerate(tasks)])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(out)
    return table.num_rows


# -- rollouts: group filtering and a curriculum ------------------------------------------------------------------

def load_rollouts(path: Path) -> list[dict[str, Any]]:
    """A rollout dataset's rows (the last per task and sample), its JSON text columns decoded again."""
    rows = read_dataset(path)
    for row in rows:
        for name in JSON_COLUMNS:
            if isinstance(row.get(name), str):
                row[name] = json.loads(row[name])
    return rows


def _known(reward: Any) -> bool:
    return isinstance(reward, int | float) and not math.isnan(reward)


def groups(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows by task: a task's samples are its GRPO group."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_task[str(row.get("task_id"))].append(row)
    return dict(by_task)


def drop_equal_groups(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of groups whose rewards differ, and the ids of the dropped groups. A group whose rewards are all
    equal (all 0, all 1, or one sample) has zero GRPO advantage everywhere: it costs a step and teaches nothing.
    Rewards of infrastructure failures (None) are not compared; a group with no known reward is dropped too."""
    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    for task_id, members in groups(rows).items():
        rewards = {float(r["reward"]) for r in members if _known(r.get("reward"))}
        if len(rewards) > 1:
            kept.extend(members)
        else:
            dropped.append(task_id)
    return kept, dropped


def pass_rates(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per task, the share of its graded episodes that resolved it (`reward_info.unit`; a reward without a unit
    outcome, such as the dense localization reward, counts by its value). Infrastructure failures do not count."""
    scores: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        unit = (row.get("reward_info") or {}).get("unit")
        score = unit if _known(unit) else row.get("reward")
        if _known(score):
            scores[str(row.get("task_id"))].append(float(score))
    return {task_id: sum(values) / len(values) for task_id, values in scores.items()}


def curriculum(tasks: Sequence[RlTask], rows: Iterable[dict[str, Any]], hardest_first: bool = False) -> list[RlTask]:
    """`tasks` ordered by difficulty from earlier rollouts: highest pass rate first (easy to hard; `hardest_first`
    reverses it); tasks without a graded episode come last, in their own order. A stable sort: ties keep the file's
    order."""
    rates = pass_rates(rows)
    seen = [t for t in tasks if t.task_id in rates]
    unseen = [t for t in tasks if t.task_id not in rates]
    ordered = sorted(seen, key=lambda t: rates[t.task_id], reverse=not hardest_first)
    return ordered + unseen
