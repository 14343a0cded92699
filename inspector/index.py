"""The page's data: one row per instance (trajectory, prediction, report) or RL episode, the plots' numbers, and
each trajectory's full view on demand. Plots are numbers here and SVG in the page, so the export stays one file."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pinpoint.agent.trajectory import FORMAT, load_trajectory
from pinpoint.environments.errors import UsageError
from pinpoint.inspector.folder import (
    HIT_KS,
    Found,
    find,
    key_of,
    layout_of,
    read_json,
    report_for,
    report_path,
    signature,
    stamp,
)
from pinpoint.inspector.model import gold_rank_of, ranked_entries, trajectory_view
from pinpoint.inspector.sources import demo_bug, gold_lines_of, swebench_instance


def _gold_of(task: dict) -> dict[str, list[int]]:
    """Gold lines for the Hit@k plot without drawing code: the dataset's reference patch, the demo's buggy line."""
    if demo_bug(task):
        from pinpoint.inspector.sources import code_context

        return code_context(task, []).gold_lines
    instance = swebench_instance(str(task.get("instance_id", "")))
    return gold_lines_of(instance.patch) if instance is not None else {}


def _hits(suspects: list[dict], gold: dict[str, list[int]]) -> dict[str, int | None]:
    """Rank of the first suspect that holds a gold line (a span is one entry), and of the first gold file."""
    line = gold_rank_of(ranked_entries(suspects), gold)
    files = list(dict.fromkeys(str(s.get("path")) for s in suspects))
    file = next((i + 1 for i, p in enumerate(files) if p in gold), None)
    return {"line": line, "file": file}


def _prediction_rows(found: Found) -> dict[tuple[str, str, str], dict]:
    """preds.jsonl rows by (run, model, instance): a prediction may exist without a trajectory (`pinpoint eval`)."""
    rows: dict[tuple[str, str, str], dict] = {}
    for preds in found.predictions:
        run, model = preds.parent.parent.name, preds.parent.name
        try:
            lines = preds.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line being appended
            if isinstance(row, dict) and row.get("instance_id"):
                rows[(run, model, str(row["instance_id"]))] = row
    return rows


def _report_fields(report: dict | None) -> dict:
    from pinpoint.swebench_eval.evaluate import INFRA_OUTCOMES

    entry = next(iter(report.values()), {}) if report else {}
    meta = entry.get("pinpoint") or {}
    edit = meta.get("edit") or {}
    return {"graded": bool(entry), "resolved": entry.get("resolved") if entry else None,
            "outcome": meta.get("outcome"), "infra": meta.get("outcome") in INFRA_OUTCOMES if entry else None,
            "f1": edit.get("f1"), "precision": edit.get("precision"), "recall": edit.get("recall")}


_ROWS: dict[Path, tuple[tuple, dict | None]] = {}


def _trajectory_row(found: Found, path: Path) -> dict | None:
    """The row of one trajectory, recomputed only when it or its report changed (a batch rewrites trajectories
    every step; the index is rebuilt on every change, so unchanged rows must cost a stat, not a parse)."""
    from pinpoint.agent.fix import FINAL_TESTS

    report = report_path(path)
    key = (stamp(path), stamp(report) if report else None, stamp(path.parent / FINAL_TESTS), key_of(found, path))
    cached = _ROWS.get(path)
    if cached and cached[0] == key:
        return cached[1]
    row = _row_of(found, path)
    _ROWS[path] = (key, row)
    return row


def _final_tests_ok(path: Path) -> bool | None:
    """Whether `fix`'s own run of the test command passed on the final patch (None: no such run beside it)."""
    from pinpoint.agent.fix import FINAL_TESTS

    final = read_json(path.parent / FINAL_TESTS)
    return final["ok"] if isinstance(final, dict) and isinstance(final.get("ok"), bool) else None


