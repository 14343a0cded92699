"""`pinpoint-lab bench inspector`: how long the page takes to open a 10,000-event trajectory, beside a small one.

The large trajectory is synthesized by repeating a real trajectory's events (and its messages in proportion) until
it holds the asked number of events: the page's work grows with the events, their contents are real. Both are
exported to self-contained pages and opened in headless Chromium; the figures are the time from navigation to the
first drawn view, the longest main-thread task (what a user feels as a freeze), and the time to switch tabs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from pinpoint.agent.trajectory import load_trajectory, write_json_atomic
from pinpoint.environments import paths
from pinpoint.environments.errors import UsageError
from pinpoint.inspector.browser import chromium
from pinpoint.inspector.index import export_data
from pinpoint.inspector.page import render_page

#: reads the longest main-thread task Chromium reported while the page loaded (PerformanceObserver longtask)
LONG_TASKS = """() => new Promise((done) => {
  let longest = 0;
  new PerformanceObserver((list) => { for (const e of list.getEntries()) longest = Math.max(longest, e.duration); })
    .observe({type: "longtask", buffered: true});
  setTimeout(() => done(longest), 300);
})"""


def newest_trajectory(root: Path | None = None) -> Path:
    """The most recently written trajectory under the runs root (the demo's, after `pinpoint demo`)."""
    found = sorted(Path(root or paths.runs_dir()).glob("**/trajectories/*/trajectory.json"),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        raise UsageError(f"no trajectory under {root or paths.runs_dir()}: run `pinpoint demo` first or pass "
                         "--trajectory")
    return found[-1]


def repeated(data: dict, events: int) -> dict:
    """`data` with its events repeated (in order) to exactly `events`, and its messages repeated in proportion."""
    source = data.get("events") or []
    if not source:
        raise UsageError("the trajectory has no events to repeat")
    factor = -(-events // len(source))
    big = dict(data)
    big["events"] = (source * factor)[:events]
    big["messages"] = (data.get("messages") or []) * factor
    return big


def _open(browser, page_file: Path) -> dict:
    """Load time, longest task, and the time to draw the Messages and Localization tabs of one exported page."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    started = time.perf_counter()
    page.goto(page_file.as_uri())
    page.wait_for_selector("body[data-ready]", timeout=120_000)
    wall = time.perf_counter() - started
    figures = {"load_ms": page.evaluate("window.__pinpointRendered"), "wall_s": wall,
               "longest_task_ms": page.evaluate(LONG_TASKS)}
    for tab in ("messages", "localization"):
        before = page.evaluate("document.body.dataset.ready")
        t0 = page.evaluate("performance.now()")
        page.click(f"#tab-{tab}")
        page.wait_for_function(f"document.body.dataset.ready !== '{before}'", timeout=120_000)
        figures[f"{tab}_ms"] = page.evaluate("window.__pinpointRendered") - t0
    page.close()
    return figures


def bench_inspector(trajectory: Path | None, events: int, browser: Any = None) -> dict:
    """Figures for the real trajectory and its `events`-event repetition, each in its own exported page (in
    `browser`, else a headless Chromium of its own)."""
    source = Path(trajectory) if trajectory else newest_trajectory()
    small = load_trajectory(source if source.is_file() else source / "trajectory.json")
    if browser is None:
        with chromium() as own:
            return bench_inspector(source, events, own)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="pinpoint-bench-inspector-") as tmp:
        for name, data in (("small", small), ("large", repeated(small, events))):
            folder = Path(tmp) / name / "trajectories" / str((small.get("task") or {}).get("instance_id", "run"))
            write_json_atomic(folder / "trajectory.json", data)
            page_file = Path(tmp) / f"{name}.html"
            page_file.write_text(render_page(export_data(folder)))
            rows[name] = {"events": len(data.get("events") or []), "messages": len(data.get("messages") or []),
                          "page_bytes": page_file.stat().st_size, **_open(browser, page_file)}
    return {"source": str(source), "rows": rows}


def format_bench(result: dict) -> str:
    small, large = result["rows"]["small"], result["rows"]["large"]
    lines = [f"inspector load, headless Chromium (large: the events of {result['source']} repeated)",
             f"{'':22}{'small':>12}{'large':>12}{'large/small':>13}"]
    for key, label in (("events", "events"), ("messages", "messages"), ("page_bytes", "page bytes"),
                       ("load_ms", "first view ms"), ("longest_task_ms", "longest task ms"),
                       ("messages_ms", "messages tab ms"), ("localization_ms", "localization tab ms")):
        a, b = small[key], large[key]
        ratio = f"{b / a:.2f}x" if a else "-"
        lines.append(f"{label:22}{a:>12.0f}{b:>12.0f}{ratio:>13}")
    return "\n".join(lines)
