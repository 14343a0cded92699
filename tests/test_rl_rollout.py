"""`pinpoint rl rollout` on a real local Ray instance: the dataset is written as episodes finish, a kill loses nothing
already written, and the rerun finishes only what is missing. The task is the demo's real bug as a local task; the
scripted gold policy is a fake (it replays the reference patch), so every reward is known."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pinpoint.rl.gateway import SeedKey, turn_seed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory: pytest.TempPathFactory, demo_task) -> Path:
    path = tmp_path_factory.mktemp("rollout") / "tasks.jsonl"
    path.write_text(json.dumps(demo_task.to_row()) + "\n")
    return path


def _rollout(tasks: Path, out: Path, samples: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold",
               "--samples-per-task", str(samples), "--workers", "1", "--reward", "precise", "--output", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_rollout_writes_the_dataset_and_resumes_after_a_kill(tasks_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    first = _rollout(tasks_file, out, samples=4)
    deadline = time.monotonic() + 240
    while len(_lines(out)) < 1 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the driver and everything it started, mid-run
    first.wait()
    before = _lines(out)  # every line written before the kill parses
    assert 1 <= len(before) < 4, first.stderr.read()

    second = _rollout(tasks_file, out, samples=4)
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    rows = _lines(out)
    assert sorted(r["sample"] for r in rows) == list(range(4))  # finished episodes were not run again
    assert rows[: len(before)] == before
    assert {(r["status"], r["reward"]) for r in rows} == {("terminated", 1.0)}
    assert all(r["patch"] == rows[0]["patch"] and r["messages"][0]["role"] == "system" for r in rows)
    assert "4/4 episodes" in stdout and "mean reward 1.000" in stdout


def test_rollout_to_parquet_holds_the_trainer_fields(tasks_file: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "episodes.parquet"
    done = _rollout(tasks_file, out, samples=1)
    _, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    table = pq.read_table(out)
    assert table.num_rows == 1
    assert {"prompt_ids", "response_ids", "response_mask", "rollout_logprobs", "reward", "llm_s",
            "env_s"} <= set(table.column_names)


def test_rollout_speaks_vllm_and_fails_loudly_when_every_episode_fails(tasks_file: Path, tmp_path: Path) -> None:
    """`--backend vllm` against a FAKE vLLM server (vLLM's real token-id API shapes: tests/fake_vllm_server.py):
    token-exact rows, the temperature and each turn's seed reach the server. The default llama.cpp backend against
    the same server is refused (no /apply-template, a 404): the command stops at once as a usage error."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fake_vllm_server import EOS, FakeVllmServer, tokenize

    reply = '{"tool": "submit", "arguments": {}}'
    fake = FakeVllmServer(reply)
    base = [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks_file), "--policy", fake.url,
            "--model", "fake-vllm", "--samples-per-task", "2", "--reward", "localization"]
    try:
        out = tmp_path / "vllm.jsonl"
        done = subprocess.run([*base, "--model-backend", "vllm", "--set", "llm.temperature=0.7", "--seed", "5", "--output", str(out)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        rows = sorted(_lines(out), key=lambda r: r["sample"])
        assert [r["status"] for r in rows] == ["terminated", "terminated"]
        for row in rows:
            assert row["backend"] == "vllm" and row["response_ids"] == tokenize(reply) + [EOS]
            assert row["response_mask"] == [1] * len(row["response_ids"])
            assert row["rollout_logprobs"] == [-0.25] * len(row["response_ids"])
            assert row["prompt_ids"][:1] == [1] and row["prompt_ids"][-3:] == tokenize("nt\n")
        assert sorted(b["seed"] for b in fake.completions) == sorted(
            turn_seed(SeedKey(5, row["task_id"], row["sample"]), 0) for row in rows)  # one turn each
        assert {b["temperature"] for b in fake.completions} == {0.7}
        failing = subprocess.run([*base, "--output", str(tmp_path / "llamacpp.jsonl")], capture_output=True, text=True,
                                 timeout=300)
    finally:
        fake.close()
    assert failing.returncode == 2, failing.stdout  # a server without llama.cpp's endpoints: a usage error, at once
    assert "refused the request" in failing.stderr and "apply-template" in failing.stderr


def test_rollout_speaks_sglang_with_the_models_tokenizer(tasks_file: Path, tmp_path: Path) -> None:
    """`--backend sglang --tokenizer DIR` against a FAKE SGLang server (its real native shapes): the rows carry the
    server's own ids (`token_source: server`); without `--tokenizer` the command refuses in one line."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fake_sglang_server import FakeSglangServer, write_fake_tokenizer
    from fake_vllm_server import EOS, tokenize

    reply = '{"tool": "submit", "arguments": {}}'
    fake = FakeSglangServer(reply)
    tokenizer = write_fake_tokenizer(tmp_path / "tokenizer")
    base = [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks_file), "--policy", fake.url,
            "--model", "fake-sglang", "--model-backend", "sglang", "--reward", "localization"]
    try:
        out = tmp_path / "sglang.jsonl"
        done = subprocess.run([*base, "--tokenizer", str(tokenizer), "--seed", "3", "--output", str(out)],
                              capture_output=True, text=True, timeout=300)
        refused = subprocess.run([*base, "--output", str(tmp_path / "none.jsonl")], capture_output=True, text=True,
                                 timeout=120)
    finally:
        fake.close()
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = _lines(out)
    assert row["status"] == "terminated"
    assert row["backend"] == "sglang"
    assert row["token_source"] == "server"
    assert row["response_ids"] == tokenize(reply) + [EOS]
    assert [b["sampling_params"].get("sampling_seed") for b in fake.generates] == [
        turn_seed(SeedKey(3, row["task_id"], 0), 0)]
    assert refused.returncode == 2
    assert "--tokenizer" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_parquet_files_of_any_policy_share_one_schema(tmp_path: Path) -> None:
    """A scripted policy's rows have empty token lists (Arrow would type them list<null>); an embedded-model row
    has ids and logprobs: both files get the same token column types, so pa.concat_tables works."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pinpoint.rl.rollout import _write_parquet

    base = {"task_id": "t", "policy": "p", "status": "terminated", "reward": 1.0, "reward_info": {}, "messages": []}
    scripted = [{**base, "sample": 0, "prompt_ids": [], "response_ids": [], "response_mask": [],
                 "rollout_logprobs": [], "step_rewards": [0.0]}]
    model = [{**base, "sample": 1, "prompt_ids": [1, 2], "response_ids": [3], "response_mask": [1],
              "rollout_logprobs": [-0.5], "step_rewards": [1.0]}]
    _write_parquet(scripted, tmp_path / "scripted.parquet")
    _write_parquet(model, tmp_path / "model.parquet")
    tables = [pq.read_table(tmp_path / f"{name}.parquet") for name in ("scripted", "model")]
    assert tables[0].schema.field("response_ids").type == pa.list_(pa.int64())
    assert pa.concat_tables(tables).column("rollout_logprobs").to_pylist() == [[], [-0.5]]
