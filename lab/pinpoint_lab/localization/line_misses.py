"""Why a fused ranking that finds the right file misses the line: for each bench row whose gold file is the fused
top file but whose top 10 lines hold no gold line, the cause as the row's own spectrum records show it.

Causes, the first that applies: the top file's gold lines are not among the spectrum's kept records (the best
`learned_fusion.MAX_RECORDS` lines some failing test ran: not run by a failing test's call phase, or ranked below
all of those), split by whether they are all pure insertions; the best gold line is outranked by 10 or more lines of
strictly higher Ochiai (code the passing tests run less); it sits in a tie group of equal Ochiai that reaches past
rank 10 (a tie-break could have lifted it). Beside each: whether the gold line's function holds one of the top 10
lines, and whether only failing tests ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CAUSES = ("insertion, not among the spectrum's records", "not among the spectrum's records",
          "outranked by higher Ochiai", "in a tie group past rank 10")


@dataclass(frozen=True)
class Miss:
    """One row's miss: its cause, the best gold record's rank and tie group (None when no record), and facts."""

    instance_id: str
    cause: str
    rank: int | None
    tie: int | None
    function_in_top10: bool
    failing_only: bool


def _function(row: dict, path: str, line: int) -> tuple[int, int] | None:
    spans = [(s[1], s[3]) for s in row.get("spans", {}).get(path, []) if s[1] <= line <= s[3]]
    return max(spans, default=None)  # the innermost: the latest start


def row_miss(row: dict, signal: str) -> Miss | None:
    """The row's miss under `signal`, or None when it is not one (the top file not gold, or a gold line found)."""
    ranked = row["signals"].get(signal) or row["signals"]["fused"]
    gold = {p: set(ls) for p, ls in row["gold_lines"].items()}
    top = (ranked.get("top_files") or [None])[0]
    if top not in gold or any(n in gold.get(p, ()) for p, n in ranked["top_lines"][:10]):
        return None
    spans = {_function(row, top, n) for n in gold[top]} - {None}
    in_function = any(p == top and any(a <= n <= b for a, b in spans) for p, n in ranked["top_lines"][:10])
    records = row.get("lines", [])
    mine = [r for r in records if r["path"] == top and r["line"] in gold[top]]
    if not mine:
        inserted = set(row.get("insertion_gold", {}).get(top, ())) == gold[top]
        return Miss(row["instance_id"], CAUSES[0] if inserted else CAUSES[1], None, None, in_function, False)
    best = min(mine, key=lambda r: r["rank"])
    above = sum(r["ochiai"] > best["ochiai"] + 1e-9 for r in records)
    tie = sum(abs(r["ochiai"] - best["ochiai"]) <= 1e-9 for r in records)
    cause = CAUSES[2] if above >= 10 else CAUSES[3]
    return Miss(row["instance_id"], cause, best["rank"], tie, in_function, best["ep"] == 0)


def format_misses(rows: Sequence[dict], signal: str) -> str:
    """The causes table: per cause, how many rows, how many with the gold's function in the top 10, how many
    failing-only, the rows' ranks and tie groups."""
    rows = [r for r in rows if not r.get("error")]
    misses = [m for r in rows if (m := row_miss(r, signal)) is not None]
    lines = [f"line misses of {signal}: {len(misses)} of {len(rows)} rows have the gold file first and no gold line "
             "in the top 10",
             f"{'cause':<46}{'rows':>5}{'fn in top 10':>14}{'failing-only':>14}  rows (rank / tie group)"]
    for cause in CAUSES:
        mine = [m for m in misses if m.cause == cause]
        if mine:
            listed = ", ".join(m.instance_id + (f" ({m.rank} / {m.tie})" if m.rank is not None else "") for m in mine)
            lines.append(f"{cause:<46}{len(mine):>5}{sum(m.function_in_top10 for m in mine):>14}"
                         f"{sum(m.failing_only for m in mine):>14}  {listed}")
    return "\n".join(lines)
