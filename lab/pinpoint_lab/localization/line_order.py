"""Ordering lines inside the fused ranking by execution facts the cached rows already keep (issue 25): tried from
the cached oracle rows, judged leave one repository out, not shipped (docs/localization.md, "Line order from
execution facts and statement kinds").

The default fusion (`fusion_choice.AGENT_DEFAULT`) orders the top file's lines by reciprocal rank over the members;
its held-out line Hit@1 and Hit@10 are the figures furthest from issue 25's targets. Each variant here adds one
repository-agnostic fact about a line to that fusion, as a member at some weight or as a demotion inside the top
file, and the choice procedure of `fusion_choice` (the variant with the best objective on the other repositories'
rows scores each repository) says whether it would be chosen and what it gives held out:

- `frames`: the lines of the failing tests' tracebacks in the code under test (`LineRecord.frame_depth`), the
  deepest frame first;
- `recent`: the lines only failing runs ran (no passing test ran them, `ep == 0`) among the lines a failing run ran
  last (`LineRecord.recency`), the latest first: a failure surfaces soon after its fault, and code only the failing
  tests run is where a spectrum cannot separate them; `recent_all` without the failing-only condition;
- `dstar`: the spectrum's lines by DStar instead of Ochiai (a formula that counts many passing runs less);
- `conditions`: the spectrum's `if`/`while`/`assert` lines, the statement kind a fix most often edits besides
  assignments and returns (read from the file at the row's base commit);
- demotions: the top file's call statements (and imports, `pass`, `continue`, `break`, class lines), or its `raise`
  statements, moved after every other suspect.

Nothing here names a repository, file or identifier. `python -m pinpoint_lab.localization.line_order --cache
lab/results/localize-loro25 --instances <ids>` prints the table (reads cached rows only; the files for statement
kinds from the offline repositories, one `git cat-file --batch` per row).
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pinpoint.localization.fusion import DEMOTE_STEP, fuse
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import Suspect

from pinpoint_lab.localization import fusion_choice as fc

#: statement kinds (`ast` class names) the `conditions` member keeps
CONDITIONS = ("If", "While", "Assert")
#: statement kinds the call demotion moves after the rest: a call's own line, imports and control words
CALLS = ("Expr", "Import", "ImportFrom", "Pass", "Continue", "Break", "ClassDef")


# -- members from a row's line records ------------------------------------------------------------------------------
def frames(records: Sequence[Mapping]) -> list[Suspect]:
    """The traceback lines of the failing tests that lie in the code under test, deepest frame first."""
    found = sorted((r for r in records if r.get("frame_depth") is not None),
                   key=lambda r: (r["frame_depth"], r["rank"]))
    return [Suspect(r["path"], r["line"], r["line"], 1.0 / (1 + r["frame_depth"]), "frames",
                    f"traceback frame, depth {r['frame_depth']}") for r in found]


def recent(records: Sequence[Mapping], failing_only: bool = True) -> list[Suspect]:
    """The lines a failing run ran last (`recency` 0: its last line), the latest first; `failing_only`: only those
    no passing test ran."""
    found = sorted((r for r in records if r.get("recency") is not None and (not failing_only or r["ep"] == 0)),
                   key=lambda r: (r["recency"], r["rank"]))
    return [Suspect(r["path"], r["line"], r["line"], 1.0 / (1 + r["recency"]), "recent",
                    f"ran {r['recency']} lines before a failing run's end") for r in found]


def by_dstar(records: Sequence[Mapping]) -> list[Suspect]:
    """The spectrum's lines by DStar (ties by the spectrum's own rank)."""
    return [Suspect(r["path"], r["line"], r["line"], r["dstar"], "dstar")
            for r in sorted(records, key=lambda r: (-r["dstar"], r["rank"]))]


def statement_kinds(text: str) -> dict[int, str]:
    """Per line, the kind (`ast` class name) of the narrowest statement starting there; {} where it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    best: dict[int, tuple[int, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            size = (node.end_lineno or node.lineno) - node.lineno
            if node.lineno not in best or size < best[node.lineno][0]:
                best[node.lineno] = (size, type(node).__name__)
    return {line: kind for line, (_, kind) in best.items()}


KindsOf = Callable[[str], Mapping[int, str]]


def of_kinds(records: Sequence[Mapping], kinds_of: KindsOf, keep: Sequence[str]) -> list[Suspect]:
    """The spectrum's lines whose statement is of a kind in `keep`, in the spectrum's order."""
    return [Suspect(r["path"], r["line"], r["line"], r["ochiai"], "kind")
            for r in sorted(records, key=lambda r: r["rank"]) if kinds_of(r["path"]).get(r["line"]) in keep]


def demoted(fused: Sequence[Suspect], kinds_of: KindsOf, kinds: Sequence[str]) -> list[Suspect]:
    """`fused` with the top file's single lines of `kinds` moved after every other suspect (scores lowered so the
    list stays in score order)."""
    top = next((s.path for s in fused if not is_test_path(s.path)), None)
    late = [s for s in fused if s.path == top and s.start_line == s.end_line
            and kinds_of(s.path).get(s.start_line) in kinds]
    moved = {id(s) for s in late}
    out: list[Suspect] = []
    for s in [*(s for s in fused if id(s) not in moved), *late]:
        if out and s.score >= out[-1].score and id(s) in moved:
            s = replace(s, score=out[-1].score - DEMOTE_STEP, evidence=f"[demoted: {kinds_of(s.path).get(s.start_line)}] {s.evidence}")
        out.append(s)
    return out


# -- the variants ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LineVariant:
    """The default fusion with one more member (`member`, at `weight`) or with the top file's lines of `demote`
    moved last."""

    member: str | None = None
    weight: float = 1.0
    demote: tuple[str, ...] = ()


LINE_VARIANTS: dict[str, LineVariant] = {
    "fused_frames": LineVariant("frames", 1.0),
    "fused_frames_half": LineVariant("frames", 0.5),
    "fused_frames_quarter": LineVariant("frames", 0.25),
    "fused_recent": LineVariant("recent", 0.25),
    "fused_recent_half": LineVariant("recent", 0.5),
    "fused_recent1": LineVariant("recent", 1.0),
    "fused_recent_eighth": LineVariant("recent", 0.125),
    "fused_recent_all": LineVariant("recent_all", 0.25),
    "fused_recent_all_half": LineVariant("recent_all", 0.5),
    "fused_dstar_half": LineVariant("dstar", 0.5),
    "fused_dstar": LineVariant("dstar", 1.0),
    "fused_conditions_half": LineVariant("conditions", 0.5),
    "fused_conditions": LineVariant("conditions", 1.0),
    "fused_demote_calls": LineVariant(demote=CALLS),
    "fused_demote_raise": LineVariant(demote=("Raise",)),
}
#: each family's weights, judged together (the weight is part of what the procedure chooses)
FAMILIES: dict[str, tuple[str, ...]] = {
    "frames": ("fused_frames", "fused_frames_half", "fused_frames_quarter"),
    "recent": ("fused_recent_eighth", "fused_recent", "fused_recent_half", "fused_recent1"),
    "recent_all": ("fused_recent_all", "fused_recent_all_half"),
    "dstar": ("fused_dstar_half", "fused_dstar"),
    "conditions": ("fused_conditions_half", "fused_conditions"),
    "demotions": ("fused_demote_calls", "fused_demote_raise"),
}


def member_suspects(name: str, records: Sequence[Mapping], kinds_of: KindsOf) -> list[Suspect]:
    if name == "frames":
        return frames(records)
    if name in ("recent", "recent_all"):
        return recent(records, failing_only=name == "recent")
    if name == "dstar":
        return by_dstar(records)
    if name == "conditions":
        return of_kinds(records, kinds_of, CONDITIONS)
    raise ValueError(f"unknown line member {name!r}")


def line_variant_fusion(members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]],
                        records: Sequence[Mapping], kinds_of: KindsOf, variant: LineVariant) -> list[Suspect] | None:
    """`variant` over a row: the default fusion (`fusion_choice.AGENT_DEFAULT`'s spectrum, members and rule) with
    the line member added at its weight, or with the demotion applied; None without the default's spectrum."""
    base = fc.VARIANTS[fc.AGENT_DEFAULT]
    if not signals.get(base.spectrum):
        return None
    if variant.demote:
        return demoted(fc.variant_fusion(members, signals, base) or [], kinds_of, variant.demote)
    extra = {m: signals[m] for m in base.members if signals.get(m)}
    added = member_suspects(variant.member, records, kinds_of) if variant.member else []
    rule = replace(base.rule, weights=(*base.rule.weights, (variant.member, variant.weight)))
    return fuse({**members, "spectrum": signals[base.spectrum], **extra, **({variant.member: added} if added else {})},
                rule=rule)


