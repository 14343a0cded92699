"""One trajectory as the page shows it: steps with their events, localization on the code, the search tree and the
verdict. Values only (JSON), computed here once so the page's script draws and never re-derives a metric."""

from __future__ import annotations

from typing import Any

from pinpoint.inspector.sources import CodeContext, code_context

#: fused suspects ranked for the page (entries adding a line, best first)
RANKED_LINES = 1000
#: a suspect spanning more lines than this shades its lines but does not unfold them (a whole-file span)
UNFOLD_SPAN = 40
#: code unfolded around each narrow suspect and gold line
CONTEXT_LINES = 3


def _number(value: Any) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def steps_of(events: list[dict]) -> list[dict]:
    """Events grouped by graph step. A step is written as its model calls, then its `node` record, then what the
    node itself recorded (tool calls, localization, execution): `agent.context` appends them in that order."""
    steps: list[dict] = []
    calls: list[int] = []  # model calls waiting for the node record that closes their step
    clock = 0.0
    for index, event in enumerate(events):
        kind = event.get("kind")
        if kind == "node":
            seconds = _number(event.get("seconds"))
            steps.append({"node": str(event.get("node", "?")), "seconds": seconds, "start": round(clock, 3),
                          "events": calls})
            clock += seconds
            calls = []
        elif kind == "llm" or not steps:
            calls.append(index)
        else:
            steps[-1]["events"].append(index)
    if calls:  # a run cut short mid-step: its model calls belong to no closed step yet
        steps.append({"node": "(running)", "seconds": 0.0, "start": round(clock, 3), "events": calls})
    return steps


def ranked_entries(suspects: list[dict], limit: int = RANKED_LINES) -> list[list]:
    """[path, start, end] per suspect in rank order, one entry each: a span is one entry, not one rank per line (a
    function's docstring and blank lines would otherwise take ranks #2-#9); a suspect whose lines all lie in
    better entries adds nothing and is skipped."""
    seen: set[tuple[str, int]] = set()
    entries: list[list] = []
    for s in suspects:
        path, start, end = str(s.get("path")), int(s.get("start_line", 0)), int(s.get("end_line", 0))
        new = {(path, n) for n in range(start, end + 1)} - seen
        if new:
            seen |= new
            entries.append([path, start, end])
            if len(entries) >= limit:
                break
    return entries


def gold_rank_of(entries: list[list], gold: dict[str, list[int]]) -> int | None:
    """Rank (1-based) of the first entry that holds a gold line, or None."""
    return next((i + 1 for i, (p, a, b) in enumerate(entries) if any(a <= n <= b for n in gold.get(p, ()))), None)


def patched_lines(data: dict) -> dict[str, list[int]]:
    """Lines of the base files the final patch changes (an insertion: the line it goes before), per path."""
    from pinpoint.inspector.sources import gold_lines_of

    return gold_lines_of(data.get("final_patch") or data.get("patch") or "")


def _last_localize(events: list[dict]) -> tuple[dict[str, list[dict]], int]:
    rounds = [e for e in events if e.get("kind") == "localize"]
    return (rounds[-1].get("signals") or {} if rounds else {}), len(rounds)


#: the execution signals the page lists one by one, in the order they run, then their fusion
EXECUTION_SIGNALS = ("spectrum", "ldb", "test_names", "mentions", "mbfl", "predicates", "insertion")
#: suspects shown per execution signal
EXECUTION_TOP = 10


def execution_view(events: list[dict], fused: list[dict]) -> list[dict]:
    """Each execution signal's top suspects, its status and whether the fusion used it, then the fused list. The
    localize event holds the fused members' lists; the execution event (`ExecutionSignals.record`) the rest: MBFL,
    predicate switching and insertion points also when they were recorded but not fused, LDB's blocks."""
    runs = [e for e in events if e.get("kind") == "execution" and e.get("source")]
    if not runs:
        return []
    record, (signals, _) = runs[-1], _last_localize(events)
    rows = []
    for name in EXECUTION_SIGNALS:
        entry = record.get(name) if isinstance(record.get(name), dict) else {}
        recorded = record.get("blocks") if name == "ldb" else entry.get("suspects")
        suspects = signals.get(name) or recorded or []
        if name not in record and not suspects and not (name == "ldb" and "traces" in record):
            continue
        summary = (record.get("traces") or {}) if name == "ldb" else entry
        rows.append({"name": name, "role": _role(name, signals, entry), "status": summary.get("status"),
                     "summary": summary.get("summary") or "", "count": len(suspects),
                     "suspects": suspects[:EXECUTION_TOP]})
    rows.append({"name": "fused", "role": "their fusion, as the agent recorded it", "status": None, "summary": "", "count": len(fused),
                 "suspects": fused[:EXECUTION_TOP]})
    return rows


