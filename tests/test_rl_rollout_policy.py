"""`pinpoint rl rollout`'s sampling seeds and failure policy against a FAKE vLLM server (tests/fake_vllm_server.py,
vLLM's real token-id API shapes; a real vLLM is in tests/test_rl_vllm.py): each turn's seed, a model server that
restarts mid-run, a usage error that stops the run, `raise`, and what every row says about its tries and decoding.
The task is the demo's real bug as a local task (host, no container)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import pytest
from pinpoint.agent.llm_config import LLMConfig
from pinpoint.environments.errors import UsageError
from pinpoint.rl.env import EnvSettings, InfraFailure
from pinpoint.rl.gateway import SeedKey, turn_seed
from pinpoint.rl.rollout import RolloutSpec, run_rollout

sys.path.insert(0, str(Path(__file__).parent))
from fake_vllm_server import FakeVllmServer  # noqa: E402

VIEW = '{"tool": "view", "arguments": {"path": "no_such_file.py"}}'  # an action that does not end the episode


def _spec(tasks: list, url: str, out: Path, model: str = "fake-vllm", **fields) -> RolloutSpec:
    llm = LLMConfig(base_url=url, model=model, max_tokens=64, temperature=1.0, max_retries=0)
    settings = EnvSettings(reward="localization", max_steps=3)
    return RolloutSpec(tasks, "model", out, settings=settings, llm=llm, backend="vllm", **fields)


def test_each_turn_gets_its_own_seed_and_the_same_command_the_same_seeds(demo_task, tmp_path: Path) -> None:
    fake = FakeVllmServer(VIEW)
    try:
        first = run_rollout(_spec([demo_task], fake.url, tmp_path / "a.jsonl", samples_per_task=2, seed=0))
        seeds = [body["seed"] for body in fake.completions]
        fake.completions.clear()
        again = run_rollout(_spec([demo_task], fake.url, tmp_path / "b.jsonl", samples_per_task=2, seed=0))
    finally:
        fake.close()
    assert len(seeds) == 6 and len(set(seeds)) == 6  # 2 samples x 3 turns: no two turns share a seed
    expected = {turn_seed(SeedKey(0, demo_task.task_id, s), t) for s in (0, 1) for t in range(3)}
    assert set(seeds) == expected
    assert sorted(b["seed"] for b in fake.completions) == sorted(seeds)  # the same command, the same seeds
    key = ("sample", "status", "response_ids", "messages")
    assert sorted([{k: r[k] for k in key} for r in first], key=str) == sorted([{k: r[k] for k in key} for r in again],
                                                                              key=str)
    assert {r["decoding"] for r in first} == {"free"}  # vLLM spoken to without an action schema


def test_a_model_server_restart_is_waited_for_not_masked(demo_task, tmp_path: Path, monkeypatch) -> None:
    """The default policy (retry): an episode that met the server down waits for its health check, then runs again;
    the row says how long it waited, and its wall time spans both tries and the wait. The server is down from the
    start and comes back 3 s into the wait (as a vLLM restart finishes)."""
    import pinpoint.rl.rollout as rollout

    fake = FakeVllmServer(VIEW)
    port = fake.server.server_address[1]
    fake.close()  # down: connections refused, as while vLLM restarts
    restarted: list[FakeVllmServer] = []
    timers: list[threading.Timer] = []
    wait = rollout.wait_for_server

    def restart_then_wait(url: str, budget_s: float) -> float:
        if not timers:
            timers.append(threading.Timer(3.0, lambda: restarted.append(FakeVllmServer(VIEW, port=port))))
            timers[0].start()
        return wait(url, budget_s)

    monkeypatch.setattr(rollout, "wait_for_server", restart_then_wait)
    try:
        (row,) = run_rollout(_spec([demo_task], fake.url, tmp_path / "r.jsonl", retry_wait_s=0.0))
    finally:
        for timer in timers:
            timer.join()
        for server in restarted:
            server.close()
    assert row["status"] == "truncated" and not row["masked"] and row["reward"] is not None
    assert row["tries"] == 2 and row["failures"][0].startswith("policy: ")
    assert row["server_wait_s"] > 0
    assert len(row["tries_s"]) == 2 and row["wall_s"] >= sum(row["tries_s"]) + row["server_wait_s"]


def test_a_model_the_server_does_not_serve_stops_the_run_as_a_usage_error(demo_task, tmp_path: Path) -> None:
    fake = FakeVllmServer(VIEW, strict_model=True)
    out = tmp_path / "u.jsonl"
    try:
        with pytest.raises(UsageError, match="does not exist"):
            run_rollout(_spec([demo_task], fake.url, out, model="default", samples_per_task=2))
    finally:
        fake.close()
    assert not out.exists() or out.read_text() == ""  # nothing masked, nothing to skip on a rerun


def test_on_failure_raise_stops_at_the_first_infrastructure_failure(demo_task, tmp_path: Path, monkeypatch) -> None:
    import pinpoint.rl.rollout as rollout

    waits: list[str] = []
    monkeypatch.setattr(rollout, "wait_for_server", lambda url, budget_s: waits.append(url) or 0.0)
    fake = FakeVllmServer(VIEW)
    fake.close()
    with pytest.raises(InfraFailure, match="--on-failure raise"):
        run_rollout(_spec([demo_task], fake.url, tmp_path / "x.jsonl", on_failure="raise", samples_per_task=2))
    assert waits == []  # one try, no wait for the server's health: the run stopped at the first failure


def test_rollout_help_names_every_model_backend_and_failure_policy() -> None:
    from pinpoint.rl.cli import ROLLOUT_BACKENDS, register

    parser = argparse.ArgumentParser(prog="pinpoint")
    register(parser.add_subparsers(dest="command"))
    rollout = _find(parser, "rollout")
    options = {opt: action for action in rollout._actions for opt in action.option_strings}  # noqa: SLF001
    backend = options["--model-backend"]
    assert tuple(backend.choices) == ROLLOUT_BACKENDS and all(name in backend.help for name in ROLLOUT_BACKENDS)
    assert options["--on-failure"].choices == ["retry", "mask", "raise"] and options["--on-failure"].default == "retry"


def _find(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subcommand `name`'s parser wherever it sits in the tree (`pinpoint rl rollout`)."""
    for action in parser._actions:  # noqa: SLF001 (argparse has no public walk)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for key, sub in action.choices.items():
                if key == name:
                    return sub
                found = _find(sub, name) if sub is not parser else None
                if found is not None:
                    return found
    return None
