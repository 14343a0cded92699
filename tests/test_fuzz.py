"""Bad input, fuzzed with Hypothesis: every malformed dataset row, tasks file, predictions file, patch, config,
trajectory file and tool call gets a one-line `pinpoint <command>: <message>` and exit 2 (tool calls: an error
observation for the model), never a traceback and never a file written.

The commands run in-process (`cli.main`), each against a fresh empty output folder that must still be empty
afterwards; a few subprocess runs prove that no traceback reaches a user's terminal. The figure printed at the end
(`bad input rejected cleanly: N/M`) is the one docs/security.md quotes:

    .venv/bin/python -m pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_lines import said
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pinpoint.agent.trajectory import FORMAT
from pinpoint.cli import main
from pinpoint.swebench_eval.datasets import load_instances
from tally import Tally, print_tallies

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "psf__requests-1142"
TALLY = Tally("bad input rejected cleanly")
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def _figures(request):
    yield
    print_tallies(request.config, TALLY)


@pytest.fixture(scope="module")
def row() -> dict:
    """A real SWE-bench dev row, in the dataset's own shape."""
    return load_instances(ids=[INSTANCE])[0].to_row()


@pytest.fixture(scope="module")
def one_row_dataset(tmp_path_factory, row) -> Path:
    path = tmp_path_factory.mktemp("dataset") / "one.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    subprocess.run("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm base",
                   shell=True, cwd=repo, check=True)
    return repo