def _role(name: str, signals: dict[str, list[dict]], entry: dict) -> str:
    """What the agent did with a signal: fused it, used it to split the spectrum's ties (MBFL, insertion points when
    `agent.insertion`), or only recorded it."""
    if name in signals:  # a fused member, whether or not it found anything
        return "fused"
    if name == "mbfl" or entry.get("used"):
        return "splits the spectrum's ties"
    return "recorded, not fused"


def _shown_lines(text_lines: int, suspects: list[dict], gold: list[int]) -> list[list[int]]:
    """Ranges of lines unfolded in the code view: narrow suspects and gold lines with a little context; a small
    file whole."""
    if text_lines <= 120:
        return [[1, text_lines]] if text_lines else []
    spans = [(s["start_line"], s["end_line"]) for s in suspects if s["end_line"] - s["start_line"] < UNFOLD_SPAN]
    spans += [(g, g) for g in gold]
    ranges: list[list[int]] = []
    for lo, hi in sorted((max(1, a - CONTEXT_LINES), min(text_lines, b + CONTEXT_LINES)) for a, b in spans):
        if ranges and lo <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], hi)
        else:
            ranges.append([lo, hi])
    return ranges or [[1, min(text_lines, 60)]]


def localization_view(data: dict, context: CodeContext) -> dict:
    """Per file: its lines (where the code is known), gold lines, and which lines to unfold; the signals' lists and
    the fused list as recorded; the fused ranking of lines, and the rank of the first gold line in it."""
    signals, rounds = _last_localize(data.get("events") or [])
    fused = data.get("suspects") or []
    everything = fused + [s for group in signals.values() for s in group]
    patched = patched_lines(data)
    paths = list(dict.fromkeys([str(s["path"]) for s in everything] + list(context.gold_lines) + list(patched)))
    files = []
    for path in paths:
        text = context.files.get(path)
        lines = text.splitlines() if text is not None else None
        mine = [s for s in everything if s["path"] == path]
        gold = context.gold_lines.get(path, [])
        files.append({"path": path, "lines": lines, "gold": gold, "patched": patched.get(path, []),
                      "shown": _shown_lines(len(lines), mine, gold + patched.get(path, [])) if lines is not None
                      else []})
    ranking = ranked_entries(fused)
    gold_rank = gold_rank_of(ranking, context.gold_lines)
    return {"signals": signals, "fused": fused, "rounds": rounds, "files": files, "ranking": ranking,
            "gold_rank": gold_rank, "gold_known": any(context.gold_lines.values()), "origin": context.origin,
            "note": context.note, "execution": execution_view(data.get("events") or [], fused)}


def _key(c: dict) -> tuple:
    """`TestRun.key()` on a candidate record: passing first, more passed, fewer failed, smaller edit."""
    return (bool(c.get("ok")), _number(c.get("passed")), -_number(c.get("failed")), -_number(c.get("edited_lines")))


def _search_groups(candidates: list[dict]) -> list[list[dict]]:
    """One list per search: ids restart at `<policy>-1` on each search, and a policy runs once per search."""
    groups: list[list[dict]] = []
    for c in candidates:
        origin = c.get("origin", "")
        restart = bool(groups) and str(c.get("id", "")) == f"{origin}-1" and any(
            x.get("origin") == origin for x in groups[-1])
        if not groups or restart:
            groups.append([])
        groups[-1].append(c)
    return groups


def _tree(group: list[dict], final_patch: str) -> dict:
    """Parent -> children by level (a FLARE round, a BESTER depth): each level expands the node the previous level
    moved to; a level's best child was moved to when the search went deeper from it, it passes, or it is the kept
    patch."""
    levels: list[tuple[str, Any]] = list(dict.fromkeys((c.get("origin"), c.get("round", c.get("depth"))) for c in group))
    parent, nodes = "start", []
    for index, level in enumerate(levels):
        members = [c for c in group if (c.get("origin"), c.get("round", c.get("depth"))) == level]
        evaluated = [c for c in members if c.get("status") == "evaluated"]
        best = max(evaluated, key=_key, default=None)
        deeper = index + 1 < len(levels) and levels[index + 1][0] == level[0]
        kept = bool(final_patch) and best is not None and best.get("patch") == final_patch
        moved = best is not None and bool(deeper or best.get("ok") or kept)
        for c in members:
            nodes.append({**c, "parent": parent, "level": level[1], "chosen": bool(moved and c is best)})
        if moved and best is not None:
            parent = str(best.get("id"))
    return {"policies": list(dict.fromkeys(c.get("origin") for c in group)), "nodes": nodes}