def _row_of(found: Found, path: Path) -> dict | None:
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    task = data.get("task") or {}
    located = layout_of(path)
    layout = located[0] if located else None
    edited = data.get("edited_lines") or {}
    instance = task.get("instance_id", path.parent.name)
    # the run folder's name: an instance's in a benchmark run, and for `fix` the plus the run key's hash
    # that tells two runs of one issue apart
    row = {"key": key_of(found, path), "name": located[1] if located else instance, "instance_id": instance,
           "repo": task.get("repo") or "", "run": layout.run_id if layout else "", "model": data.get("model", ""),
           "status": data.get("status") or "running", "steps": data.get("steps"),
           "edited_lines": edited.get("total") if isinstance(edited, dict) else edited,
           "cost_usd": data.get("cost_usd"), "elapsed_s": data.get("elapsed_s"),
           "tokens": (data.get("prompt_tokens") or 0) + (data.get("completion_tokens") or 0),
           "candidates": len(data.get("candidates") or []), "updated": data.get("updated"), "trajectory": True,
           "fix": bool(data.get("run_key")), "tests_ok": _final_tests_ok(path)}
    row.update(_report_fields(report_for(path)))
    row.update({f"hit_{k}": v for k, v in _hits(data.get("suspects") or [], _gold_of(task)).items()})
    row["gold_known"] = row["hit_file"] is not None or bool(_gold_of(task))
    return row


def _untraced_row(run: str, model: str, instance: str, pred: dict, report: Path | None) -> dict:
    """A graded or predicted instance with no trajectory here (`pinpoint eval` on predictions made elsewhere)."""
    edit = pred.get("edit") or {}
    status = pred.get("status") or ("graded" if report else "?")
    row = {"key": f"{run}/{model}/{instance}", "name": instance, "instance_id": instance, "run": run, "model": model,
           "repo": instance.rsplit("-", 1)[0].replace("__", "/"), "status": status,
           "resolved": pred.get("resolved"), "outcome": pred.get("outcome"), "graded": "resolved" in pred,
           "edited_lines": pred.get("edited_lines"), "f1": edit.get("f1"), "trajectory": False}
    data = read_json(report) if report else None
    if isinstance(data, dict):
        row.update({k: v for k, v in _report_fields(data).items() if v is not None})
    return row


def batch_rows(found: Found) -> list[dict]:
    """One row per trajectory, plus predictions and reports that have none; preds.jsonl's resolved/outcome fill
    a trajectory's gaps."""
    preds = _prediction_rows(found)
    reports = {(p.parents[3].name, p.parents[2].name, p.parent.name): p for p in found.reports
               if len(p.parents) > 3}
    rows = [dict(row) for path in found.trajectories if (row := _trajectory_row(found, path)) is not None]
    seen = {(r["run"], r["model"], r["instance_id"]) for r in rows}
    for row in rows:
        pred = preds.get((row["run"], row["model"], row["instance_id"])) or {}
        if row["resolved"] is None and "resolved" in pred:
            row.update(resolved=pred["resolved"], outcome=pred.get("outcome"), graded=True)
    for key in dict.fromkeys([*preds, *reports]):
        if key not in seen:
            rows.append(_untraced_row(*key, preds.get(key) or {}, reports.get(key)))
    return rows


def histogram(values: list, bins: int = 10) -> dict:
    """Counts of the numbers among `values` in `bins` equal bins (the page draws them as bars)."""
    values = [v for v in values if isinstance(v, int | float)]
    if not values:
        return {"edges": [], "counts": []}
    lo, hi = min(values), max(values)
    if lo == hi:  # one value: one bar, not ten bins of made-up width
        return {"edges": [lo, hi], "counts": [len(values)]}
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"edges": [round(lo + i * width, 4) for i in range(bins + 1)], "counts": counts}