#: if a bad input were ever accepted, the agent would reach this closed port and fail at once, not start a model
NO_MODEL = ["--set", "llm.base_url=http://127.0.0.1:9/v1", "--set", "llm.max_retries=0"]


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `pinpoint ARGV`, run in this process."""
    if argv[0] in ("run", "batch"):
        argv = [*argv, *NO_MODEL]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def rejected_cleanly(result: tuple[int, str, str], command: str) -> bool:
    """Exit 2, exactly one `pinpoint <command>: ...` line, nothing else on stderr but `pinpoint: ...` notes."""
    code, _, err = result
    lines = [line for line in said(err) if line.strip()]
    errors = [line for line in lines if line.startswith(f"pinpoint {command}: ")]
    others = [line for line in lines if not line.startswith("pinpoint")]
    return code == 2 and len(errors) == 1 and not others and "Traceback" not in err


def check(kind: str, result: tuple[int, str, str], command: str, out_dir: Path) -> None:
    ok = rejected_cleanly(result, command)
    written = [str(p) for p in out_dir.rglob("*")] if out_dir.exists() else []
    TALLY.count(kind, ok and not written)
    assert ok, f"exit {result[0]}; stderr:\n{result[2][-3000:]}"
    assert not written, f"a rejected input still wrote {written[:5]}"


# -- strategies ------------------------------------------------------------------------------------------------------
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
not_a_string = json_values.filter(lambda v: not isinstance(v, str))
garbage_lines = st.one_of(
    st.binary(min_size=1, max_size=80).map(lambda b: b.decode("latin-1")),
    st.text(min_size=1, max_size=80).filter(lambda t: t.strip() and not t.strip().startswith(("{", "["))),
    json_values.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
).filter(lambda line: line.strip() != "")  # a blank line is skipped by every loader: not a bad row


@st.composite
def broken_rows(draw, good: dict, required: tuple[str, ...], checks: dict) -> str:
    """One line of a JSONL file that a loader must refuse: a required field dropped or of the wrong type, a field
    its own check refuses (from `checks`), or a line that is not a JSON object at all."""
    how = draw(st.sampled_from(["drop", "type", "check", "garbage"]))
    row = dict(good)
    if how == "drop":
        del row[draw(st.sampled_from(required))]
    elif how == "type":
        row[draw(st.sampled_from(required))] = draw(not_a_string)
    elif how == "check":
        name = draw(st.sampled_from(sorted(checks)))
        row[name] = draw(checks[name])
    else:
        return draw(garbage_lines)
    return json.dumps(row)


def _write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    return path


# -- dataset rows: `run` and `eval --gold` -------------------------------------------------------------------------
DATASET_CHECKS = {
    "repo": st.text(max_size=20).filter(lambda t: t.count("/") != 1 or not t.strip()),
    "test_patch": st.text(max_size=40).filter(lambda t: not t.lstrip().startswith(("diff --git", "--- "))),
    "FAIL_TO_PASS": st.one_of(st.text(min_size=1, max_size=20).filter(lambda t: _not_a_name_list(t)),
                              st.lists(not_a_string, min_size=1, max_size=3)),
    "instance_id": st.just("   "),
}
DATASET_REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "version")


def _not_a_name_list(text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return True
    return not (isinstance(value, list) and all(isinstance(v, str) for v in value))


@FUZZ
@given(data=st.data())
def test_malformed_dataset_rows_are_refused_by_run_and_eval(row, data):
    line = data.draw(broken_rows(row, DATASET_REQUIRED, DATASET_CHECKS))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = _write(tmp, "rows.jsonl", json.dumps(row) + "\n" + line + "\n")
        out = tmp / "out"
        check("dataset row (run)", invoke(["run", INSTANCE, "--dataset", str(dataset), "--output", str(out)]),
              "run", out)
        check("dataset row (eval)", invoke(["eval", "--gold", "--dataset", str(dataset), "--output", str(out)]),
              "eval", out)


def test_a_row_whose_commit_is_not_in_the_repository_stops_run_before_any_build(row, tmp_path):
    dataset = _write(tmp_path, "rows.jsonl", json.dumps({**row, "base_commit": "0" * 40}) + "\n")
    out = tmp_path / "out"
    check("dataset row (run)", invoke(["run", INSTANCE, "--dataset", str(dataset), "--output", str(out)]), "run", out)


# -- local tasks: `batch --tasks` ---------------------------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_malformed_task_rows_are_refused_by_batch(small_repo, data):
    good = {"instance_id": "t1", "problem_statement": "fix f", "repo_path": str(small_repo)}
    checks = {"repo_path": st.sampled_from(["/nonexistent/repo", str(small_repo / "pkg" / "mod.py"), ""]),
              "base_commit": not_a_string.filter(lambda v: v is not None),
              "test_command": not_a_string.filter(lambda v: v is not None)}
    line = data.draw(broken_rows(good, ("instance_id", "problem_statement", "repo_path"), checks))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tasks = _write(tmp, "tasks.jsonl", line + "\n")
        out = tmp / "out"
        check("tasks row (batch)", invoke(["batch", "--tasks", str(tasks), "--output", str(out), "--quiet"]),
              "batch", out)


# -- predictions and their patches: `eval --predictions` ----------------------------------------------------------------
def _diff(path: str, body: str = "@@ -1 +1 @@\n-a\n+b\n") -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{body}"


segments = st.text(st.characters(categories=["L", "N"], include_characters="_-."), min_size=1, max_size=8)
outside_paths = st.one_of(
    st.lists(segments, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)),
    st.tuples(st.lists(segments, max_size=2), st.lists(segments, min_size=1, max_size=2)).map(
        lambda t: "/".join([*t[0], *[".."] * (len(t[0]) + 1), *t[1]])),  # one `..` more than it went down
)
bad_patches = st.one_of(
    outside_paths.map(_diff),  # touches a path outside the repository
    outside_paths.map(lambda p: f"--- a/requests/models.py\n+++ {p}\n@@ -1 +1 @@\n-a\n+b\n"),
    st.sampled_from(["\x00", "\udcff"]).map(lambda c: _diff("requests/models.py", f"@@ -1 +1 @@\n-a\n+b{c}\n")),
    st.just(_diff("requests/models.py").replace("\n", "\r\n")),  # CRLF in the diff headers
    st.integers(min_value=11, max_value=12).map(lambda mb: _diff("requests/models.py", "+x\n" * (mb * 350_000))),
)


@FUZZ
@given(data=st.data())
def test_malformed_predictions_and_patches_are_refused_by_eval(one_row_dataset, data):
    good = {"instance_id": INSTANCE, "model_name_or_path": "m", "model_patch": ""}
    checks = {"model_patch": bad_patches | not_a_string.filter(lambda v: v is not None)}
    line = data.draw(broken_rows(good, ("instance_id",), checks))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        preds = _write(tmp, "preds.jsonl", line + "\n")
        out = tmp / "out"
        result = invoke(["eval", "--predictions", str(preds), "--dataset", str(one_row_dataset),
                         "--instance", INSTANCE, "--output", str(out)])
        check("prediction (eval)", result, "eval", out)


@FUZZ
@given(patch=bad_patches)
def test_bad_patches_are_refused_before_any_container(patch):
    from pinpoint.swebench_eval.patches import check_patch

    try:
        check_patch(patch, "preds.jsonl line 1")
    except ValueError as exc:
        message = str(exc)
        TALLY.count("patch (check)", "\n" not in message and message.startswith("preds.jsonl line 1"))
        assert "\n" not in message and message.startswith("preds.jsonl line 1"), message
        return
    TALLY.count("patch (check)", False)
    raise AssertionError("accepted a bad patch")


def test_a_patch_without_its_final_newline_is_accepted_as_the_harness_accepts_it():
    from pinpoint.swebench_eval.patches import check_patch

    check_patch(_diff("requests/models.py").rstrip("\n"), "preds.jsonl line 1")  # apply_patch adds the newline


# -- configs: every command that takes --config / --set ---------------------------------------------------------------
SECTIONS = ("llm", "budget", "search", "agent", "runs", "runtime", "nope")
config_docs = st.one_of(
    st.text(max_size=120),
    st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    st.dictionaries(st.sampled_from(SECTIONS), json_values, min_size=1, max_size=3).map(json.dumps),
    st.dictionaries(st.sampled_from(SECTIONS), st.dictionaries(st.sampled_from(
        ["max_steps", "timeout_s", "model", "policy", "mem_limit", "cpus", "base_url", "x"]), json_values,
        min_size=1, max_size=3), min_size=1, max_size=2).map(json.dumps),
)


@FUZZ
@given(doc=config_docs, suffix=st.sampled_from([".yaml", ".toml", ".yml"]),
       override=st.text(max_size=40))
def test_malformed_configs_and_overrides_are_refused(one_row_dataset, doc, suffix, override):
    """The instance id names no row, so a config that happens to be valid still ends in a clean refusal."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = _write(tmp, f"config{suffix}", doc)
        out = tmp / "out"
        base = ["run", "no-such-instance", "--dataset", str(one_row_dataset), "--output", str(out)]
        check("config file (run)", invoke([*base, "--config", str(config)]), "run", out)
        check("--set override (run)", invoke([*base, "--set", override]), "run", out)


