"""Configuration files and overrides, predictions file safety, and trajectory rendering."""

from __future__ import annotations

import io
import json
import threading

import pytest
from pinpoint.agent.config import ConfigError, load_config
from pinpoint.agent.trajectory import load_trajectory, render
from pinpoint.swebench_eval.predictions import append_prediction, read_predictions
from rich.console import Console


def test_file_then_set_then_flags_take_precedence(tmp_path):
    path = tmp_path / "pinpoint.yaml"
    path.write_text("budget:\n  max_steps: 7\n  max_cost_usd: 1\nsearch:\n  policy: bester\n")
    config = load_config(path, ["budget.max_steps=9"], defaults={"budget.max_steps": 3, "search.k": 2},
                         **{"llm.model": "gpt-x", "llm.base_url": None})
    assert config.budget.max_steps == 9 and config.budget.max_cost_usd == 1.0
    assert config.search.policy == "bester" and config.search.k == 2
    assert config.llm.model == "gpt-x" and config.llm.base_url is None


def test_toml_is_read_too(tmp_path):
    path = tmp_path / "pinpoint.toml"
    path.write_text('[llm]\nbase_url = "http://localhost:8000/v1"\ntool_mode = "text"\n')
    config = load_config(path)
    assert config.llm.base_url == "http://localhost:8000/v1" and config.llm.tool_mode == "text"


