"""Does the diagnostic model's line confidence earn its place in the oracle fusion? (issue 25)

On the cached oracle rows of `bench localize --mbfl`, the default fusion (`AGENT_DEFAULT`) names its top functions;
the diagnostic model reads each of them (from the offline repository at the row's base commit, after the issue's
text, as `agent.diagnostic` reads code) and ranks their lines. Measured alone (line@1/@10 within those functions, in
expectation over ties, beside a random order of the same lines) and as a fusion member at a few weights, the weight
chosen leave one repository out by `fusion_choice`'s objective, against the default.

    python -m pinpoint_lab.localization.diagnostic_signal [--cache DIR ...] [--top 5] [--checkpoint C] [--json F]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from pinpoint.localization.diagnostic import REPOSITORY_CHECKPOINT, DiagnosticLocalizer
from pinpoint.localization.fusion import FusionRule, fuse
from pinpoint.localization.suspects import Suspect

from pinpoint_lab.localization import ties
from pinpoint_lab.localization.fusion_choice import AGENT_DEFAULT, OBJECTIVE, VARIANTS, variant_fusion
from pinpoint_lab.localization.localize_bench import (
    FUSED,
    ROWS_DIR,
    cached_folder,
    ranking_hits,
    row_gold,
    row_inputs,
    row_sources,
    scored_views,
)

#: the rows with instance images here (issue 25's 32 oracle rows): the two committed measurements of them
CACHES = (ROWS_DIR.parent / "localize-loro25", ROWS_DIR)
REPOS = ("pallets/flask", "psf/requests", "pytest-dev/pytest", "sympy/sympy")
#: the diagnostic member's reciprocal-rank weights tried (0: the default fusion itself)
WEIGHTS = (0.0, 0.25, 0.5, 1.0)
#: what is printed per ranking
METRICS = ("file@1~", "function@5~", "line@1~", "line@5~", "line@10~")


def default_fusion(row: dict) -> list[Suspect]:
    """The row's ranking by the agent's default fusion, from its cached suspects."""
    signals, _ = row_inputs(row)
    members = {n: s for n, s in signals.items() if n in FUSED["oracle"]}
    return variant_fusion(members, signals, VARIANTS[AGENT_DEFAULT]) or fuse(members)


def top_functions(row: dict, k: int) -> list[tuple[str, int, int]]:
    """The default fusion's first `k` functions as (path, def line, last line), module-level code skipped."""
    sources = row_sources(row)
    _, functions, _ = scored_views(default_fusion(row), sources)
    spans = {(path, s.qualname): s for path in sources.spans for s in sources.spans[path]}
    named = [(key[0], spans[key]) for key, _ in functions if key in spans][:k]
    return [(path, span.def_line, span.end_line) for path, span in named]


def diagnostic_lines(localizer: DiagnosticLocalizer, text: str, path: str, first: int, last: int,
                     problem: str) -> list[Suspect]:
    """Every code line of the function `first..last` of `text`, scored by the model read after the issue."""
    code = textwrap.dedent("".join(text.splitlines(keepends=True)[first - 1: last]))
    return [Suspect(path, first - 1 + r.line, first - 1 + r.line, r.score, "diagnostic", r.evidence)
            for r in localizer.rank_lines(code, description=problem)]


def line_hits(ranked: Sequence[tuple[tuple[str, int], float]], gold: dict[str, set[int]]) -> dict[str, float]:
    """line@1/5/10 in expectation over ties of (line, score) pairs, best first."""
    flags = [n in gold.get(p, ()) for (p, n), _ in ranked]
    return {f"line@{k}~": ties.expected_any(flags, [s for _, s in ranked], k) for k in (1, 5, 10)}


def row_report(row: dict, per_function: list[list[Suspect]], weights: Sequence[float] = WEIGHTS) -> dict:
    """One row: the diagnostic alone (raw scores across the functions; lines inside the fusion's function order),
    random over the same lines, and the default fusion with the diagnostic as a member at each weight."""
    gold = row_gold(row).lines
    every = [s for fn in per_function for s in fn]
    alone = sorted((((s.path, s.start_line), s.score) for s in every), key=lambda t: -t[1])
    # the function's rank first, then the model's score squeezed into (0, 1): ties only inside one function
    ordered = [((s.path, s.start_line), len(per_function) - k + 0.5 + math.atan(s.score) / math.pi)
               for k, fn in enumerate(per_function) for s in fn]
    out = {"diagnostic": line_hits(alone, gold),
           "diagnostic, fusion's function order": line_hits(sorted(ordered, key=lambda t: -t[1]), gold),
           "random, same lines": line_hits([(key, 0.0) for key, _ in alone], gold),
           "gold in those functions": float(any(n in gold.get(p, ()) for (p, n), _ in alone))}
    signals, _ = row_inputs(row)
    members = {n: s for n, s in signals.items() if n in FUSED["oracle"]}
    members = {**members, "spectrum": signals.get("spectrum_mbfl") or members.get("spectrum", []),
               **{m: signals[m] for m in VARIANTS[AGENT_DEFAULT].members if signals.get(m)}}
    diagnostic = sorted(every, key=lambda s: -s.score)
    for w in weights:
        rule = FusionRule(weights=(*FusionRule().weights, ("diagnostic", w)))
        fused = fuse({**members, "diagnostic": diagnostic} if w else members, rule=rule)
        hits = ranking_hits(fused, row_gold(row), row_sources(row))
        out[f"fused + diagnostic x{w}"] = {m: float(hits[m]) for m in METRICS}
    return out