def batch_plots(rows: list[dict]) -> dict:
    """Resolve rate per repository (graded rows), line and file Hit@k (rows with a known gold), cost and wall time
    distributions, statuses."""
    repos: dict[str, list[int]] = {}
    for r in rows:
        if r.get("resolved") is not None:
            repos.setdefault(r.get("repo") or "?", [0, 0])
            repos[r.get("repo") or "?"][0] += int(bool(r["resolved"]))
            repos[r.get("repo") or "?"][1] += 1
    gold = [r for r in rows if r.get("gold_known")]
    hit = {kind: [sum(1 for r in gold if (r.get(f"hit_{kind}") or 10**9) <= k) / len(gold) for k in HIT_KS]
           if gold else [] for kind in ("line", "file")}
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    return {"resolve": [{"repo": k, "resolved": v[0], "graded": v[1]} for k, v in sorted(repos.items())],
            "hit_ks": list(HIT_KS), "hit": hit, "hit_rows": len(gold),
            "cost": histogram([r.get("cost_usd") for r in rows]),
            "time": histogram([r.get("elapsed_s") for r in rows]), "statuses": statuses}


def _base(found: Found) -> Path:
    return found.root if found.root.is_dir() else found.root.parent


def build_index(found: Found) -> dict:
    """The page's index: batch rows and plots, RL episodes and plots, and the one trajectory to open directly."""
    from pinpoint.inspector.rl import dataset_rows, rl_plots

    rows = batch_rows(found)
    episodes = dataset_rows(found.datasets, _base(found))
    single = rows[0]["key"] if len(rows) == 1 and rows[0].get("trajectory") and not episodes else None
    return {"title": str(found.root), "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "signature": signature(found), "rows": rows, "plots": batch_plots(rows),
            "rl": {"rows": episodes, "plots": {**rl_plots(episodes),
                                                "reward_histogram": histogram([r.get("reward") for r in episodes])}},
            "single": single}


#: full views of the trajectories opened last (a view holds every event: a few are kept, not the whole batch)
_VIEWS: dict[str, tuple[tuple, dict]] = {}
MAX_VIEWS = 8


def _trajectory_by_key(found: Found, key: str) -> Path | None:
    return next((p for p in found.trajectories if key_of(found, p) == key), None)


def _episode(found: Found, key: str) -> dict | None:
    """`rl:<file>:<row>`: that episode's messages and reward info, if the file is one of the page's datasets."""
    from pinpoint.inspector.rl import episode_detail
    from pinpoint.rl.rollout import read_dataset

    name, _, index = key.removeprefix("rl:").rpartition(":")
    path = next((p for p in found.datasets if p.resolve() == (_base(found) / name).resolve()), None)
    if path is None or not index.isdigit():
        return None
    rows = read_dataset(path)
    return episode_detail(rows[int(index)]) if int(index) < len(rows) else None


def detail(found: Found, key: str) -> dict | None:
    """The full view behind one row: a trajectory's (with its report), or an RL episode's; None if no such row.
    A trajectory's view is cached until it or its report changes."""
    from pinpoint.agent.fix import FINAL_TESTS

    if key.startswith("rl:"):
        return _episode(found, key)
    path = _trajectory_by_key(found, key)
    if path is None:
        return None
    report = report_path(path)
    version = (stamp(path), stamp(report) if report else None, stamp(path.parent / FINAL_TESTS))
    cached = _VIEWS.get(key)
    if cached and cached[0] == version:
        return cached[1]
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    view = trajectory_view(data, report_for(path), final_tests=read_json(path.parent / FINAL_TESTS))
    _VIEWS.pop(key, None)
    _VIEWS[key] = (version, view)
    while len(_VIEWS) > MAX_VIEWS:
        _VIEWS.pop(next(iter(_VIEWS)))
    return view


def export_data(path: str | Path) -> dict:
    """Index plus every row's full view: what a self-contained page needs with no server behind it."""
    found = find(path)
    data = build_index(found)
    keys = [r["key"] for r in data["rows"] if r.get("trajectory")] + [r["key"] for r in data["rl"]["rows"]]
    data["details"] = {k: d for k in keys if (d := detail(found, k)) is not None}
    return data


def check_path(path: str | Path) -> Found:
    """`find`, with the one-line error the command prints for a path that is not a run."""
    try:
        found = find(path)
        if found.root.is_file() and found.trajectories:
            load_trajectory(found.root)  # one file named on the command line: say what is wrong with it
    except UsageError:
        raise
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return found