# -- the rows and the table -----------------------------------------------------------------------------------------
#: a row's extra rankings beside the shipped choices: (row, its fused members, every signal it kept) -> name -> fused
#: ranking (None: the row has no such ranking, so `fusion_choice` reads it as its plain `fused`)
Rankings = Callable[[dict, dict[str, list[Suspect]], dict[str, list[Suspect]]], Mapping[str, list[Suspect] | None]]


def scored_rows(rows: Sequence[dict], rankings: Rankings) -> list[dict]:
    """Each cached oracle row (backfilled) as `fusion_choice` reads rows: its repository and every candidate's
    hits (`fusion_choice.CHOICES` and what `rankings` adds), recomputed from the kept suspects and line records."""
    from pinpoint_lab.localization import localize_bench as lb

    out = []
    for row in rows:
        signals, _ = lb.row_inputs(row)
        members = {n: s for n, s in signals.items() if n in lb.FUSED["oracle"] and s}
        gold, sources = lb.row_gold(row), lb.row_sources(row)
        hits = lb.evaluate_row(signals, "oracle", gold, sources)  # the shipped choices, as the bench scores them
        hits |= {n: lb.ranking_hits(f, gold, sources) for n, f in rankings(row, members, signals).items()
                 if f is not None}
        out.append({"instance_id": row["instance_id"], "repo": row["repo"], "signals": hits})
    return out