def mean(reports: Sequence[dict], name: str, metric: str) -> float:
    values = [r[name][metric] if isinstance(r[name], dict) else r[name] for r in reports]
    return sum(values) / max(1, len(values))


def objective(reports: Sequence[dict], name: str) -> float:
    return sum(mean(reports, name, m) for m in OBJECTIVE) / len(OBJECTIVE)


def held_out(reports: Sequence[dict], weights: Sequence[float] = WEIGHTS) -> tuple[dict[str, float], dict[str, float]]:
    """Leave one repository out: each repository's rows read at the weight with the best objective on the other
    repositories' rows (a tie to the smaller weight, so the default wins a tie); the metrics and each fold's pick."""
    picks, scored = {}, []
    for repo in sorted({r["repo"] for r in reports}):
        train = [r for r in reports if r["repo"] != repo]
        w = max(weights, key=lambda w: (round(objective(train, f"fused + diagnostic x{w}"), 9), -w))
        picks[repo] = w
        scored += [r[f"fused + diagnostic x{w}"] for r in reports if r["repo"] == repo]
    return {m: sum(s[m] for s in scored) / max(1, len(scored)) for m in METRICS}, picks


def measure(rows: Sequence[dict], localizer: DiagnosticLocalizer, top: int, log=print) -> list[dict]:
    """Every row's report, its functions read from the offline repository at the row's base commit."""
    from pinpoint_lab.localization.corpora import _offline_swebench

    instances = {i.instance_id: (repo, i) for repo, rows_ in _offline_swebench().values() for i in rows_}
    reports = []
    for k, row in enumerate(rows, 1):
        repo, instance = instances[row["instance_id"]]
        texts: dict[str, str] = {}
        per_function = []
        for path, first, last in top_functions(row, top):
            if path not in texts:
                texts[path] = repo.git.show(f"{instance.base_commit}:{path}", strip_newline_in_stdout=False)
            per_function.append(diagnostic_lines(localizer, texts[path], path, first, last,
                                                 instance.problem_statement))
        reports.append({"instance_id": row["instance_id"], "repo": row["repo"], **row_report(row, per_function)})
        log(f"[{k}/{len(rows)}] {row['instance_id']}: {len(per_function)} functions")
    return reports


def format_reports(reports: Sequence[dict], label: str) -> str:
    names = [n for n in reports[0] if n not in ("instance_id", "repo")]
    lines = [f"{label}: {len(reports)} rows", f"{'ranking':<40}" + "".join(f"{m:>13}" for m in METRICS)]
    for name in names:
        if isinstance(reports[0][name], dict):
            lines.append(f"{name:<40}" + "".join(
                f"{mean(reports, name, m):>13.3f}" if m in reports[0][name] else f"{'':>13}" for m in METRICS))
        else:
            lines.append(f"{name:<40}{mean(reports, name, ''):>13.3f}")
    metrics, picks = held_out(reports)
    lines.append(f"{'held out (LORO weight)':<40}" + "".join(f"{metrics[m]:>13.3f}" for m in METRICS))
    lines.append("folds: " + ", ".join(f"{repo} -> x{w}" for repo, w in picks.items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pinpoint_lab.localization.diagnostic_signal",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, action="append", default=None,
                        help="a `bench localize --cache` folder with oracle-mbfl rows (repeatable; default both "
                             "committed measurements)")
    parser.add_argument("--top", type=int, default=5, help="the default fusion's top functions read (default 5)")
    parser.add_argument("--checkpoint", type=Path, default=REPOSITORY_CHECKPOINT)
    parser.add_argument("--json", type=Path, default=None, help="also write every row's report here")
    args = parser.parse_args(argv)
    localizer = DiagnosticLocalizer(args.checkpoint)
    out = {}
    for cache in args.cache or CACHES:
        rows = [r for r in cached_folder(cache, "oracle-mbfl") if r["repo"] in REPOS and not r.get("error")]
        if not rows:
            print(f"{parser.prog}: no oracle-mbfl rows of {', '.join(REPOS)} in {cache}", file=sys.stderr)
            return 2
        out[str(cache)] = reports = measure(rows, localizer, args.top, lambda s: print(s, file=sys.stderr))
        print(format_reports(reports, f"{cache} (top {args.top} functions, {args.checkpoint.name})"))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
