"""Which file comes first: the oracle fusion's file order from file-level votes of independent signal families
(issue 25), judged leave one repository out from the cached rows.

Why: held out, the default fusion (`fusion_choice.AGENT_DEFAULT`) puts a gold file first on 0.70 of the 135 cached
dev rows, against issue 25's 0.85. Its file order is that of its best span: reciprocal rank over spans, so a file
wins by one line that several line-level members happen to name alike, while members that agree only at the file
(the spectrum, LDB and MBFL each naming a different line of the same file; BM25, retrieval and lexical naming the
same whole file) split or pool their votes by how their spans happen to overlap. `file_misses` says where the 40
misses lose; each variant here keeps the default's spans and its named files' lead (`test_names`) and orders the
other files by file-level reciprocal rank: each member's own file order is one vote,

- `fused_files`: every member's vote counted alike (one flat file-level fusion);
- `fused_families`: two families, the execution members (`EXECUTION_FAMILY`: what the failing runs did) and the
  text members (`TEXT_FAMILY`: what the issue says), each fused on its own, then the two family orders fused with
  one vote each, so neither family wins by having more members; `fused_families_k1` the same with rank constant 1
  (the top of each family's order counts far more); `fused_families_agree` by the worse of a file's two family
  ranks (both families must rank it high), the sum breaking ties.

No parameter is read off the rows (k is reciprocal rank's usual 60, or 1 as the other end, judged together), and
nothing names a repository, file or identifier. `python -m pinpoint_lab.localization.file_order --cache
lab/results/localize-loro25 --instances <ids>` prints the miss table and the held-out table (cached rows only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pinpoint.localization.fusion import NAMED, refine_files
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import Suspect

from pinpoint_lab.localization import fusion_choice as fc
from pinpoint_lab.localization import line_order as lo

#: members whose evidence is the failing and passing runs only
EXECUTION_FAMILY = ("spectrum", "ldb", "mbfl", "predicates", "traceback")
#: members that read the issue text (`mentions`: executed lines spelling the issue's names)
TEXT_FAMILY = ("bm25", "retrieval", "lexical", "mentions")


def files_of(ranking: Sequence[Suspect]) -> list[str]:
    """A ranking's code files, each at its first suspect."""
    return list(dict.fromkeys(s.path for s in ranking if not is_test_path(s.path)))