# -- trajectory files: `show` -----------------------------------------------------------------------------------------
TRAJECTORY_FIELDS = ("task", "status", "detail", "model", "steps", "prompt_tokens", "completion_tokens", "cost_usd",
                     "elapsed_s", "edited_lines", "suspects", "messages", "candidates", "test_runs", "final_patch",
                     "patch")
trajectories = st.one_of(
    st.binary(max_size=120),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"format": st.just(FORMAT)}, optional={k: json_values for k in TRAJECTORY_FIELDS}).map(
        lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries({"format": st.just(FORMAT), "messages": st.lists(st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls"]), json_values), min_size=1, max_size=3)}).map(
        lambda d: json.dumps(d).encode()),
)


@FUZZ
@given(content=trajectories, flags=st.sampled_from([[], ["--full"], ["--json"]]))
def test_trajectory_files_are_shown_or_refused_in_one_line(content, flags):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "trajectory.json", content)
        code, out, err = invoke(["show", str(path), *flags])
        ok = code == 0 and not err.strip() or rejected_cleanly((code, out, err), "show")
        TALLY.count("trajectory file (show)", ok)
        assert ok, f"exit {code}; stderr:\n{err[-3000:]}"


# -- tool-call arguments: the model's mistakes become observations ---------------------------------------------------
TOOL_NAMES = ("view", "search", "str_replace_editor", "run_tests", "submit", "bash", "")
tool_arguments = st.one_of(
    st.text(max_size=60),  # raw argument text (often not JSON)
    json_values,
    st.fixed_dictionaries({}, optional={
        "command": st.sampled_from(["view", "create", "str_replace", "insert", "undo_edit", "rm"]) | json_values,
        "path": st.sampled_from(["pkg/mod.py", "pkg", "", "/etc/passwd", "../outside.txt", "pkg/../../x.py",
                                 "pkg/new.py", "pkg/mod.py/x"]) | json_values,
        "old_str": st.sampled_from(["return 1", "", "nope"]) | json_values,
        "new_str": st.text(max_size=20) | json_values,
        "file_text": st.text(max_size=40) | json_values,
        "insert_line": st.integers(-3, 10) | json_values,
        "view_range": st.lists(st.integers(-5, 50), max_size=3) | json_values,
        "query": st.text(max_size=10) | json_values,
        "kind": st.sampled_from(["text", "file", "symbol", "x"]),
        "regex": json_values,
    }),
)


@pytest.fixture(scope="module")
def tool_runtime(small_repo):
    from pinpoint.environments.local import LocalRuntime

    with LocalRuntime(small_repo) as runtime:
        yield runtime


@FUZZ
@given(name=st.sampled_from(TOOL_NAMES), arguments=tool_arguments)
def test_malformed_tool_calls_become_error_observations(tool_runtime, small_repo, name, arguments):
    from pinpoint.tools.registry import call_tool, default_tools

    if name == "run_tests" and isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        arguments = {**arguments, "command": 1}  # never run generated shell on the host: the schema must refuse it
    outside = Path(tool_runtime.workdir).parent
    before = set(outside.iterdir())
    try:
        result = call_tool(default_tools(), name, arguments, tool_runtime)
        ok = isinstance(result.output, str) and result.output.strip() != "" and set(outside.iterdir()) == before
        TALLY.count("tool call", ok)
        assert ok, (name, arguments, result)
    finally:
        tool_runtime.reset()


# -- what a user's terminal shows -------------------------------------------------------------------------------------
def test_no_traceback_reaches_the_terminal(tmp_path, one_row_dataset):
    binary = _write(tmp_path, "t.json", b"\x89PNG\r\n\x1a\n\x00\x00")
    preds = _write(tmp_path, "p.jsonl", json.dumps({"instance_id": INSTANCE, "model_patch": _diff("/etc/passwd")}))
    tasks = _write(tmp_path, "tasks.jsonl", '{"instance_id": 3}\n')
    config = _write(tmp_path, "c.yaml", "llm: [unclosed\n")
    cases = [
        ("show", ["show", str(binary)]),
        ("eval", ["eval", "--predictions", str(preds), "--dataset", str(one_row_dataset), "--output",
                  str(tmp_path / "out")]),
        ("batch", ["batch", "--tasks", str(tasks), "--output", str(tmp_path / "out")]),
        ("run", ["run", INSTANCE, "--config", str(config), "--output", str(tmp_path / "out")]),
    ]
    for command, argv in cases:
        proc = subprocess.run([sys.executable, "-m", "pinpoint.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        ok = rejected_cleanly((proc.returncode, proc.stdout, proc.stderr), command)
        TALLY.count("terminal (subprocess)", ok)
        assert ok, f"{argv}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert not (tmp_path / "out").exists()
