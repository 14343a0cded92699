"""Edit candidates at the suspect lines: what they are, their order, the search's budget, failing tests first, a
hanging candidate bounded, and a real container run where they repair a planted bug while the model talks nonsense."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm_server import FakeScriptedLLMServer, text
from pinpoint.agent.search import CandidateBudget, Node, candidate_search, focused_command
from pinpoint.agent.test_runs import run_test_command
from pinpoint.environments.local import LocalRuntime
from pinpoint.localization.candidates import (
    KIND_DELAY,
    LINE_WEIGHT,
    ordered,
    pair_candidates,
    single_candidates,
)
from pinpoint.localization.suspects import Suspect
from pinpoint.tools.run_tests import HANG_FLOOR_S, TestRun, hang_bound

CLASS_BUG = '''class Account:
    def __init__(self):
        self.balance = 0

    def withdraw(self, amount):
        if amount < self.balance:
            self.balance -= amount
        return self.balance
'''


def test_a_one_token_fix_inside_a_method_is_a_candidate_and_keeps_the_file_intact():
    found = single_candidates({"bank.py": CLASS_BUG}, [("bank.py", 6)])
    fixed = CLASS_BUG.replace("amount < self.balance", "amount <= self.balance")
    fix = next(c for c in found if c.apply(CLASS_BUG) == fixed)
    assert (fix.first, fix.last, fix.source, fix.kinds) == (6, 6, "edit", ("other_operator",))
    assert fix.replacement == "        if amount <= self.balance:" and fix.size == 1
    assert all(c.lines == (6,) for c in found)  # only the suspect line is edited


def test_without_likelihood_the_higher_suspect_line_and_operator_edits_come_first():
    code = "def f(a, b):\n    c = a + 1\n    return c * b\n"
    found = ordered(single_candidates({"m.py": code}, [("m.py", 3), ("m.py", 2)]))
    cheap = [c for c in found if not set(c.kinds) & set(KIND_DELAY)]
    assert [c.rank for c in cheap] == sorted(c.rank for c in cheap) and found[0].lines == (3,)
    assert found[0].kinds == ("other_operator",)
    # the kinds with many edits a line wait for the cheap edits of the next lines
    misuse = next(i for i, c in enumerate(found) if c.kinds == ("variable_misuse",) and c.rank == 0)
    assert misuse > max(i for i, c in enumerate(found) if c.rank == 1 and c in cheap)


def test_with_likelihood_the_likeliest_edit_on_the_second_line_overtakes_most_of_the_top_line():
    from dataclasses import replace

    code = "def f(a, b):\n    c = a + 1\n    return c * b\n"
    found = single_candidates({"m.py": code}, [("m.py", 3), ("m.py", 2)])
    target = next(i for i, c in enumerate(found) if c.rank == 1)
    scored = [replace(c, gain=10.0 if i == target else -float(i)) for i, c in enumerate(found)]
    order = ordered(scored)
    top_line = [c for c in order if c.rank == 0]
    assert len(top_line) > LINE_WEIGHT + 1
    # one step down the suspect list costs LINE_WEIGHT places in the likelihood order, no more
    assert order.index(scored[target]) <= LINE_WEIGHT
    assert order.index(scored[target]) < order.index(top_line[int(LINE_WEIGHT)])


def test_a_pair_fixes_two_lines_no_single_edit_can():
    code = "def f(a):\n    x = a + 1\n    y = x * 2\n    return y\n"
    fixed = "def f(a):\n    x = a - 1\n    y = x + 2\n    return y\n"
    singles = ordered(single_candidates({"m.py": code}, [("m.py", 2), ("m.py", 3)]))
    assert not any(c.apply(code) == fixed for c in singles)
    pairs = pair_candidates(singles, limit=200)
    assert any(c.apply(code) == fixed and c.source == "pair" and c.lines == (2, 3) for c in pairs)
    assert len(pair_candidates(singles, limit=3)) == 3


def test_a_dropped_result_gets_a_return():
    code = "def double(a):\n    a * 2\n"
    found = single_candidates({"m.py": code}, [("m.py", 2)])
    assert any(c.source == "insertion" and c.apply(code) == "def double(a):\n    return a * 2\n" for c in found)


def _fixes(code: str, fixed: str, lines: list[int], kind: str) -> bool:
    found = single_candidates({"m.py": code}, [("m.py", line) for line in lines])
    return any(c.kinds == (kind,) and c.apply(code) == fixed for c in found)


def test_a_variable_used_for_another_is_a_candidate_and_parameters_stay_declared():
    code = "def power(x, n):\n    p = 1\n    while p < n:\n        p *= x\n    return p\n"
    fixed = "def power(x, n):\n    p = 1\n    while p < x:\n        p *= x\n    return p\n"
    assert _fixes(code, fixed, [3], "variable_misuse")
    found = single_candidates({"m.py": code}, [("m.py", 1)])
    assert not any(c.kinds == ("variable_misuse",) for c in found)  # `def power(x, n)` is not rewritten


def test_a_sibling_function_or_another_function_of_the_file_is_a_candidate():
    code = "def big(xs):\n    return min(xs)\n\n\ndef twice(s):\n    return s.endswith('a')\n"
    assert _fixes(code, code.replace("min(", "max("), [2], "function_misuse")
    assert _fixes(code, code.replace(".endswith(", ".startswith("), [6], "function_misuse")
    helpers = "def inc(x):\n    return x + 1\n\n\ndef dec(x):\n    return x - 1\n\n\ndef f(x):\n    return inc(x)\n"
    assert _fixes(helpers, helpers.replace("return inc(x)", "return dec(x)"), [10], "function_misuse")


def test_swapped_operands_and_a_missing_call_are_candidates():
    code = "def gap(a, b):\n    return a - b\n"
    assert _fixes(code, "def gap(a, b):\n    return b - a\n", [2], "swap_operands")
    assert _fixes(code, "def gap(a, b):\n    return abs(a - b)\n", [2], "missing_call")


def test_a_guard_for_empty_input_is_inserted_after_the_docstring():
    code = 'def first(xs):\n    """The first item."""\n    return xs[0]\n'
    fixed = 'def first(xs):\n    """The first item."""\n    if not xs:\n        return None\n    return xs[0]\n'
    found = single_candidates({"m.py": code}, [("m.py", 3)])
    guard = next(c for c in found if c.kinds == ("guard",) and c.apply(code) == fixed)
    assert guard.source == "insertion" and guard.first == 3 and guard.last == 2


def test_each_kind_is_bounded_per_line():
    names = ", ".join(f"v{i}" for i in range(40))
    code = f"def f({names}):\n    return v0 + v1\n"
    found = single_candidates({"m.py": code}, [("m.py", 2)])
    assert 0 < sum(c.kinds == ("variable_misuse",) for c in found) <= 24


def _repo(path: Path, source: str, test: str) -> None:
    (path / "tests").mkdir(parents=True)
    (path / "calc.py").write_text(source)
    (path / "tests" / "test_calc.py").write_text(test)
    git = ["git", "-C", str(path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "calc"], check=True)


CALC = "def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n"
CALC_TESTS = ("import sys\nsys.path.insert(0, '.')\nfrom calc import add, neg\n\n\n"
              "def test_add():\n    assert add(2, 3) == 5\n\n\ndef test_neg():\n    assert neg(2) == -2\n\n\n"
              "if __name__ == '__main__':\n    test_add()\n    test_neg()\n")


def _search(runtime: LocalRuntime, command: str, budget: CandidateBudget, lines: tuple[int, ...] = (2,)):
    start = Node("", run_test_command(runtime, command, 60))
    suspects = [Suspect("calc.py", line, line, 1.0, "test", "planted") for line in lines]
    return candidate_search(runtime, "add returns a wrong sum", start, suspects, test_command=command,
                            timeout=hang_bound(start.outcome, 60), budget=budget)


def test_the_search_runs_the_failing_test_first_and_keeps_the_plausible_patch(tmp_path):
    _repo(tmp_path / "repo", CALC, CALC_TESTS)
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
    with LocalRuntime(tmp_path / "repo") as runtime:
        result = _search(runtime, command, CandidateBudget(runs=20, plausible=1))
        assert result.improved and result.best.outcome.ok and result.best.outcome.passed == 2
        assert "+    return a + b" in result.best.patch
    at = next(i for i, r in enumerate(result.candidates) if r["ok"])
    winner = result.candidates[at]
    assert winner["focused"].endswith("tests/test_calc.py::test_add") and " tests " not in winner["focused"] + " "
    assert winner["source"] == "edit" and winner["edit"].startswith("calc.py:2 other_operator")
    assert all(r["status"] == "failing tests still fail" for r in result.candidates[:at])


def test_a_removal_that_passes_beats_an_operator_swap_that_passes_for_the_same_reason(tmp_path):
    _repo(tmp_path / "repo", "def frac(x):\n    return x % 1.0 + 1.0\n",
          "import sys\nsys.path.insert(0, '.')\nfrom calc import frac\n\nassert frac(3.5) == 0.5\n")
    command = f"{sys.executable} tests/test_calc.py"
    with LocalRuntime(tmp_path / "repo") as runtime:
        result = _search(runtime, command, CandidateBudget(runs=40, plausible=2))
    passing = [r for r in result.candidates if r["ok"]]
    assert any("other_operator" in r["kinds"] for r in passing)  # `* 1.0` passes too
    assert result.best.patch.count("\n+    return x % 1.0\n") == 1


def test_the_search_stops_at_its_run_budget(tmp_path):
    _repo(tmp_path / "repo", "def f(a, b):\n    c = a + 1\n    return c * b\n", "assert False, 'never passes'\n")
    command = f"{sys.executable} tests/test_calc.py"
    with LocalRuntime(tmp_path / "repo") as runtime:
        result = _search(runtime, command, CandidateBudget(runs=3, pairs=1), lines=(2, 3))
    assert not result.improved and len(result.candidates) == 3
    assert [r["source"] for r in result.candidates] == ["edit", "edit", "pair"]


def test_focused_command_replaces_the_paths_with_the_failing_ids(tmp_path):
    _repo(tmp_path / "repo", CALC, CALC_TESTS)
    with LocalRuntime(tmp_path / "repo") as runtime:
        narrowed = focused_command(runtime, "python -m pytest -q -p no:cacheprovider tests", ["tests/t.py::test_x"])
        assert narrowed == "python -m pytest -q -p no:cacheprovider tests/t.py::test_x"
        assert focused_command(runtime, "make test", ["tests/t.py::test_x"]) is None
        assert focused_command(runtime, "pytest tests", []) is None


LOOPING = "def countdown(n):\n    while n != 0:\n        n -= 2\n    return n\n"
LOOP_TEST = "import sys\nsys.path.insert(0, '.')\nfrom calc import countdown\n\nassert countdown(1) == 0\n"


def test_a_hanging_candidate_is_a_failing_one_and_the_search_goes_on(tmp_path):
    # countdown(1) loops forever with `-= 2`, and so do some of its candidates (`+= 2`, `*= 2`)
    _repo(tmp_path / "repo", LOOPING, LOOP_TEST)
    command = f"{sys.executable} tests/test_calc.py"
    with LocalRuntime(tmp_path / "repo") as runtime:
        start = Node("", run_test_command(runtime, command, 3))
        assert start.outcome.timed_out and not start.outcome.ok
        assert "a hang" in start.outcome.render()
        result = candidate_search(runtime, "countdown never returns for odd n", start,
                                  [Suspect("calc.py", 3, 3, 1.0, "test", "planted")], test_command=command,
                                  timeout=3, budget=CandidateBudget(runs=20, plausible=1))
    assert any(r.get("timed_out") for r in result.candidates)
    assert result.improved and result.best.outcome.ok


#: a product whose test kills the box's command server when the candidate makes it a sum (the first edit tried)
MUL = "def mul(a, b):\n    return a // b\n"
MUL_TEST = ("import os\nimport sys\nsys.path.insert(0, '.')\nfrom calc import mul\n\n"
            "if mul(2, 3) == 5:\n    os.system(KILL)\nassert mul(2, 3) == 6\n")


@pytest.mark.docker
def test_a_candidate_that_kills_the_box_costs_its_own_run_and_the_search_goes_on(requests_image):
    from pinpoint.environments.adversarial import KILL_SERVER
    from pinpoint.environments.docker_runtime import DockerRuntime
    from pinpoint.swebench_eval.patches import apply_patch

    with DockerRuntime(requests_image) as runtime:
        runtime.write_file("calc.py", MUL)
        runtime.write_file("calc_check.py", MUL_TEST.replace("KILL", repr(KILL_SERVER)))
        start_patch = runtime.diff()
        command = "python calc_check.py"
        start = Node(start_patch, run_test_command(runtime, command, 60))
        assert not start.outcome.ok
        result = candidate_search(runtime, "mul returns a wrong product", start,
                                  [Suspect("calc.py", 2, 2, 1.0, "test", "planted")], test_command=command,
                                  timeout=60, budget=CandidateBudget(runs=20, plausible=1))
        broke = [r for r in result.candidates if r.get("broke_box")]
        assert broke and broke[0]["edit"].endswith("return a + b") and "broke the box" in broke[0]["status"]
        assert result.improved and "+    return a * b" in result.best.patch
        apply_patch(runtime, result.best.patch)  # the fresh box takes the winner
        assert run_test_command(runtime, command, 60).ok


def test_a_candidate_that_ruins_a_local_checkout_ends_the_search_with_a_reason_not_a_crash(tmp_path):
    _repo(tmp_path / "repo", MUL, MUL_TEST.replace("os.system(KILL)", "os.system('rm -rf .git')"))
    command = f"{sys.executable} tests/test_calc.py"
    with LocalRuntime(tmp_path / "repo") as runtime:
        result = _search(runtime, command, CandidateBudget(runs=20, plausible=1))
    assert not result.improved and result.best.patch == ""
    assert "the box could not be reset, the search stops" in result.candidates[-1]["status"]
    assert len(result.candidates) == 2  # the one that ruined it, then the one that found it ruined


def test_hang_bound_follows_the_measured_suite_within_floor_and_cap():
    run = TestRun("pytest", 0, seconds=30.0)
    assert hang_bound(run, 600) == 150.0 and hang_bound(run, 100) == 100
    assert hang_bound(TestRun("pytest", 0, seconds=0.1), 600) == HANG_FLOOR_S
    assert hang_bound(TestRun("pytest", None, timed_out=True, timeout=40, seconds=40.0), 600) == 40


@pytest.mark.docker
def test_in_a_container_the_candidates_repair_a_planted_bug_while_the_model_answers_nonsense(tmp_path,
                                                                                              docker_client):
    from pinpoint.cli import main

    repo = tmp_path / "team-repo"
    _repo(repo, CALC, CALC_TESTS)
    (repo / "requirements.txt").write_text("# no third-party dependencies\n")
    subprocess.run(["git", "-C", str(repo), "add", "requirements.txt"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "req"],
                   check=True)
    issue = tmp_path / "issue.txt"
    issue.write_text("`add` in calc.py returns a wrong sum: add(2, 3) gives -1.")
    with FakeScriptedLLMServer(default=text("I like turtles. ```\nbanana\n```")) as fake:
        code = main(["fix", str(repo), "--issue", str(issue), "--test-cmd", "python tests/test_calc.py",
                     "--offline", "--branch", "pinpoint/fix", "--output", str(tmp_path / "out"),
                     "--set", "agent.review_on_submit=false", "--set", "budget.max_steps=3",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake-nonsense"])
    assert code == 0
    [path] = (tmp_path / "out" / "fix" / "fake-nonsense" / "trajectories").glob("*/trajectory.json")
    trajectory = json.loads(path.read_text())
    assert trajectory["runtime"] == "DockerRuntime" and trajectory["status"] == "submitted"
    winner = [c for c in trajectory["candidates"] if c["ok"]]
    assert winner and winner[0]["origin"] == "candidate" and winner[0]["source"] == "edit"
    assert not [c for c in trajectory["candidates"] if c["origin"] != "candidate"]  # no revision was bought
    shown = subprocess.run(["git", "-C", str(repo), "show", "pinpoint/fix"], capture_output=True, text=True)
    assert "+    return a + b" in shown.stdout


def test_a_first_run_that_hangs_bounds_every_later_run_and_says_so():
    from pinpoint.agent.config import load_config
    from pinpoint.agent.test_runs import bounded_by, first_run_timeout

    config = load_config(**{"agent.first_test_timeout_s": 7.0})
    assert first_run_timeout(config) == 7.0
    hung, note = bounded_by(config, TestRun("pytest", None, timed_out=True, timeout=7.0, seconds=7.0))
    assert hung.agent.test_timeout_s == 7.0 and "taken as a hang" in note and "agent.first_test_timeout_s" in note
    quick, note = bounded_by(config, TestRun("pytest", 1, seconds=0.2))
    assert quick.agent.test_timeout_s == HANG_FLOOR_S and note is None
    assert config.agent.test_timeout_s == 600.0  # the caller's config is left as it was


@pytest.mark.slow
@pytest.mark.host_only
def test_fix_local_on_a_repository_that_loops_forever_says_hang_and_repairs_it(tmp_path, capsys):
    from pinpoint.cli import main

    repo = tmp_path / "loop-repo"
    _repo(repo, LOOPING, LOOP_TEST.replace("assert countdown(1) == 0\n",
                                           "\n\ndef test_odd():\n    assert countdown(1) == 0\n"))
    issue = tmp_path / "issue.txt"
    issue.write_text("`countdown` in calc.py never returns for odd numbers.")
    with FakeScriptedLLMServer(default=text("no idea")) as fake:
        code = main(["fix", str(repo), "--issue", str(issue), "--local", "--test-cmd",
                     f"{sys.executable} -m pytest -q -p no:cacheprovider tests", "--output", str(tmp_path / "out"),
                     "--set", "agent.first_test_timeout_s=5", "--set", "agent.execution=false",
                     "--set", "agent.review_on_submit=false", "--set", "budget.max_steps=2",
                     "--base-url", fake.base_url, "--model", "fake-nonsense"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "did not finish in 5 s on HEAD: taken as a hang" in err
    [path] = (tmp_path / "out").glob("fix/*/trajectories/*/trajectory.json")
    trajectory = json.loads(path.read_text())
    assert trajectory["status"] == "submitted"
    assert any(c["ok"] and c["origin"] == "candidate" for c in trajectory["candidates"])


def test_the_rl_candidates_policy_repairs_the_demo_bug_through_tool_calls(demo_task):
    from pinpoint.agent.candidate_policy import CandidatesPolicy
    from pinpoint.rl.env import EnvSettings, RepairEnv
    from pinpoint.rl.suspects import LineSuspect, suspects_message

    listed = suspects_message([LineSuspect("numeric/functions.py", 10, 1.0, ("spectrum",), "truncate_number")])
    policy = CandidatesPolicy(demo_task)
    with RepairEnv(EnvSettings(reward="unit")) as env:
        observation, _ = env.reset(options={"task": demo_task})
        messages = [{"role": "user", "content": observation + "\n\n" + listed}]  # as suspects="oracle" lists them
        names = []
        for _ in range(30):
            action, _ = policy.act(messages)
            names.append(action["name"])
            observation, reward, terminated, truncated, info = env.step(action)
            messages.append({"role": "user", "content": observation})
            if terminated or truncated:
                break
    assert (reward, info["outcome"]) == (1.0, "resolved")
    assert names[0] == "view" and names[-1] == "submit" and "run_tests" in names
    assert names.count("str_replace_editor") % 2 == 1  # every failed candidate undone, the passing one kept