def line_rankings(texts: Mapping[str, Mapping[str, str]]) -> Rankings:
    """`LINE_VARIANTS` over a row; `texts`: per instance, the files at its base commit (for statement kinds)."""
    def rankings(row: dict, members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]]
                 ) -> dict[str, list[Suspect] | None]:
        files, cache = texts.get(row["instance_id"], {}), {}

        def kinds_of(path: str) -> Mapping[int, str]:
            if path not in cache:
                cache[path] = statement_kinds(files[path]) if path in files else {}
            return cache[path]

        return {name: line_variant_fusion(members, signals, row.get("lines", []), kinds_of, variant)
                for name, variant in LINE_VARIANTS.items()}
    return rankings


#: the columns: the issue's four targets, plain and in expectation over ties
COLUMNS = ("file@1", "file@1~", "function@5", "function@5~", "line@1", "line@1~", "line@10", "line@10~")


def held_out(rows: Sequence[dict], choices: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """The choice procedure over `choices`: the held-out figures and each fold's pick (repositories in order)."""
    folds, scored_by = fc.leave_one_repository_out(rows, choices)
    return fc.held_out_metrics(rows, scored_by, COLUMNS), [f.chosen for f in folds]


def format_line_order(rows: Sequence[dict]) -> str:
    """`format_variants` over `LINE_VARIANTS` and `FAMILIES`."""
    return format_variants(rows, tuple(LINE_VARIANTS), FAMILIES, "line order")


def format_variants(rows: Sequence[dict], names: Sequence[str], families: Mapping[str, Sequence[str]],
                    title: str) -> str:
    """Every variant of `names` on all rows, then the choice procedure held out: `fusion_choice.CHOICES` as
    shipped, with each variant added alone, with each family's weights added together, and with every variant
    added."""
    def figures(values: Mapping[str, float]) -> str:
        objective = sum(values[m] for m in fc.OBJECTIVE) / len(fc.OBJECTIVE)
        return "".join(f"{values[m]:>12.3f}" for m in COLUMNS) + f"{objective:>11.3f}"

    head = f"{'':<34}" + "".join(f"{m:>12}" for m in COLUMNS) + f"{'objective':>11}"
    lines = [f"{title}: {len(rows)} rows, {len({r['repo'] for r in rows})} repositories; all rows (in sample)",
             head]
    for name in (fc.AGENT_DEFAULT, *names):
        lines.append(f"{name:<34}" + figures({m: fc.metric(rows, name, m) for m in COLUMNS}))
    lines += ["held out (leave one repository out; picks: how many of the folds chose the added variants)", head]
    candidates = {"CHOICES (shipped)": ()} | {f"+ {n}": (n,) for n in names} | {
        f"+ family {f}": tuple(members) for f, members in families.items()} | {"+ every variant": tuple(names)}
    for label, added in candidates.items():
        choices = (*fc.CHOICES, *added)
        values, picks = held_out(rows, choices)
        chosen = sum(p in added for p in picks)
        lines.append(f"{label:<34}" + figures(values) + f"  picks {chosen}/{len(picks)}; on all rows: "
                     + fc.choose(rows, choices))
    return "\n".join(lines)


def load_rows(cache: Path, instances: Sequence[str] | None, with_texts: bool = True
              ) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """The cached oracle `--mbfl` rows of `instances` (default: every one in `cache`), backfilled, without those
    that failed or are not dev rows; and, `with_texts`, per row the files its line records name, read at its base
    commit."""
    from pinpoint.swebench_eval.sources import RepoSources

    from pinpoint_lab.localization import localize_bench as lb

    folder = cache / f"oracle-mbfl-v{lb.ROW_VERSION}"
    ids = instances or sorted(p.name.removesuffix(".json.gz") for p in folder.glob("*.json.gz"))
    known = lb.dataset_rows(set(ids))
    rows, texts, sources = [], {}, RepoSources()
    for iid in ids:
        row = lb.read_row(folder / f"{iid}.json.gz")
        if row is None or row.get("error") or iid not in known:
            continue
        instance = known[iid]
        rows.append(lb.backfilled(row, instance))
        if with_texts:
            paths = list(dict.fromkeys(r["path"] for r in row.get("lines", [])))
            texts[iid] = lb.files_at(sources.git_dir(instance.repo), instance.base_commit, paths)
    return rows, texts


def rows_from_args(argv: Sequence[str] | None, description: str, with_texts: bool = True
                   ) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """`load_rows` from a lab command's `--cache` and `--instances`."""
    from pinpoint_lab.localization import localize_bench as lb

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cache", type=Path, default=lb.ROWS_DIR, help="a `bench localize --cache` folder")
    parser.add_argument("--instances", nargs="*", help="only these rows (default: every cached oracle --mbfl row)")
    args = parser.parse_args(argv)
    return load_rows(args.cache, args.instances, with_texts)


def main(argv: Sequence[str] | None = None) -> int:
    rows, texts = rows_from_args(argv, __doc__.split("\n\n")[0])
    print(format_line_order(scored_rows(rows, line_rankings(texts))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
