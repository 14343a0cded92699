"""`pinpoint inspect` in a real browser (headless Debian Chromium through Playwright), on real runs: the demo run
in a fixture (the embedded model on the HumanEvalFix bug) and, with Docker, a SWE-bench run in its instance
container graded by the official logic (its model is the FAKE scripted server replaying the gold edit, so the
verdict has a diff and flipped tests to show). Set PINPOINT_SCREENSHOTS=docs/inspector to refresh the screenshots
docs/inspector.md shows."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inspector_pages import go, inspect_command, screenshot, served, wait_drawn
from pinpoint.cli import main

VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def browser():
    from pinpoint.inspector.browser import chromium

    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inspect-runs")


@pytest.fixture(scope="module")
def demo_run(runs_root: Path) -> tuple[Path, str]:
    """`pinpoint demo` as a user runs it: the trajectory folder and the inspect command it ends by printing."""
    proc = subprocess.run([sys.executable, "-m", "pinpoint.cli", "demo", "--output", str(runs_root)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("see it in a browser: pinpoint inspect "), last
    command = last.removeprefix("see it in a browser: ")
    folder = Path(shlex.split(command)[2])
    assert (folder / "trajectory.json").is_file()
    return folder, command


@pytest.fixture(scope="module")
def fix_run(tmp_path_factory) -> tuple[Path, Path, dict]:
    """`pinpoint fix` on a team's own repository (a real git repository with a pytest suite and a planted bug in
    calc/stats.py), the model the FAKE scripted server making the fix: the repository, the run folder and its
    trajectory. One run for the module's tests."""
    from fake_llm_server import FakeScriptedLLMServer
    from test_fix_own_repo import FAST, ISSUE, PYTEST, _script, make_team_repo

    root = tmp_path_factory.mktemp("fix-run")
    repo = make_team_repo(root / "team-app")
    (root / "issue.md").write_text(ISSUE)
    with FakeScriptedLLMServer(_script()) as fake:
        assert main(["fix", str(repo), "--issue", str(root / "issue.md"), "--local", "--test-cmd", f"{PYTEST} -q tests",
                     "--output", str(root / "out"), "--set", "search.policy=none", "--base-url", fake.base_url, *FAST]) == 0
    [trajectory] = (root / "out" / "fix").glob("*/trajectories/*/trajectory.json")
    return repo, trajectory.parent, json.loads(trajectory.read_text())


#: helpers the issue names, each at its line of the long calc/stats.py; the buggy `mean` comes last, at line 2184
HELPERS = {"total": 408, "count": 808, "spread": 1208, "middle": 1608}


def _long_stats() -> str:
    """calc/stats.py grown to 2,185 lines, as a team's module is: the helpers at HELPERS' lines, then `mean`."""
    def pad(lo: int, hi: int) -> str:
        return "".join(f"def scale_{i:04d}(values):\n    return [v * {i} for v in values]\n\n\n" for i in range(lo, hi))

    bodies = {"total": "sum(values)", "count": "len(values)", "spread": "max(values) - min(values)",
              "middle": "sorted(values)[len(values) // 2]"}
    text, done = '"""Summary statistics."""\n\n\n', 0
    for name, at in HELPERS.items():
        upto = done + (at - 4 - done * 4 - 4 * list(HELPERS).index(name)) // 4
        text += pad(done, upto) + f"def {name}(values):\n    return {bodies[name]}\n\n\n"
        done = upto
    return text + pad(done, 545 - len(HELPERS)) + "def mean(values):\n    return total(values) / (len(values) + 1)\n"


