"""Which fusion of the targeted execution signals to ship, chosen leave one repository out.

A rule picked on the rows it is then scored on flatters itself (issue 25: the predicate-switching default was chosen
on 21 rows of three repositories and lost on the 11 sympy rows measured afterwards). So every variant below is
scored on the bench's cached rows (`bench localize --mbfl`: each signal's suspects computed once per row, the
fusions recomputed from them), and the choice itself is validated: for each repository, the variant with the best
objective on the *other* repositories' rows is scored on that repository's rows. Those held-out figures are the
honest ones; the variant the same procedure picks on every row (of both committed measurements: 32 rows of four
repositories run twice, since the rankings move with the machine's load, the second beside 59 rows of four more
repositories) is the one the agent ships (`fusion.FusionRule()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pinpoint.localization.fusion import NAMED, PLAIN_RULE, FusionRule, fuse
from pinpoint.localization.mentions import NAME as MENTIONS
from pinpoint.localization.suspects import Suspect

from pinpoint_lab.localization.ties import REL_TOL


@dataclass(frozen=True)
class Variant:
    """A fused ranking of an oracle row: the bench's fused members with `spectrum` (a cached spectrum, plain or with
    its ties split) in the spectrum's place, the targeted signals in `members` added, combined by `rule`;
    `top_tie`: a finer split spectrum whose order is taken inside the plain spectrum's top tie group only;
    `without`: bench members left out."""

    spectrum: str
    members: tuple[str, ...] = ()
    rule: FusionRule = PLAIN_RULE
    top_tie: str | None = None
    #: members of the bench's fusion left out (`test_names`: the fusion before it existed)
    without: tuple[str, ...] = ()


#: the rule the variants below change a field or two of (the spectrum's lead, MBFL at half weight, every switch)
EARLIER = FusionRule(weights=(("mbfl", 0.5),), floors=(), spectrum_lead=3)
PASSING = replace(EARLIER, weights=(), floors=(("predicates", 0.1),))
HALF_MBFL = replace(EARLIER, weights=(("mbfl", 0.5),), floors=())
#: every fused variant `bench localize --mbfl` measures; the first seven are issue 25's earlier ones, as named in
#: docs/localization.md
VARIANTS: dict[str, Variant] = {
    "fused_split": Variant("spectrum_mbfl"),
    "fused_mbfl": Variant("spectrum_mbfl", ("mbfl",)),
    "fused_ps": Variant("spectrum_ps"),
    "fused_ins": Variant("spectrum_ins"),
    "fused_all": Variant("spectrum_split"),
    "fused_predicates": Variant("spectrum_mbfl", ("predicates",)),
    "fused_insertion": Variant("spectrum_mbfl", ("insertion",)),
    "fused_ps_top": Variant("spectrum_mbfl", top_tie="spectrum_ps"),
    "fused_pass": Variant("spectrum_mbfl", ("predicates",), PASSING),
    "fused_pass_nolead": Variant("spectrum_mbfl", ("predicates",), replace(EARLIER, weights=(), floors=PASSING.floors,
                                                                              switch_lead=None)),
    "fused_pred_half": Variant("spectrum_mbfl", ("predicates",), replace(EARLIER, weights=(("predicates", 0.5),),
                                                                            floors=())),
    "fused_mbfl_half": Variant("spectrum_mbfl", ("mbfl",), HALF_MBFL),
    "fused_mbfl_half_predicates": Variant("spectrum_mbfl", ("mbfl", "predicates"), HALF_MBFL),
    "fused_targeted": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER, floors=PASSING.floors)),
    "fused_targeted_mbfl1": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER, weights=(),
                                                                                      floors=PASSING.floors)),
    "fused_predicates_noanchor": Variant("spectrum_mbfl", ("predicates",), replace(EARLIER, weights=(), floors=(),
                                                                                      spectrum_lead=0)),
    "fused_targeted_noanchor": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER,
        floors=PASSING.floors, spectrum_lead=0)),
    "fused_targeted_unnamed": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER,
        floors=PASSING.floors, named_first=False), without=(NAMED,)),
    "fused_unnamed": Variant("spectrum", rule=replace(EARLIER, named_first=False), without=(NAMED,)),
    "fused_unmentioned": Variant("spectrum_mbfl", ("mbfl", "predicates"), HALF_MBFL, without=(MENTIONS,)),
    "fused_mentions2": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER,
        weights=(*HALF_MBFL.weights, (MENTIONS, 2.0)), floors=())),
    "fused_noanchor_mentions2": Variant("spectrum_mbfl", ("mbfl", "predicates"), replace(EARLIER,
        weights=(*HALF_MBFL.weights, (MENTIONS, 2.0)), floors=PASSING.floors, spectrum_lead=0)),
}
#: what the choice ranks variants by: the issue's four targets, each in expectation over ties, equally weighted
OBJECTIVE = ("file@1~", "function@5~", "line@1~", "line@10~")
#: the variants the choice is among (ties go to the earlier: the previous default first, then the plain fusions);
#: `fused` is the bench's fusion without any targeted signal
CHOICES = ("fused_predicates", "fused", "fused_split", "fused_ps", "fused_ps_top", "fused_pass", "fused_pass_nolead",
           "fused_pred_half", "fused_mbfl_half", "fused_mbfl_half_predicates", "fused_targeted",
           "fused_targeted_mbfl1", "fused_predicates_noanchor", "fused_targeted_noanchor", "fused_targeted_unnamed",
           "fused_unmentioned", "fused_mentions2", "fused_noanchor_mentions2")
#: the variant the agent's default fusion is (`fusion.FusionRule()` with MBFL and predicate switching fused): what
#: the procedure picks on both committed measurements (168 rows) and in 8 of 8 folds once `mentions` is measured as
#: the agent runs it, over every line the failing tests ran (it was `fused_targeted_noanchor` with `mentions` read
#: from the capped line records, `fused_mbfl_half_predicates` before `mentions`, `fused_targeted` on the first 32
#: rows of four repositories)
AGENT_DEFAULT = "fused_noanchor_mentions2"


def variant_fusion(members: dict[str, list[Suspect]], signals: dict[str, list[Suspect]],
                   variant: Variant) -> list[Suspect] | None:
    """`variant`'s fused ranking of a row (`members`: the setting's fused signals; `signals`: every signal the row
    kept), or None when the row has no such spectrum. A targeted member that found nothing is left out, as the
    agent leaves it out."""
    spectrum = signals.get(variant.spectrum)
    if not spectrum:
        return None
    if variant.top_tie:
        spectrum = top_tie_split(signals.get("spectrum", []), spectrum, signals.get(variant.top_tie, []))
    extra = {m: signals[m] for m in variant.members if signals.get(m)}
    kept = {n: v for n, v in members.items() if n not in variant.without}
    return fuse({**kept, "spectrum": spectrum, **extra}, rule=variant.rule)


def top_tie_split(plain: Sequence[Suspect], split: Sequence[Suspect], finer: Sequence[Suspect]) -> list[Suspect]:
    """`split` with the lines of `plain`'s top tie group (equal top scores) scored as `finer` scores them: a
    tie-break (predicate switching) applied only where the spectrum cannot tell its best lines apart."""
    if not plain:
        return list(split)
    top = plain[0].score
    group = {(s.path, s.start_line, s.end_line) for s in plain if abs(s.score - top) <= REL_TOL * max(1.0, abs(top))}
    better = {(s.path, s.start_line, s.end_line): s for s in finer}
    out = [better.get(key, s) if (key := (s.path, s.start_line, s.end_line)) in group else s for s in split]
    return sorted(out, key=lambda s: -s.score)


# -- the choice ----------------------------------------------------------------------------------------------------
def objective(rows: Sequence[dict], name: str) -> float:
    """Mean over `OBJECTIVE` of `name`'s mean over `rows` (a row without the variant, one with no targeted
    signals, counts as its plain `fused`)."""
    return sum(metric(rows, name, m) for m in OBJECTIVE) / len(OBJECTIVE)


def metric(rows: Sequence[dict], name: str, m: str) -> float:
    values = [float((r["signals"].get(name) or r["signals"]["fused"]).get(m, 0.0)) for r in rows]
    return sum(values) / max(1, len(values))


def choose(rows: Sequence[dict], choices: Sequence[str] = CHOICES) -> str:
    """The variant with the best objective on `rows` (ties: the earliest in `choices`)."""
    return max(choices, key=lambda n: (round(objective(rows, n), 9), -choices.index(n)))


@dataclass(frozen=True)
class Fold:
    """One held-out repository: the variant chosen on the others, its objective there and on the held-out rows."""

    repo: str
    rows: int
    chosen: str
    train_objective: float
    held_objective: float


def leave_one_repository_out(rows: Sequence[dict], choices: Sequence[str] = CHOICES
                             ) -> tuple[list[Fold], dict[str, str]]:
    """Each repository's rows scored by the variant chosen on every other repository's: the folds, and per row
    (instance id) the variant it was scored by."""
    folds, scored_by = [], {}
    for repo in sorted({r["repo"] for r in rows}):
        train = [r for r in rows if r["repo"] != repo]
        held = [r for r in rows if r["repo"] == repo]
        chosen = choose(train, choices) if train else choices[0]
        folds.append(Fold(repo, len(held), chosen, objective(train, chosen), objective(held, chosen)))
        scored_by.update({r["instance_id"]: chosen for r in held})
    return folds, scored_by


def held_out_metrics(rows: Sequence[dict], scored_by: dict[str, str], metrics: Sequence[str]) -> dict[str, float]:
    """Every metric over all rows, each row read from the variant its fold chose."""
    return {m: sum(float((r["signals"].get(scored_by[r["instance_id"]]) or r["signals"]["fused"]).get(m, 0.0))
                   for r in rows) / max(1, len(rows)) for m in metrics}


def format_choice(rows: Sequence[dict], metrics: Sequence[str]) -> str:
    """The choice as `bench localize --mbfl` prints it: every candidate on all rows and per repository (objective),
    each fold's pick, the held-out figures, and the pick on all rows beside the agent's default."""
    rows = [r for r in rows if not r.get("error")]
    repos = sorted({r["repo"] for r in rows})
    short = [p.split("/")[-1][:9] for p in repos]
    lines = [f"fusion choice: objective = mean of {', '.join(OBJECTIVE)} over rows; leave one repository out",
             f"{'variant':<28}" + "".join(f"{m:>13}" for m in metrics) + f"{'objective':>11}"
             + "".join(f"{s:>11}" for s in short)]
    for name in CHOICES:
        lines.append(f"{name:<28}" + "".join(f"{metric(rows, name, m):>13.3f}" for m in metrics)
                     + f"{objective(rows, name):>11.3f}"
                     + "".join(f"{objective([r for r in rows if r['repo'] == p], name):>11.3f}" for p in repos))
    folds, scored_by = leave_one_repository_out(rows)
    for f in folds:
        lines.append(f"held out {f.repo} ({f.rows} rows): chose {f.chosen} on the others (objective "
                     f"{f.train_objective:.3f}), {f.held_objective:.3f} on {f.repo}")
    held = held_out_metrics(rows, scored_by, metrics)
    lines.append(f"{'held out (LORO)':<28}" + "".join(f"{held[m]:>13.3f}" for m in metrics)
                 + f"{sum(held[m] for m in OBJECTIVE) / len(OBJECTIVE):>11.3f}")
    picked = choose(rows)
    lines.append(f"chosen on all {len(rows)} rows: {picked}; the agent's default: {AGENT_DEFAULT}"
                 + ("" if picked == AGENT_DEFAULT else " (differs: see docs/localization.md)"))
    return "\n".join(lines)