@pytest.mark.parametrize("text, field, expected", [
    ("budget:\n  max_steps: many\n", "budget.max_steps", "an integer"),
    ("search:\n  policy: greedy\n", "search.policy", "'flare'"),
    ("budget:\n  max_stepz: 3\n", "budget.max_stepz", "max_steps"),
    ("llm:\n  temperature: -1\n", "llm.temperature", ">= 0"),
    ("agent: 3\n", "agent", "a mapping"),
])
def test_bad_config_names_the_field_and_what_was_expected(tmp_path, text, field, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert field in str(info.value) and expected in str(info.value)


def _show(capsys, *argv: str) -> tuple[dict, str]:
    import yaml
    from pinpoint.cli import main

    assert main(["config", "show", *argv]) == 0
    captured = capsys.readouterr()
    return yaml.safe_load(captured.out), captured.err


def test_user_config_sits_below_environment_config_file_set_and_flags(tmp_path, monkeypatch, capsys):
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    (xdg / "pinpoint").mkdir(parents=True)
    (xdg / "pinpoint" / "config.yaml").write_text(
        "llm: {base_url: 'http://user:1/v1', model: user-model, timeout_s: 77}\n"
        "budget: {max_steps: 4}\nsearch: {k: 5, rounds: 2}\n")
    shown, err = _show(capsys)
    assert shown["llm"]["model"] == "user-model" and shown["llm"]["timeout_s"] == 77
    assert f"user config: {xdg / 'pinpoint' / 'config.yaml'} (read)" in err
    monkeypatch.setenv("PINPOINT_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:2/v1")
    file = tmp_path / "run.yaml"
    file.write_text("llm: {base_url: 'http://file:3/v1'}\nbudget: {max_steps: 6}\nsearch: {k: 6}\n")
    shown, err = _show(capsys, "--config", str(file), "--set", "search.k=7", "--set", "budget.max_steps=8")
    assert shown["llm"]["model"] == "env-model"  # environment over the user file
    assert shown["llm"]["base_url"] == "http://file:3/v1"  # --config over the environment
    assert shown["llm"]["timeout_s"] == 77 and shown["search"]["rounds"] == 2  # the user file where nothing else says
    assert shown["search"]["k"] == 7 and shown["budget"]["max_steps"] == 8  # --set on top of every file
    assert "environment: PINPOINT_MODEL -> llm.model" in err


def test_config_init_writes_the_template_once_at_the_xdg_path(tmp_path, monkeypatch, capsys):
    from pinpoint.cli import main

    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # unset XDG_CONFIG_HOME: ~/.config
    target = tmp_path / "home" / ".config" / "pinpoint" / "config.yaml"
    assert main(["config", "init"]) == 0
    assert str(target) in capsys.readouterr().out and target.is_file()
    shown, _ = _show(capsys)  # every line of the template is a comment: the defaults stand
    assert shown["budget"]["max_steps"] == load_config().budget.max_steps
    assert main(["config", "init"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exists" in err and "--force" in err
    target.write_text("budget: {max_steps: many}\n")
    assert main(["config", "show"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "budget.max_steps" in err


def test_bad_override_syntax_is_explained():
    with pytest.raises(ConfigError, match="section.field=value"):
        load_config(overrides=["max_steps=3"])


def test_concurrent_appends_keep_whole_lines_and_last_write_wins(tmp_path):
    path = tmp_path / "preds.jsonl"
    patch = "diff --git a/x b/x\n" + "+" * 5000 + "\n"
    threads = [threading.Thread(target=append_prediction, args=(path, f"id-{i}", patch, "m")) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(f"id-{i}" for i in range(20))
    assert all(r["model_patch"] == patch and r["model_name_or_path"] == "m" for r in rows)


def test_a_torn_last_line_is_skipped_and_not_glued_to_the_next(tmp_path, capsys):
    path = tmp_path / "preds.jsonl"
    append_prediction(path, "a", "", "m")
    with open(path, "a") as handle:
        handle.write('{"instance_id": "b", "model_pa')  # a crash mid-write
    assert set(read_predictions(path)) == {"a"}  # read back: skipped, said so
    assert "unreadable prediction line" in capsys.readouterr().err
    append_prediction(path, "c", "", "m")  # the next append drops it: every line parses again
    assert [json.loads(line)["instance_id"] for line in path.read_text().splitlines()] == ["a", "c"]
    assert "dropping a torn last line" in capsys.readouterr().err


def test_show_rejects_non_trajectories_and_renders_real_ones(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a pinpoint trajectory"):
        load_trajectory(bad)
    data = {"format": "pinpoint-trajectory/1", "task": {"instance_id": "t-1"}, "status": "submitted",
            "messages": [{"role": "user", "content": "fix it"},
                         {"role": "assistant", "content": "", "tool_calls": [
                             {"id": "1", "function": {"name": "view", "arguments": '{"path": "a.py"}'}}]}],
            "suspects": [{"path": "a.py", "start_line": 3, "end_line": 3, "score": 0.5, "evidence": "[traceback #1] frame"}],
            "candidates": [{"id": "flare-1", "origin": "flare", "target": "a.py:3", "passed": 2, "failed": 0,
                            "ok": True, "edited_lines": 2}],
            "final_patch": "diff --git a/a.py b/a.py\n"}
    good = tmp_path / "t.json"
    good.write_text(json.dumps(data))
    out = io.StringIO()
    render(load_trajectory(good), Console(file=out, width=120))
    shown = out.getvalue()
    for expected in ("t-1", "submitted", "a.py:3", "[traceback #1] frame", "view(", "flare-1", "diff --git a/a.py"):
        assert expected in shown


def test_show_names_the_servers_model_a_run_would_use_when_none_is_named(tmp_path, monkeypatch, capsys):
    """With an endpoint and no model named, a run takes the server's first model: `config show` says that model,
    not the embedded one's name; a server that does not answer is said so, in one line, and nothing fails."""
    import socket

    from fake_llm_server import FakeScriptedLLMServer

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PINPOINT_MODEL", raising=False)
    with FakeScriptedLLMServer([], model="team-served-model") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        shown, err = _show(capsys)
        assert shown["llm"]["model"] == "team-served-model"
        assert f"llm.model: none named, so the first model {fake.base_url} lists" in err
        shown, err = _show(capsys, "--model", "named-model")  # a named model is used as named
        assert shown["llm"]["model"] == "named-model" and "llm.model" not in err
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    shown, err = _show(capsys, "--base-url", url)
    assert "SmolLM2" not in shown["llm"]["model"] and url in shown["llm"]["model"]
    [said] = [line for line in err.splitlines() if "llm.model" in line]
    assert "does not answer" in said