@pytest.fixture(scope="module")
def two_fix_runs(tmp_path_factory) -> Path:
    """`pinpoint fix` twice on one issue of a team's repository whose buggy function sits deep in a long module
    (the issue names four helpers too, so suspects lie far apart), the second run with another step budget: two run
    folders of one issue under one results root; the model is the FAKE scripted server. Returns that root."""
    from fake_llm_server import FakeScriptedLLMServer
    from test_fix_own_repo import FAST, MODULES, PYTEST, _git, _script

    root = tmp_path_factory.mktemp("two-fix-runs")
    repo = root / "team-app"
    for name, text in {**MODULES, "calc/stats.py": _long_stats()}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(root, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    (root / "issue.md").write_text("# mean() is off for every list\n\n`calc.stats.mean([1, 2, 3])` returns 1.5 "
                                   "instead of 2, though `total`, `count`, `spread` and `middle` are right for it.\n")
    for budget in ("30", "20"):
        with FakeScriptedLLMServer(_script()) as fake:
            assert main(["fix", str(repo), "--issue", str(root / "issue.md"), "--local", "--test-cmd",
                         f"{PYTEST} -q tests", "--output", str(root / "out"), "--set", "search.policy=none",
                         "--set", f"budget.max_steps={budget}", "--base-url", fake.base_url, *FAST]) == 0
    return root / "out"


def click_tab(page, view: str) -> None:
    before = page.evaluate("document.body.dataset.ready")
    page.click(f"#tab-{view}")
    wait_drawn(page, before)


def line(page, path: str, number: int):
    return page.locator(f'section.file[data-path="{path}"] tr[data-line="{number}"]')


@pytest.mark.slow
def test_the_demo_through_its_printed_command_buggy_line_first_candidates_verdict(demo_run, browser):
    from pinpoint.agent.demo import MODULE, demo_tasks
    from pinpoint.agent.nodes import patch_sha

    folder, command = demo_run
    data = json.loads((folder / "trajectory.json").read_text())
    buggy = next(t for t in demo_tasks()["tasks"] if t["task_id"] == "Python/2")
    with inspect_command(command) as url:
        page = browser.new_page(viewport=VIEWPORT)
        go(page, url)
        assert "#/t/" in page.url and page.url.endswith("/timeline")  # one trajectory opens directly
        assert page.inner_text("#status") == data["status"]
        assert page.inner_text("#c-steps .v") == str(data["steps"])
        glance = page.inner_text("#glance")  # the buggy line, the candidates and the verdict at once
        assert f"gold line ranks #1 ({MODULE}:10)" in glance and f"{len(data['candidates'])} candidate(s)" in glance
        nodes = [e for e in data["events"] if e["kind"] == "node"]
        assert page.locator("#steps details.step").count() == len(nodes)
        assert page.locator("#gantt rect").count() == len(nodes)
        calls = [e for e in data["events"] if e["kind"] == "llm" and e.get("logprobs")]
        assert calls, "the embedded model returns log-probabilities"
        low = sum(1 for e in calls for _, lp in e["logprobs"] if lp < -0.6931471805599453)
        assert page.inner_text("#c-low .v") == f"{low} of {sum(len(e['logprobs']) for e in calls)}"
        first_call = next(i for i, e in enumerate(data["events"]) if e is calls[0])
        step = sum(1 for e in data["events"][:first_call] if e["kind"] == "node")  # a call precedes its node
        page.locator("#steps details.step").nth(step).locator("summary").click()
        page.locator("details.event.llm > summary").first.click()
        page.locator("details.event.llm .toks span").first.wait_for()  # drawn when opened
        assert page.locator("details.event.llm .toks span").count() == len(calls[0]["logprobs"])
        screenshot(page, "timeline")

        click_tab(page, "messages")
        assert page.locator("#messages .msg").count() == min(len(data["messages"]), 100)
        screenshot(page, "messages")

        click_tab(page, "localization")
        first = page.locator("section.file").first
        assert first.get_attribute("data-path") == MODULE
        bug_line = line(page, MODULE, 10)
        assert "gold" in bug_line.get_attribute("class")
        assert bug_line.get_attribute("data-rank") == "1" and page.inner_text("#gold-rank") == "#1"
        numbered = [r for r in page.locator("tr.line").all() if r.locator("td.r").inner_text()]
        assert numbered and all(r.get_attribute("data-entry") == "line" for r in numbered)  # no rank on a span line
        assert len(buggy["buggy_lines"]) == page.locator("tr.line.gold").count()
        bug_line.hover()
        assert "fused #1" in page.inner_text("#tip") and "GOLD" in page.inner_text("#tip")
        screenshot(page, "localization")
        toggled = [s for s in page.locator("#signals input[data-signal]:not([disabled])").all()
                   if s.get_attribute("data-signal") != "lexical"]
        for box in toggled:  # lexical alone names the whole file: line 1 comes first, the bug does not
            box.uncheck()
        assert "re-fused" in page.inner_text("#fusion-mode") and "lexical" in page.inner_text("#fusion-mode")
        # lexical's whole-file span is one entry: the bug line sits inside it, shaded but not numbered
        assert bug_line.get_attribute("data-entry") == "span" and bug_line.locator("td.r").inner_text() == ""
        assert "inside a span" in page.inner_text("#gold-rank")
        for box in toggled:
            box.check()
        assert bug_line.get_attribute("data-rank") == "1" and "as the agent recorded" in page.inner_text(
            "#fusion-mode")

        click_tab(page, "search")
        assert page.locator("li.cand").count() == len(data["candidates"]) > 0
        candidate = page.locator("li.cand details.candidate").first
        candidate.locator("summary").click()
        assert candidate.get_attribute("open") is not None
        assert data["candidates"][0]["replacement"].strip() in candidate.inner_text()
        screenshot(page, "search")

        click_tab(page, "verdict")
        assert page.inner_text("#v-edited .v").startswith(str(data["edited_lines"]["total"]))
        assert page.inner_text("#v-outcome .v") == "not graded"
        assert page.locator("#test-runs tbody tr").count() == len(data["test_runs"])
        assert page.inner_text("#v-f1 .v") != "–"  # the reference is known: computed against it
        final = [r for r in data["test_runs"] if r["patch_sha"] == patch_sha(data["final_patch"] or data["patch"])]
        if final:  # the run tested its final patch (the demo's test command runs first, on the empty patch)
            assert page.inner_text("#v-tests .v") == (f"{'PASS' if final[-1]['ok'] else 'FAIL'} "
                                                      f"({final[-1]['passed']} passed, {final[-1]['failed']} failed)")
        screenshot(page, "verdict")


@pytest.mark.slow
def test_the_export_is_one_page_that_asks_the_network_for_nothing(demo_run, browser, tmp_path):
    folder, _ = demo_run
    out = tmp_path / "page.html"
    assert main(["inspect", str(folder.parents[2]), "--export", str(out)]) == 0
    html = out.read_text()
    assert "<script src" not in html and "<link" not in html
    page = browser.new_page(viewport=VIEWPORT)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    go(page, out.as_uri() + "#/")  # the runs view (a lone trajectory would open directly)
    assert page.inner_text("#batch-table-count") == "1 of 1"
    before = page.evaluate("document.body.dataset.ready")
    page.click("#batch-table tbody a")
    wait_drawn(page, before)
    assert page.inner_text("#status") == json.loads((folder / "trajectory.json").read_text())["status"]
    assert [u for u in asked if not u.startswith(("file:", "data:"))] == []


@pytest.mark.slow
def test_the_served_page_follows_a_batch_that_is_still_writing(demo_run, browser, tmp_path):
    folder, _ = demo_run
    first = tmp_path / "runs" / "run-alpha" / "SmolLM2-135M-Instruct" / "trajectories" / folder.name
    shutil.copytree(folder, first)
    with served(tmp_path / "runs") as url:
        page = browser.new_page(viewport=VIEWPORT)
        go(page, url + "#/")
        assert page.inner_text("#batch-table-count") == "1 of 1"
        second = tmp_path / "runs" / "run-beta" / "SmolLM2-135M-Instruct" / "trajectories" / folder.name
        shutil.copytree(folder, second)  # a new instance finishes while the page is open
        page.wait_for_function("document.querySelector('#batch-table-count').textContent === '2 of 2'",
                               timeout=20_000)
        page.fill("#batch-table-filter", "alpha")
        assert page.inner_text("#batch-table-count") == "1 of 2"


@pytest.mark.slow
def test_a_fix_run_on_local_code_heat_map_patched_line_and_test_output(fix_run, browser, tmp_path):
    """The use case a team has: its own repository's code drawn from the recorded checkout and commit."""
    repo, folder, data = fix_run
    out = tmp_path / "fix.html"
    assert main(["inspect", str(folder), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    tests = page.locator('#steps details.step[data-node="test"]')
    assert tests.count() >= 1
    first = tests.first
    assert "0 event(s)" not in first.locator("summary").inner_text()
    first.locator("summary").click()
    event = first.locator(".event.test").first
    assert "FAIL (7 passed, 3 failed" in event.inner_text()
    event.locator("details.fold > summary").click()  # the output, folded when long
    assert "test_mean" in event.locator("details.fold pre").inner_text()  # the test step shows its output

    click_tab(page, "localization")
    assert "code not available" not in page.inner_text("#files")
    assert f"code: {repo} at {data['commit'][:12]}" in page.inner_text("#loc-summary")
    bug = line(page, "calc/stats.py", 9)
    assert bug.locator("td.t").inner_text() == "    return total(values) / (len(values) + 1)"
    assert "patched" in bug.get_attribute("class")  # the final patch changes this line
    assert page.locator("tr.line.patched").count() == 1
    assert bug.get_attribute("data-rank") == "1" and bug.locator("td.r").inner_text() == "#1"
    assert float(bug.get_attribute("data-score")) > 0
    numbered = [r for r in page.locator("tr.line").all() if r.locator("td.r").inner_text()]
    assert all(r.get_attribute("data-entry") == "line" for r in numbered)
    assert line(page, "calc/stats.py", 1).get_attribute("data-entry") == "span"  # in calc/stats.py:1-9, one entry
    ranks = [int(r.locator("td.r").inner_text().lstrip("#")) for r in numbered]
    assert len(ranks) == len(set(ranks))
    scores = [float(t) for t in page.locator("#fused-table tbody td:nth-child(3)").all_inner_texts()]
    assert scores == sorted(scores, reverse=True)  # the fused list in score order
    screenshot(page, "localization-fix")


def test_the_fused_list_is_in_score_order_with_the_spectrum_lead():
    """Where a rule leads with the spectrum's lines (fusion.lead_with_lines: a rule with `spectrum_lead`; the
    default rule has none), they go first and their scores say so, for `show` and the page."""
    from pinpoint.localization.fusion import FusionRule, fuse
    from pinpoint.localization.suspects import Suspect

    spectrum = [Suspect("a.py", 7, 7, 0.9, "spectrum"), Suspect("a.py", 1, 20, 0.5, "spectrum")]
    retrieval = [Suspect("a.py", 1, 20, 0.8, "retrieval"), Suspect("a.py", 3, 3, 0.7, "retrieval"),
                 Suspect("b.py", 2, 2, 0.6, "retrieval")]
    lexical = [Suspect("a.py", 3, 3, 0.9, "lexical")]
    fused = fuse({"spectrum": spectrum, "retrieval": retrieval, "lexical": lexical}, rule=FusionRule(spectrum_lead=3))
    assert (fused[0].path, fused[0].start_line) == ("a.py", 7)  # the lead
    assert [s.score for s in fused] == sorted((s.score for s in fused), reverse=True)
    assert fused[0].placements[-1].by == "spectrum lead" and fused[0].describe().startswith("[spectrum lead #1")
    by_default = fuse({"spectrum": spectrum, "retrieval": retrieval, "lexical": lexical})
    assert [s.score for s in by_default] == sorted((s.score for s in by_default), reverse=True)


def test_a_span_is_one_ranked_entry_and_the_gold_rank_counts_entries():
    from pinpoint.inspector.model import gold_rank_of, ranked_entries

    def s(a: int, b: int, path: str = "m.py") -> dict:
        return {"path": path, "start_line": a, "end_line": b}

    suspects = [s(1, 10), s(4, 4), s(12, 12), s(1, 5), s(30, 30, "n.py")]
    entries = ranked_entries(suspects)
    assert entries == [["m.py", 1, 10], ["m.py", 12, 12], ["n.py", 30, 30]]  # 4 and 1-5 add no line
    assert gold_rank_of(entries, {"n.py": [30]}) == 3  # not #12, as ten lines of one span would make it
    assert gold_rank_of(entries, {"m.py": [7]}) == 1 and gold_rank_of(entries, {"z.py": [1]}) is None


def test_a_bad_port_or_a_port_in_use_is_one_line_and_exit_2(tmp_path, capsys):
    import socket

    from pinpoint.agent.trajectory import TrajectoryWriter

    TrajectoryWriter(tmp_path / "t" / "trajectory.json", {"task": {"instance_id": "x"}}).write({"status": "ok"})
    for port in ("80000", "-1"):
        assert main(["inspect", str(tmp_path / "t"), "--port", port]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--port {port}" in err and "Traceback" not in err, err
    with socket.socket() as taken:  # a real listener holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["inspect", str(tmp_path / "t"), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot listen on 127.0.0.1:{port}" in err, err


def test_a_bad_path_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pinpoint inspect:") and "does not exist" in err and len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 2
    assert "holds no trajectory.json" in capsys.readouterr().err
    from pinpoint.agent.demo import DATA  # a JSON file that is not a trajectory

    assert main(["inspect", str(DATA), "--export", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a pinpoint trajectory" in err and len(err.splitlines()) == 1 and not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_ten_thousand_events_draw_a_page_at_a_time_and_the_benchmark_prints_both(demo_run, browser, tmp_path):
    from pinpoint.agent.trajectory import load_trajectory, write_json_atomic
    from pinpoint_lab.inspector_bench import bench_inspector, format_bench, repeated

    folder, _ = demo_run
    big = repeated(load_trajectory(folder / "trajectory.json"), 10_000)  # real events, repeated
    write_json_atomic(tmp_path / "big" / "trajectory.json", big)
    out = tmp_path / "big.html"
    assert main(["inspect", str(tmp_path / "big"), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    assert page.inner_text("#c-events .v") == "10000"
    nodes = sum(1 for e in big["events"] if e["kind"] == "node")
    assert page.locator("#steps details.step").count() == 100 < nodes
    assert page.locator("#gantt rect").count() <= 1000
    page.click("#steps + button.more")
    assert page.locator("#steps details.step").count() == 200
    table = format_bench(bench_inspector(folder, 2000, browser))  # what `pinpoint-lab bench inspector` prints
    assert "first view ms" in table and "large/small" in table
    events_row = next(row for row in table.splitlines() if row.startswith("events"))
    assert events_row.split()[1:3] == [str(len(load_trajectory(folder / "trajectory.json")["events"])), "2000"]


@pytest.fixture(scope="module")
def swebench_run(runs_root: Path, docker_client) -> Path:
    """`pinpoint run psf__requests-1142 --evaluate` in its real container, graded officially; the model is the
    FAKE scripted server replaying the gold edit, so the run resolves (the embedded model's would be empty)."""
    from fake_llm_server import FakeScriptedLLMServer, tool_call
    from pinpoint.swebench_eval.datasets import load_instances
    from test_agent_docker import INSTANCE, gold_edits

    instance = load_instances(ids=[INSTANCE])[0]
    script = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    with FakeScriptedLLMServer(script + [tool_call("submit", {}), tool_call("submit", {})]) as fake:
        assert main(["run", INSTANCE, "--evaluate", "--output", str(runs_root), "--set", "search.policy=none",
                     "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake-gold-replay"]) == 0
    return runs_root / "swebench_verified_dev" / "fake-gold-replay"


@pytest.mark.slow
@pytest.mark.docker
def test_a_graded_swebench_run_beside_the_demo_table_plots_verdict_and_gold(demo_run, swebench_run, runs_root,
                                                                           browser, tmp_path):
    from pinpoint.swebench_eval.datasets import load_instances
    from test_agent_docker import INSTANCE
    from unidiff import PatchSet

    report = json.loads((swebench_run / "eval" / INSTANCE / "report.json").read_text())[INSTANCE]
    trajectory = json.loads((swebench_run / "trajectories" / INSTANCE / "trajectory.json").read_text())
    out = tmp_path / "runs.html"
    assert main(["inspect", str(runs_root), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    assert page.inner_text("#batch-table-count") == "2 of 2"
    row = page.locator("#batch-table tbody tr", has_text=INSTANCE)
    assert row.locator("td").nth(4).inner_text() == "yes"  # resolved, from report.json
    page.click('#batch-table th[data-key="name"]')
    page.click('#batch-table th[data-key="name"]')  # descending
    assert INSTANCE in page.locator("#batch-table tbody tr").first.inner_text()
    assert "1/1" in page.inner_text('[data-plot="resolve"]')
    assert page.locator('[data-plot="hit"] polyline').count() == 2  # line and file Hit@k: both golds known
    screenshot(page, "batch")
    page.fill("#batch-table-filter", "requests")
    assert page.inner_text("#batch-table-count") == "1 of 2"

    before = page.evaluate("document.body.dataset.ready")
    row.locator("a").click()
    wait_drawn(page, before)
    click_tab(page, "verdict")
    assert page.inner_text("#v-outcome .v") == "resolved"
    assert page.inner_text("#v-f1 .v") == f"{report['pinpoint']['edit']['f1']:g}"
    tests = report["tests_status"]
    assert page.locator("#report-tests tbody tr").count() == sum(
        len(tests[group][outcome]) for group in ("FAIL_TO_PASS", "PASS_TO_PASS") for outcome in ("success", "failure"))
    for test in tests["FAIL_TO_PASS"]["success"]:
        cells = page.locator("#report-tests tbody tr", has_text=test).first.locator("td")
        assert [cells.nth(i).inner_text() for i in (1, 2, 3)] == ["FAIL_TO_PASS", "fail", "pass"]
    added = [x for x in trajectory["final_patch"].splitlines() if x.startswith("+") and not x.startswith("+++")]
    assert page.locator("#final-patch .add").count() == len(added) > 0
    screenshot(page, "verdict-swebench")

    click_tab(page, "localization")
    removed = [(f.path, x.source_line_no, x.value.rstrip("\n")) for f in PatchSet(load_instances(ids=[INSTANCE])[0].patch)
               for hunk in f for x in hunk if x.is_removed]
    assert removed
    for path, number, text in removed:  # gold lines drawn on the base commit's code
        gold = line(page, path, number)
        assert "gold" in gold.get_attribute("class") and gold.locator("td.t").inner_text() == text
    gold.scroll_into_view_if_needed()
    screenshot(page, "localization-swebench")


@pytest.mark.slow
def test_an_rl_rollout_as_a_table_with_its_episodes(demo_task, browser, tmp_path):
    """A real `pinpoint rl rollout` (the demo's bug as a local task; the scripted gold policy is a FAKE replaying the
    reference patch) to Parquet, beside a row whose writer left most fields out."""
    import pyarrow.parquet as pq

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(demo_task.to_row()) + "\n")
    out = tmp_path / "rollout" / "episodes.parquet"
    out.parent.mkdir()
    done = subprocess.run([sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks), "--policy",
                           "scripted-gold", "--samples-per-task", "2", "--workers", "1", "--reward", "precise",
                           "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pq.read_table(out).to_pylist()
    partial = {"task_id": rows[0]["task_id"], "sample": 99, "reward": None}  # no status, tokens, reason...
    (out.parent / "partial.jsonl").write_text(json.dumps(partial) + "\n")
    page_file = tmp_path / "rl.html"
    assert main(["inspect", str(out.parent), "--export", str(page_file)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, page_file.as_uri())
    assert page.inner_text("#rl-table-count") == f"{len(rows) + 1} of {len(rows) + 1}"  # the stream not twice
    header = [th.inner_text() for th in page.locator("#rl-table th").all()]
    for index, row in enumerate(rows):
        cells = [td.inner_text() for td in page.locator(f'#rl-table tr[data-key="rl:episodes.parquet:{index}"] td').all()]
        shown = dict(zip(header, cells, strict=True))
        assert shown["status"] == row["status"] and float(shown["reward"]) == row["reward"]
        assert shown["response tok"] == str(len(row["response_ids"]))
        assert shown["masked-in tok"] == str(sum(row["response_mask"]))
    blanks = [td.inner_text() for td in page.locator('#rl-table tr[data-key="rl:partial.jsonl:0"] td').all()]
    assert blanks[header.index("status")] == "–" and blanks[header.index("reward")] == "–"
    screenshot(page, "rl")
    before = page.evaluate("document.body.dataset.ready")
    page.click('#rl-table tr[data-key="rl:episodes.parquet:0"] a')
    wait_drawn(page, before)
    assert float(page.inner_text("#e-reward .v")) == rows[0]["reward"]
    assert page.locator("#messages .msg").count() == min(len(json.loads(rows[0]["messages"])), 100)


@pytest.mark.slow
def test_a_search_that_passes_shows_its_chosen_candidate_and_the_edit_against_the_reference(browser, tmp_path):
    """`pinpoint batch --tasks` on the demo's bug in a local checkout with FLARE; the model is the FAKE scripted
    server whose one revision is the reference fix, so the search keeps a passing candidate and the run submits."""
    from fake_llm_server import FakeScriptedLLMServer, text, tool_call
    from pinpoint.agent.demo import MODULE, build_demo_repo

    demo = build_demo_repo(tmp_path / "repo", "Python/2")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": demo.task.instance_id, "problem_statement": demo.task.problem_statement,
                                 "repo": demo.task.repo, "repo_path": str(demo.path),
                                 "test_command": demo.task.test_command}) + "\n")
    script = [text("```python\n    return number % 1.0\n```")] + [tool_call("submit", {})] * 4
    with FakeScriptedLLMServer(script) as fake:
        assert main(["batch", "--tasks", str(tasks), "--output", str(tmp_path / "runs"), "--set", "search.policy=flare",
                     "--quiet", "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake-flare"]) == 0
    folder = tmp_path / "runs" / "tasks" / "fake-flare" / "trajectories" / demo.task.instance_id
    data = json.loads((folder / "trajectory.json").read_text())
    kept = [c for c in data["candidates"] if c["ok"]]
    assert data["status"] == "submitted" and len(kept) == 1
    out = tmp_path / "flare.html"
    assert main(["inspect", str(folder), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    click_tab(page, "search")
    chosen = page.locator("li.cand.chosen")
    assert chosen.count() == 1 and chosen.get_attribute("data-id") == kept[0]["id"]
    assert "5 passed" in chosen.locator("summary").inner_text() and "chosen" in chosen.locator("summary").inner_text()
    chosen.locator("summary").click()
    assert chosen.locator(".diff .add").first.inner_text() == "+    return number % 1.0"
    screenshot(page, "search-chosen")
    click_tab(page, "verdict")
    assert [page.inner_text(f"#v-{k} .v") for k in ("precision", "recall", "f1")] == ["1", "1", "1"]
    assert "against the reference" in page.inner_text("#view-verdict")
    assert page.locator("#final-patch .del").first.inner_text() == "-    return number % 1.0 + 1.0"
    assert MODULE in page.inner_text("#final-patch")


@pytest.mark.slow
@pytest.mark.docker
def test_reports_without_trajectories_are_rows_too(swebench_run, browser, tmp_path):
    """`pinpoint eval` on predictions made elsewhere leaves reports and no trajectory: still one row each."""
    from test_agent_docker import INSTANCE

    report = json.loads((swebench_run / "eval" / INSTANCE / "report.json").read_text())[INSTANCE]
    graded = tmp_path / "graded" / "swebench_verified_dev" / "someone-else"
    shutil.copytree(swebench_run / "eval", graded / "eval")
    out = tmp_path / "graded.html"
    assert main(["inspect", str(tmp_path / "graded"), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    assert page.inner_text("#batch-table-count") == "1 of 1"
    cells = page.locator("#batch-table tbody tr").first.locator("td")
    assert cells.nth(0).inner_text() == INSTANCE and cells.nth(4).inner_text() == "yes"
    assert cells.nth(7).inner_text() == f"{report['pinpoint']['edit']['f1']:g}"
    assert page.locator("#batch-table tbody a").count() == 0  # nothing to open


@pytest.mark.slow
def test_a_run_with_the_execution_signals_shows_each_signals_suspects(browser, tmp_path):
    """A real `fix` run on the team repository with every execution signal on (insertion points too; the model is
    the FAKE scripted server): the Localization tab lists spectrum, LDB, the module the failing test is named after,
    the executed lines naming the issue's names, MBFL, predicate switching, insertion points and their fusion, each with its top suspects as the trajectory's execution event recorded them."""
    from fake_llm_server import FakeScriptedLLMServer
    from test_fix_own_repo import ISSUE, PYTEST, _script, make_team_repo

    repo = make_team_repo(tmp_path / "team-app")
    # the issue also names what the buggy line spells, so `mentions` finds it among the lines the failing tests ran
    (tmp_path / "issue.md").write_text(ISSUE + "It divides `total(values)` by one more than the count.\n")
    with FakeScriptedLLMServer(_script()) as fake:
        assert main(["fix", str(repo), "--issue", str(tmp_path / "issue.md"), "--local", "--test-cmd",
                     f"{PYTEST} -q tests", "--output", str(tmp_path / "out"), "--set", "search.policy=none",
                     "--base-url", fake.base_url, "--set", "agent.insertion=true"]) == 0
    [trajectory] = (tmp_path / "out" / "fix").glob("*/trajectories/*/trajectory.json")
    [record] = [e for e in json.loads(trajectory.read_text())["events"] if e["kind"] == "execution"]
    assert record["mbfl"]["suspects"] and record["insertion"]["suspects"]  # what the page must show
    out = tmp_path / "exec.html"
    assert main(["inspect", str(trajectory.parent), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    click_tab(page, "localization")
    shown = page.locator("#execution-signals .exec-signal")
    assert shown.evaluate_all("els => els.map(e => e.dataset.signal)") == [
        "spectrum", "ldb", "test_names", "mentions", "mbfl", "predicates", "insertion", "fused"]
    named = page.locator("#exec-test_names tbody tr")
    assert "calc/stats.py" in named.first.inner_text()  # tests/test_stats.py fails, and its run ran calc/stats.py
    assert "calc/stats.py:9" in page.inner_text("#exec-mentions tbody tr:first-child")  # total, values: the bug line
    mbfl = page.locator("#exec-mbfl tbody tr")
    top = record["mbfl"]["suspects"][0]
    assert mbfl.count() == min(10, len(record["mbfl"]["suspects"]))
    assert f"{top['path']}:{top['start_line']}" in mbfl.first.inner_text()
    assert "mutants change a failing test" in mbfl.first.inner_text()  # its evidence
    assert page.inner_text('.exec-signal[data-signal="insertion"] h4 span') == "splits the spectrum's ties"
    role = page.inner_text('.exec-signal[data-signal="predicates"] h4 span')
    assert role.startswith("fused · ")  # a fusion member (agent.predicates), even with nothing found
    first = record["insertion"]["suspects"][0]
    assert f"{first['path']}:{first['start_line']}" in page.inner_text("#exec-insertion tbody tr:first-child")
    assert "calc/stats.py:9" in page.inner_text("#exec-fused")  # the planted bug among the fused suspects
    page.locator("#execution-signals").evaluate("e => e.scrollIntoView()")
    screenshot(page, "localization-execution")


@pytest.mark.slow
def test_two_fix_runs_of_one_issue_are_told_apart_and_an_unpriced_model_costs_unknown(two_fix_runs, browser,
                                                                                      tmp_path):
    """Each row is named by its run folder (the issue's name and the run key's hash), so the two runs differ and
    each opens its own; the scripted endpoint has no price, so the cost is unknown, never $0; the batch page shows
    how many runs' tests pass on their final patch, and no grading cards or plots."""
    folders = sorted(p.parent.name for p in two_fix_runs.glob("fix/*/trajectories/*/trajectory.json"))
    assert len(folders) == 2
    out = tmp_path / "runs.html"
    assert main(["inspect", str(two_fix_runs), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    assert page.inner_text("#batch-table-count") == "2 of 2"
    names = sorted(page.locator("#batch-table tbody tr td:first-child").all_inner_texts())
    assert names == folders
    assert page.inner_text("#n-cost .v") == "unknown"
    assert "$0" not in page.inner_text("#batch")
    # fix runs are judged by their test command: no grading, resolve rate, edit F1 or gold Hit@k on the batch page
    assert page.inner_text("#n-tests-pass .v") == "2 of 2"
    batch = page.inner_text("#batch")
    for absent in ("graded", "resolved", "edit F1", "resolve rate", "Hit@k", "gold"):
        assert absent not in batch, absent
    columns = [k for k, _ in page.evaluate("batchCols(true)")]
    cost_column, tests_column = columns.index("cost_usd"), columns.index("tests_ok")
    assert page.locator(f"#batch-table tbody td:nth-child({cost_column + 1})").all_inner_texts() == ["unknown"] * 2
    assert page.locator(f"#batch-table tbody td:nth-child({tests_column + 1})").all_inner_texts() == ["yes"] * 2
    for name in folders:
        go(page, out.as_uri() + "#/")
        before = page.evaluate("document.body.dataset.ready")
        page.locator("#batch-table tbody a", has_text=name).click()
        wait_drawn(page, before)
        assert page.locator("#trajectory").get_attribute("data-key").endswith(name)
        assert "$0" not in page.inner_text("#trajectory .cards")


@pytest.mark.slow
def test_a_fix_runs_verdict_shows_its_tests_on_the_final_patch_and_no_gold(two_fix_runs, browser, tmp_path):
    """A `fix` run has no reference patch and no grading: the Verdict tab shows the test command's outcome on the
    final patch, and neither gold nor F1 fields nor a hint at --evaluate (which `fix` does not have)."""
    [folder, _] = sorted(p.parent for p in two_fix_runs.glob("fix/*/trajectories/*/trajectory.json"))
    final = json.loads((folder / "final_tests.json").read_text())
    assert final == {"ok": True, "passed": 10, "failed": 0}
    out = tmp_path / "fix.html"
    assert main(["inspect", str(folder), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    assert "verdict: tests on the final patch PASS (10 passed, 0 failed)" in page.inner_text("#glance")
    click_tab(page, "verdict")
    view = page.inner_text("#view-verdict")
    assert page.inner_text("#v-tests .v") == "PASS (10 passed, 0 failed)"
    assert "the test command, after the run" in page.inner_text("#v-tests-source")
    for absent in ("--evaluate", "gold", "F1", "precision", "recall", "reference", "not graded"):
        assert absent not in view, absent
    assert page.locator("#v-f1, #v-precision, #v-recall, #v-outcome, #report-tests").count() == 0
    assert "calc/stats.py" in page.inner_text("#final-patch") and page.locator("#test-runs").count() == 1


@pytest.mark.slow
def test_the_localization_tab_opens_on_the_top_suspect_deep_in_a_long_file(two_fix_runs, browser, tmp_path):
    """The buggy line 2185 ranks first and is the patched line, below the helpers the issue names (suspects from
    line 409 on): the tab opens scrolled to it, not at the top of the file's first unfolded lines."""
    [folder, _] = sorted(p.parent for p in two_fix_runs.glob("fix/*/trajectories/*/trajectory.json"))
    out = tmp_path / "fix.html"
    assert main(["inspect", str(folder), "--export", str(out)]) == 0
    page = browser.new_page(viewport=VIEWPORT)
    go(page, out.as_uri())
    click_tab(page, "localization")
    top, other = line(page, "calc/stats.py", 2185), line(page, "calc/stats.py", HELPERS["total"] + 1)
    assert top.get_attribute("data-rank") == "1" and "patched" in top.get_attribute("class")
    assert other.count() == 1 and other.bounding_box()["y"] < top.bounding_box()["y"]  # drawn above it
    box = top.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], box  # in view as the tab opens