def search_view(data: dict) -> list[dict]:
    final = data.get("final_patch") or data.get("patch") or ""
    return [_tree(group, final) for group in _search_groups(data.get("candidates") or [])]


def _report_tests(entry: dict) -> list[dict]:
    """FAIL_TO_PASS and PASS_TO_PASS per test: before (what the set means: F2P fails, P2P passes) and after."""
    rows = []
    for group, before in (("FAIL_TO_PASS", "fail"), ("PASS_TO_PASS", "pass")):
        status = (entry.get("tests_status") or {}).get(group) or {}
        for outcome, after in (("success", "pass"), ("failure", "fail")):
            rows += [{"test": t, "group": group, "before": before, "after": after} for t in status.get(outcome) or []]
    return rows


def _final_tests(records: list[dict], on_final: list[int], recorded: dict | None) -> dict | None:
    """The tests' outcome on the final patch: `fix`'s own run of the test command after the agent (recorded beside
    the trajectory), else the agent's last run on that patch; None when neither ran."""
    if isinstance(recorded, dict) and {"ok", "passed", "failed"} <= set(recorded):
        return {k: recorded[k] for k in ("ok", "passed", "failed")} | {"source": "the test command, after the run"}
    if not on_final:
        return None
    last = records[on_final[-1]]
    return {k: last.get(k) for k in ("ok", "passed", "failed")} | {"source": "the agent's last run on it"}


def verdict_view(data: dict, report: dict | None, context: CodeContext, final_tests: dict | None = None) -> dict:
    """The final diff, its size, edit precision/recall/F1 (the report's, else computed here against the reference),
    the report's tests, the agent's own test runs and the tests on the final patch. A `fix` run (it carries its
    run key) has no reference and is never graded: what judges it is its own test command."""
    from pinpoint.swebench_eval.metrics import edit_metrics

    patch = data.get("final_patch") or data.get("patch") or ""
    entry = next(iter(report.values()), {}) if isinstance(report, dict) and report else {}
    meta = entry.get("pinpoint") or {}
    edit, edit_origin = meta.get("edit") or {}, "report.json"
    if not edit and context.gold_patch:
        try:
            edit, edit_origin = edit_metrics(patch, context.gold_patch).to_json(), "computed here against the reference"
        except ValueError:
            edit = {}
    from pinpoint.agent.nodes import patch_sha

    records = data.get("test_runs") or []
    runs = [{k: r.get(k) for k in ("source", "command", "exit_code", "passed", "failed", "failed_tests", "ok",
                                   "patch_edited_lines", "timed_out")} for r in records]
    on_final = [i for i, r in enumerate(records) if r.get("patch_sha") == patch_sha(patch)]
    return {"patch": patch, "edited_lines": data.get("edited_lines") or {}, "edit": edit,
            "final_run": on_final[-1] if on_final else None,
            "edit_origin": edit_origin if edit else "", "report": bool(entry), "resolved": entry.get("resolved"),
            "outcome": meta.get("outcome"), "detail": meta.get("detail"), "tests": _report_tests(entry),
            "test_runs": runs, "gold_patch": context.gold_patch, "fix": bool(data.get("run_key")),
            "test_command": (data.get("task") or {}).get("test_command"),
            "final_tests": _final_tests(records, on_final, final_tests)}


def header_of(data: dict) -> dict:
    task = data.get("task") or {}
    search = (data.get("config") or {}).get("search") or {}
    keys = ("status", "detail", "model", "steps", "prompt_tokens", "completion_tokens", "cost_usd", "elapsed_s",
            "runtime", "image", "created", "updated", "searches")
    return {"instance_id": task.get("instance_id", "?"), "repo": task.get("repo", ""),
            "problem_statement": task.get("problem_statement", ""), "search_policy": search.get("policy"),
            **{k: data.get(k) for k in keys}}


def trajectory_view(data: dict, report: dict | None = None, dataset: str | None = None,
                    with_code: bool = True, final_tests: dict | None = None) -> dict:
    """Everything the page draws for one trajectory (`with_code=False`: no source lookups, as for a quick index)."""
    fused_paths = [str(s.get("path")) for s in data.get("suspects") or []]
    patched = list(patched_lines(data))
    source = (str(data.get("repo") or ""), str(data.get("commit") or "")) if data.get("commit") else None
    context = (code_context(data.get("task") or {}, list(dict.fromkeys(fused_paths + patched)), source=source)
               if with_code else CodeContext())
    events = data.get("events") or []
    return {"header": header_of(data), "events": events, "steps": steps_of(events),
            "messages": data.get("messages") or [], "localization": localization_view(data, context),
            "search": search_view(data), "verdict": verdict_view(data, report, context, final_tests)}