def file_rrf(orders: Mapping[str, Sequence[str]], k: float, weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Reciprocal rank over file orders: per file, sum of weight / (k + its rank) over the orders naming it."""
    scores: dict[str, float] = {}
    for name, order in orders.items():
        for i, path in enumerate(order):
            scores[path] = scores.get(path, 0.0) + (weights or {}).get(name, 1.0) / (k + i + 1)
    return scores


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Best first; equal scores in the order the files were first named."""
    return sorted(scores, key=lambda p: -scores[p])


@dataclass(frozen=True)
class FileVariant:
    """The default fusion's spans with its files (after the named ones) in the order of `families`: each family's
    members fused at file level (reciprocal rank, constant `k`, the rule's weights), then the families' orders
    fused with one vote each (`worst`: by the worse family rank instead, the rank sum breaking ties)."""

    families: tuple[tuple[str, ...], ...]
    k: float = 60.0
    worst: bool = False


FILE_VARIANTS: dict[str, FileVariant] = {
    "fused_files": FileVariant((EXECUTION_FAMILY + TEXT_FAMILY,)),
    "fused_families": FileVariant((EXECUTION_FAMILY, TEXT_FAMILY)),
    "fused_families_k1": FileVariant((EXECUTION_FAMILY, TEXT_FAMILY), k=1.0),
    "fused_families_agree": FileVariant((EXECUTION_FAMILY, TEXT_FAMILY), worst=True),
}
#: variants judged together: k (the rank constant is part of what the procedure chooses), and every way of
#: combining the two families
FILE_FAMILIES: dict[str, tuple[str, ...]] = {"k": ("fused_families", "fused_families_k1"),
                                             "families": ("fused_families", "fused_families_k1",
                                                          "fused_families_agree")}


def family_order(lists: Mapping[str, Sequence[Suspect]], variant: FileVariant,
                 weights: Mapping[str, float]) -> list[str]:
    """The files of `lists` (each member's suspects, floors applied) in `variant`'s order."""
    per_family = [ranked(file_rrf({n: files_of(lists[n]) for n in family if lists.get(n)}, variant.k, weights))
                  for family in variant.families]
    per_family = [order for order in per_family if order]
    if not variant.worst:
        return ranked(file_rrf({str(i): order for i, order in enumerate(per_family)}, variant.k))
    ranks = [{p: i for i, p in enumerate(order)} for order in per_family]
    absent = 1 + max((len(order) for order in per_family), default=0)
    paths = {p for order in per_family for p in order}
    return sorted(paths, key=lambda p: (max(r.get(p, absent) for r in ranks), sum(r.get(p, absent) for r in ranks), p))


def default_members(members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]]
                    ) -> dict[str, list[Suspect]] | None:
    """The lists the default fusion fuses (its spectrum, its targeted members, each above its floor), or None
    where the row has no such spectrum."""
    base = fc.VARIANTS[fc.AGENT_DEFAULT]
    if not signals.get(base.spectrum):
        return None
    floors = dict(base.rule.floors)
    lists = {**members, "spectrum": signals[base.spectrum], **{m: signals[m] for m in base.members if signals.get(m)}}
    return {n: [s for s in v if s.score > floors[n]] if n in floors else list(v) for n, v in lists.items()}


def file_variant_fusion(members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]],
                        variant: FileVariant) -> list[Suspect] | None:
    """`variant` over a row: the default fusion's spans, the named files first as before, then every other code
    file in `family_order`; None without the default's spectrum."""
    fused = fc.variant_fusion(members, signals, fc.VARIANTS[fc.AGENT_DEFAULT])
    lists = default_members(members, signals)
    if fused is None or lists is None:
        return None
    present = files_of(fused)
    order = dict.fromkeys([*files_of(lists.get(NAMED, [])),
                           *family_order(lists, variant, dict(fc.VARIANTS[fc.AGENT_DEFAULT].rule.weights)),
                           *present])
    return refine_files(fused, [], [p for p in order if p in set(present)])


def file_rankings(row: dict, members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]]
                  ) -> dict[str, list[Suspect] | None]:
    """`FILE_VARIANTS` over a row (`line_order.Rankings`)."""
    return {name: file_variant_fusion(members, signals, v) for name, v in FILE_VARIANTS.items()}


# -- the misses -----------------------------------------------------------------------------------------------------
#: the members the miss table reads, in its column order
MISS_MEMBERS = ("spectrum", "ldb", NAMED, "mentions", "mbfl", "predicates", "retrieval", "bm25", "lexical",
                "traceback", "insertion")


def why_first(top: str, lists: Mapping[str, Sequence[Suspect]]) -> str:
    """What put the wrong top file first: the named files' lead, no execution member naming it (text only), or the
    execution or text family's own file order."""
    if files_of(lists.get(NAMED, []))[:1] == [top]:
        return "named"
    if not any(top in files_of(lists.get(n, [])) for n in EXECUTION_FAMILY):
        return "text only"
    execution = family_order(lists, FileVariant((EXECUTION_FAMILY,)), {})
    return "execution" if execution[:1] == [top] else "text" if family_order(
        lists, FileVariant((TEXT_FAMILY,)), {})[:1] == [top] else "spans"


def file_facts(records: Sequence[Mapping], path: str, spans: Sequence) -> tuple[int, float, int] | None:
    """A file's execution facts from a row's line records (None where none is in it): the most passing tests that
    ran one of its lines, the best Ochiai of its lines, and how many distinct functions the failing runs ran in it."""
    from pinpoint.localization.blocks import innermost_function

    own = [r for r in records if r["path"] == path]
    if not own:
        return None
    functions = {getattr(innermost_function(spans, r["line"]), "qualname", None) for r in own}
    return max(r["ep"] for r in own), max(r["ochiai"] for r in own), len(functions)


def file_misses(rows: Sequence[dict]) -> str:
    """Each row whose default fused top file is not gold: the gold file's rank there, the members ranking a gold
    file first and those ranking it above the wrong top file, the wrong top file, what put it first, whether it
    shares the gold file's folder; then the counts."""
    from pinpoint_lab.localization import localize_bench as lb

    lines, causes, outside, sibling, facts = [], {}, 0, 0, [0, 0, 0, 0]
    for row in rows:
        signals, _ = lb.row_inputs(row)
        members = {n: s for n, s in signals.items() if n in lb.FUSED["oracle"] and s}
        lists = default_members(members, signals) or members
        lists = {**lists, "insertion": signals.get("insertion", [])}
        fused = files_of(fc.variant_fusion(members, signals, fc.VARIANTS[fc.AGENT_DEFAULT]) or lb.fuse(members))
        gold = lb.row_gold(row).files
        if not fused or fused[0] in gold:
            continue
        top, orders = fused[0], {n: files_of(lists.get(n, [])) for n in MISS_MEMBERS}
        rank = {n: min((o.index(g) for g in gold if g in o), default=None) for n, o in orders.items()}
        first = [n for n, r in rank.items() if r == 0]
        above = [n for n, r in rank.items() if r is not None and (top not in orders[n] or r < orders[n].index(top))]
        at = next((i + 1 for i, p in enumerate(fused) if p in gold), None)
        cause = why_first(top, lists)
        causes[cause] = causes.get(cause, 0) + 1
        outside += not any(r is not None for r in rank.values())
        near = any(g.rsplit("/", 1)[0] == top.rsplit("/", 1)[0] for g in gold)
        sibling += near
        pair = [file_facts(row.get("lines", []), p, lb.row_sources(row).functions(p))
                for p in (top, fused[at - 1])] if at else [None]
        if None not in pair:  # gold against the wrong top: fewer passing runs, better Ochiai, more functions
            (ep_top, och_top, fn_top), (ep_gold, och_gold, fn_gold) = pair
            facts = [facts[0] + 1, facts[1] + (ep_gold < ep_top), facts[2] + (och_gold > och_top),
                     facts[3] + (fn_gold > fn_top)]
        lines.append(f"{row['instance_id']:<30}{at or '-':>5}  {cause:<10}{'sibling' if near else '':<8}{top:<46}"
                     f"first: {','.join(first) or '-'}; above: {','.join(n for n in above if n not in first) or '-'}")
    head = [f"file misses of {fc.AGENT_DEFAULT}: {len(lines)} of {len(rows)} rows (gold at: its rank in the fused "
            "file order; first / above: the members ranking a gold file first / above the wrong top file)",
            f"{'row':<30}{'gold at':>7}{'why top':<10}{'':<8}{'wrong top file':<46}"]
    tail = [f"why the wrong file is first: {', '.join(f'{c} {n}' for c, n in sorted(causes.items()))}; "
            f"wrong top in the gold file's folder: {sibling}; gold file in no member's list: {outside}",
            f"of {facts[0]} misses with both files among the line records, the gold file has: fewer passing runs "
            f"through it {facts[1]}, a better best Ochiai {facts[2]}, more distinct functions run {facts[3]}"]
    return "\n".join([*head, *lines, *tail])


def main(argv: Sequence[str] | None = None) -> int:
    rows, _ = lo.rows_from_args(argv, __doc__.split("\n\n")[0], with_texts=False)  # no statement kinds here
    print(file_misses(rows))
    print(lo.format_variants(lo.scored_rows(rows, file_rankings), tuple(FILE_VARIANTS), FILE_FAMILIES, "file order"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
