"""`pinpoint-lab bench localize`: every localization signal, alone and fused, on SWE-bench rows, at file, function and
line level, beside BM25 and grep baselines measured in the same run.

Two settings per row:
- `issue`: the problem statement only, on a checkout of the base commit (retrieval, lexical = the grep baseline,
  bm25 = the BM25 baseline, fused);
- `oracle`: plus the instance's FAIL_TO_PASS tests as failing tests, run in the instance's own container with its
  test patch applied (traceback, spectrum, ldb, fused over everything).

Metrics against the reference patch: file Acc@k (a gold file in the top k), function Acc@k (a function the patch
touches in the top k), line Hit@k (a gold line in the top k lines; an insertion counts at the line it goes before),
all gold files in the top 5, seconds. Each row's result is cached as one JSON file, so a run resumes (a row that
failed, e.g. an image that did not build, is tried again).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pinpoint.environments.executor import Item, LocalExecutor, Needs, RayExecutor
from pinpoint.localization.blocks import FunctionSpan, innermost_function
from pinpoint.localization.execution import Sources
from pinpoint.localization.fusion import fuse, top_lines
from pinpoint.localization.learned_fusion import (
    FusionModel,
    LearnedFusion,
    LineRecord,
    candidates,
    features,
    line_records,
    train,
)
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.swebench_eval.metrics import patch_gold_lines
from pinpoint.swebench_eval.sources import RepoSources

from pinpoint_lab.localization import ties
from pinpoint_lab.localization.fusion_choice import AGENT_DEFAULT, VARIANTS, format_choice, variant_fusion
from pinpoint_lab.localization.line_misses import format_misses
from pinpoint_lab.paths import results_dir

FILE_KS, FUNCTION_KS, LINE_KS = (1, 3, 5), (1, 5, 10), (1, 5, 10)
SETTINGS = ("issue", "oracle")
#: where rows are cached by default: in the project, committed, so the figures in docs/localization.md can be read
#: back and a run cut short is finished by a later session on another machine
ROWS_DIR = results_dir() / "localize"
#: the cache folder's version: rows of an older layout are computed again
ROW_VERSION = 3
#: each signal's own suspects kept per row
KEPT_SUSPECTS = 50
#: how far the line walk goes to see a tie group at rank 10 whole
LINE_POOL = 400
#: signals the agent fuses in each setting (the baselines are measured, not fused)
FUSED = {"issue": ("retrieval", "lexical", "bm25"),
         "oracle": ("retrieval", "lexical", "bm25", "traceback", "spectrum", "ldb", "test_names", "mentions")}
#: with `--mbfl`, the targeted execution signals kept per row: MBFL, predicate switching, insertion points, and the
#: spectrum with its ties split by MBFL (`spectrum_mbfl`), then also by predicate switching (`spectrum_ps`), by
#: insertion points (`spectrum_ins`), by both (`spectrum_split`)
MBFL_SIGNALS = ("mbfl", "spectrum_mbfl", "predicates", "spectrum_ps", "insertion", "spectrum_ins", "spectrum_split")


@dataclass(frozen=True)
class Gold:
    """Where the reference patch changes the code: files, lines, and the functions those lines are in."""

    lines: dict[str, set[int]]
    functions: frozenset[tuple[str, str]]

    @property
    def files(self) -> set[str]:
        return set(self.lines)


def gold_of(patch: str, sources: Sources) -> Gold:
    """The gold locations, with functions read from the base commit's files through `sources`."""
    lines = {p: ls for p, ls in patch_gold_lines(patch).items() if not is_test_path(p)}
    functions = set()
    for path, numbers in lines.items():
        spans = sources.functions(path)
        for n in numbers:
            span = innermost_function(spans, n)
            functions.add((path, span.qualname if span else "<module>"))
    return Gold(lines, frozenset(functions))


def _gold_json(gold: Gold) -> dict:
    return {"gold_files": sorted(gold.files), "gold_functions": sorted(gold.functions),
            "gold_lines": {p: sorted(ls) for p, ls in gold.lines.items()}}


def scored_views(suspects: Sequence[Suspect], sources: Sources) -> tuple[list, list, list]:
    """A ranked suspect list read three ways, each item with the score of the suspect that first named it: files,
    functions (each span's innermost function), lines (walked on to `LINE_POOL`, so a tie at rank 10 is seen whole).
    """
    code = [s for s in suspects if not is_test_path(s.path)]
    files: dict[str, float] = {}
    functions: dict[tuple[str, str], float] = {}
    for s in code:
        files.setdefault(s.path, s.score)
        if s.end_line - s.start_line >= 80 and s.start_line == 1:  # a whole file names no function
            continue
        span = sources.innermost(s.path, s.start_line)
        functions.setdefault((s.path, span.qualname if span else "<module>"), s.score)
    lines = [((p, n), s.score) for p, n, s in top_lines(code, max(LINE_KS), limit=LINE_POOL)]
    return list(files.items()), list(functions.items()), lines


def ranked_views(suspects: Sequence[Suspect], sources: Sources) -> tuple[list[str], list[tuple[str, str]], list]:
    """A ranked suspect list read three ways: files, functions (each span's innermost function), lines."""
    files, functions, lines = scored_views(suspects, sources)
    return [f for f, _ in files], [f for f, _ in functions], [line for line, _ in lines[: max(LINE_KS)]]


def tie_scores(views: tuple[list, list, list], gold: Gold) -> dict[str, float | int]:
    """Every hit also in expectation over ties (`<metric>~`), and the top tie group's size at each level
    (`ties_<level>`: how many share the top score; lines are walked to `LINE_POOL` and a signal keeps
    `KEPT_SUSPECTS` suspects in the cache, so a larger tie reads as capped there)."""
    levels = {"file": (views[0], FILE_KS, lambda f: f in gold.files),
              "function": (views[1], FUNCTION_KS, lambda f: f in gold.functions),
              "line": (views[2], LINE_KS, lambda pn: pn[1] in gold.lines.get(pn[0], ()))}
    out: dict[str, float | int] = {}
    for level, (ranked, ks, is_gold) in levels.items():
        flags, scores = [is_gold(item) for item, _ in ranked], [sc for _, sc in ranked]
        out.update({f"{level}@{k}~": ties.expected_any(flags, scores, k) for k in ks})
        out[f"ties_{level}"] = ties.top_tie(scores)
    files = views[0]
    out["all_files@5~"] = ties.expected_all([f in gold.files for f, _ in files], [sc for _, sc in files], 5,
                                            len(gold.files))
    return out


def score(views: tuple[list[str], list[tuple[str, str]], list], gold: Gold) -> dict[str, bool]:
    """Hits at every cut-off for one ranking."""
    files, functions, lines = views
    hits = {f"file@{k}": bool(set(files[:k]) & gold.files) for k in FILE_KS}
    hits.update({f"function@{k}": bool(set(functions[:k]) & gold.functions) for k in FUNCTION_KS})
    hits.update({f"line@{k}": any(n in gold.lines.get(p, ()) for p, n in lines[:k]) for k in LINE_KS})
    hits["all_files@5"] = bool(gold.files) and gold.files <= set(files[:5])
    return hits


def spans_json(sources: Sources, paths: Sequence[str]) -> dict[str, list[list]]:
    """The function spans of `paths`, so a row's rankings can be read as functions again without the repository."""
    return {p: [[s.qualname, s.first_line, s.def_line, s.end_line] for s in sources.functions(p)]
            for p in dict.fromkeys(paths)}


def row_sources(row: dict) -> Sources:
    """A `Sources` that knows a cached row's function spans (and no file text)."""
    sources = Sources(files={})
    sources.spans = {p: [FunctionSpan(*s) for s in spans] for p, spans in row.get("spans", {}).items()}
    return sources


def structured(signals: dict[str, list[Suspect]], records: Sequence[LineRecord], sources: Sources) -> dict:
    """What a learned fusion trains on without running the row again: the spectrum's line records and the function
    spans of every file a kept suspect or record is in."""
    paths = [s.path for v in signals.values() for s in v[:KEPT_SUSPECTS]] + [r.path for r in records]
    return {"lines": [r.to_dict() for r in records], "spans": spans_json(sources, paths)}


def ranking_hits(suspects: Sequence[Suspect], gold: Gold, sources: Sources) -> dict:
    """One ranking's hits in its order and in expectation over its ties, its top tie groups, and its top files,
    functions and lines: what the bench keeps of every signal, fusion and peer."""
    views = ranked_views(suspects, sources)
    return {**score(views, gold), **tie_scores(scored_views(suspects, sources), gold), "top_files": views[0][:5],
            "top_functions": views[1][:10], "top_lines": views[2][:10]}


def evaluate_row(signals: dict[str, list[Suspect]], setting: str, gold: Gold, sources: Sources) -> dict:
    """Per-signal hits, and the fused ranking's (reciprocal rank over the setting's signals)."""
    members = {n: s for n, s in signals.items() if n in FUSED[setting] and s}
    ranked = {**signals, "fused": fuse(members)}
    for name, variant in VARIANTS.items():  # each targeted signal as a tie-break and as a member (lab/fusion_choice)
        if (fused := variant_fusion(members, signals, variant)) is not None:
            ranked[name] = fused
    if setting == "issue":  # the alternative file order, measured beside the default
        ranked["interleaved"] = fuse(members, files="interleave")
    out = {}
    for name, suspects in ranked.items():
        out[name] = ranking_hits(suspects, gold, sources)
        if name not in ("fused", "interleaved", *VARIANTS):  # what a learned fusion trains on, without running it again
            out[name]["suspects"] = [s.to_dict() for s in suspects[:KEPT_SUSPECTS]]
    return out


def cached_rows(instances: Sequence, setting: str, cache: Path, compute: Callable, log=print,
                variant: str = "", needs: Sequence[str] = (), executor: LocalExecutor | RayExecutor | None = None
                ) -> list[dict]:
    """Each row's result from `cache` when there, else `compute(instance)` on `executor` (default: one thread
    here; on Ray, a task holding one box), written there by this process as it comes back (`variant`: a folder of
    its own, e.g. `-mbfl` for rows with MBFL; a cached row without every signal in `needs` is computed again, so a
    signal added later extends the cached rows). Rows come back in `instances`' order."""
    by_id = {instance.instance_id: instance for instance in instances}
    rows = stored_rows(cache / f"{setting}{variant}-v{ROW_VERSION}", instances, setting, compute,
                       usable=lambda row: all(n in row["signals"] for n in needs),
                       read=lambda row: rescored(backfilled(row, by_id[row["instance_id"]])), log=log,
                       executor=executor)
    return [rows[instance.instance_id] for instance in instances]


def stored_rows(folder: Path, instances: Sequence, setting: str, compute: Callable,
                usable: Callable[[dict], bool] = lambda row: True, read: Callable[[dict], dict] = lambda row: row,
                log=print, executor: LocalExecutor | RayExecutor | None = None,
                headline: Callable[[dict], str] | None = None) -> dict[str, dict]:
    """Each instance's row from `folder` (one gzip JSON per row, `read` applied) when it ran there and is `usable`,
    else `compute(instance)` on `executor`, timed and written by this process as it comes back; one that raised is
    written as a one-line error and computed again next time. By instance id."""
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {}
    todo = {}
    for instance in instances:
        cached = read_row(folder / f"{instance.instance_id}.json.gz")
        if cached is not None and not cached.get("error") and usable(cached):
            rows[instance.instance_id] = read(cached)
        else:
            todo[instance.instance_id] = instance
    items = [Item(key, (compute, instance), Needs(cpus=1, docker=1)) for key, instance in todo.items()]
    for outcome in (executor or LocalExecutor()).run(_timed_row, items):
        instance = todo[outcome.key]
        row = outcome.value if outcome.error is None else {"error": one_line(outcome.error)}
        row.update(instance_id=instance.instance_id, repo=instance.repo, setting=setting,
                   created_at=instance.created_at)
        write_row(folder / f"{instance.instance_id}.json.gz", row)  # an error row is computed again next time
        rows[outcome.key] = row
        log(f"{instance.instance_id} [{setting}]: " + (headline or _headline)(row))
    return rows


def one_line(exc: BaseException, limit: int = 2000) -> str:
    """An exception as the one line a row keeps of why it could not run."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:limit]


def _timed_row(compute: Callable, instance) -> dict:
    """`compute(instance)` with the seconds it took (run where the executor puts it)."""
    started = time.monotonic()
    row = compute(instance)
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def read_row(path: Path) -> dict | None:
    """A cached row (gzip JSON; a plain `.json` beside it from an older run is read too), or None."""
    for candidate in (path, path.with_suffix("")):
        if candidate.exists():
            try:
                raw = gzip.decompress(candidate.read_bytes()) if candidate.suffix == ".gz" else candidate.read_bytes()
                return json.loads(raw)
            except (OSError, EOFError, json.JSONDecodeError):  # a torn write: computed again
                return None
    return None


def write_row(path: Path, row: dict) -> None:
    """Written whole or not at all (a killed run leaves no torn row); gzip keeps a committed cache small."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(row, separators=(",", ":")).encode(), mtime=0))
    tmp.replace(path)


def _headline(row: dict) -> str:
    if row.get("error"):
        return f"error: {row['error'][:160]}"
    fused = row["signals"]["fused"]
    return (f"fused file@1 {fused['file@1']!s:5} function@5 {fused['function@5']!s:5} "
            f"line@10 {fused['line@10']!s:5} ({row['seconds']}s)")


# -- the two settings --------------------------------------------------------------------------------------------
def issue_signals(runtime, problem: str) -> dict[str, list[Suspect]]:
    """The issue-text signals and the BM25 baseline, on any runtime holding the base commit."""
    from pinpoint.localization.bm25 import Bm25Localizer
    from pinpoint.localization.retrieval import LexicalLocalizer, RetrievalLocalizer
    from pinpoint.localization.suspects import LocalizationRequest

    request = LocalizationRequest(problem_statement=problem)
    return {"retrieval": RetrievalLocalizer(runtime).localize(request),
            "lexical": LexicalLocalizer(runtime).localize(request),
            "bm25": Bm25Localizer(runtime).localize(request)}


def issue_row(instance) -> dict:
    """The `issue` setting on a local checkout of the base commit (no container needed)."""
    from pinpoint.environments.local import LocalRuntime
    from pinpoint.environments.repo_image import extract_shared_repo

    with LocalRuntime(extract_shared_repo(instance.owner_name), instance.base_commit) as runtime:
        sources = Sources(runtime)
        gold = gold_of(instance.patch, sources)
        signals = issue_signals(runtime, instance.problem_statement)
        return {**_gold_json(gold), "signals": evaluate_row(signals, "issue", gold, sources),
                **structured(signals, [], sources)}


def execution_signals(runtime, tests, budget_s: float, mbfl: bool = False, *, predicates: bool = False,
                      insertion: bool = False, problem_statement: str = "") -> tuple[dict, dict, list[LineRecord]]:
    """`traceback` and the execution localizers (`spectrum`, `ldb`, `test_names`, `mentions` of
    `problem_statement`) from the oracle's failing tests in `runtime`, what the runs cost, and the spectrum's line
    records; `mbfl`, `predicates`, `insertion`: also those targeted signals (`targeted_signals`)."""
    from pinpoint.localization.execution import own_run
    from pinpoint.localization.failing_tests import ExecutionSignals, FailingTests
    from pinpoint.localization.retrieval import RetrievalLocalizer
    from pinpoint.localization.suspects import LocalizationRequest

    own = own_run(runtime, tests.failing, budget_s=budget_s)  # the baseline: the failing tests alone, untraced
    started = time.monotonic()
    execution = ExecutionSignals(runtime, FailingTests("oracle", tests.failing, tests.passing), budget_s, own=own)
    execution.collect()
    request = LocalizationRequest(problem_statement=problem_statement, test_output=execution.failure_output())
    ranked = {loc.name: loc.localize(request) for loc in execution.localizers()}
    execution_seconds = round(time.monotonic() - started, 1)
    started = time.monotonic()  # the failure output's retrieval (a `git grep`) runs nothing: timed apart
    signals = {"traceback": RetrievalLocalizer(runtime, "tests").localize(request), **ranked}
    evidence = execution.spectrum
    cost = {"execution_seconds": execution_seconds, "traceback_seconds": round(time.monotonic() - started, 1),
            "failing_test_seconds": round(sum(t.duration_s for t in evidence.failing), 2),
            "failing_run_seconds": own.seconds, "own_outside_s": own.outside_s, "fit_s": round(own.fit_s(), 1),
            "traced_wall_s": evidence.wall_s,
            "traced": evidence.summary(), "failing_failed": len(evidence.failing), "failing_given": len(tests.failing)}
    if (mbfl or predicates or insertion) and evidence.failing:
        signals.update(targeted_signals(runtime, evidence, signals["spectrum"], execution.tests, cost,
                                        mbfl=mbfl, predicates=predicates, insertion=insertion))
    return signals, cost, line_records(evidence)


def targeted_signals(runtime, evidence, spectrum: list[Suspect], tests, cost: dict, *, mbfl: bool = True,
                     predicates: bool = True, insertion: bool = True) -> dict[str, list[Suspect]]:
    """The targeted execution signals asked for and the spectrum's ties split by them, in `MBFL_SIGNALS`' names;
    each one's cost (seconds, what ran) goes into `cost`."""
    from pinpoint.localization import insertion as ins
    from pinpoint.localization import predicates as ps
    from pinpoint.localization.mbfl import MbflLocalizer, collect_mbfl, tie_break
    from pinpoint.localization.suspects import LocalizationRequest

    out: dict[str, list[Suspect]] = {}
    split = spectrum
    if mbfl:
        mutation = collect_mbfl(runtime, evidence, Sources(runtime), python=tests.python, pytest_args=tests.pytest_args)
        localizer = MbflLocalizer(mutation, evidence)
        cost.update(mbfl_seconds=mutation.seconds, mbfl=mutation.summary(), mbfl_ran=mutation.ran)
        split = tie_break(spectrum, localizer.scores())
        out.update(mbfl=localizer.localize(LocalizationRequest()), spectrum_mbfl=split)
    switched = split
    if predicates:
        switches = ps.collect_switches(runtime, evidence, Sources(runtime), python=tests.python,
                                       pytest_args=tests.pytest_args)
        localizer = ps.PredicateLocalizer(switches, evidence)
        cost.update(predicates_seconds=switches.seconds, predicates=switches.summary(),
                    predicates_ran=switches.runs.ran)
        switched = ps.tie_break(split, localizer.scores())
        out.update(predicates=localizer.localize(LocalizationRequest()), spectrum_ps=switched)
    if insertion:
        started = time.monotonic()
        points = ins.insertion_points(evidence, Sources(runtime))
        cost.update(insertion_seconds=round(time.monotonic() - started, 1), insertion_ran=len(points))
        out.update(insertion=ins.insertion_suspects(points), spectrum_ins=ins.tie_break(split, points),
                   spectrum_split=ins.tie_break(switched, points))
    return out


def insertion_gold(patch: str) -> dict[str, list[int]]:
    """The gold lines that pure insertions give (the line the new code goes before; `gold_of` counts them with
    the changed lines), per code file."""
    from unidiff import PatchSet

    removed = {(p.path, line.source_line_no) for p in PatchSet(patch) for h in p for line in h if line.is_removed}
    return {p: sorted(n for n in ls if (p, n) not in removed) for p, ls in patch_gold_lines(patch).items()
            if not is_test_path(p) and any((p, n) not in removed for n in ls)}


def oracle_row(instance, budget_s: float = 300.0, mbfl: bool = False) -> dict:
    """The `oracle` setting in the instance's container with its test patch applied."""
    from pinpoint.swebench_eval.oracle import apply_test_patch, oracle_tests
    from pinpoint.swebench_eval.runtime import runtime_for

    runtime, _ = runtime_for(instance)
    with runtime:
        apply_test_patch(runtime, instance)
        tests = oracle_tests(runtime, instance)
        sources = Sources(runtime)
        gold = gold_of(instance.patch, sources)
        signals = issue_signals(runtime, instance.problem_statement)
        execution, cost, records = execution_signals(runtime, tests, budget_s, mbfl, predicates=mbfl,
                                                     insertion=mbfl, problem_statement=instance.problem_statement)
        signals.update(execution)
        return {**_gold_json(gold), "insertion_gold": insertion_gold(instance.patch), "cost": cost, "signals": evaluate_row(signals, "oracle", gold, sources),
                **structured(signals, records, sources)}


def guarded(compute: Callable[[object], dict]) -> Callable[[object], dict]:
    """A row that cannot be computed (no image, a test patch that does not apply) is a row with an error."""
    def run(instance) -> dict:
        try:
            return compute(instance)
        except Exception as exc:  # one broken row must not stop the benchmark; it is counted apart
            return {"error": one_line(exc)}
    return run


# -- the table ---------------------------------------------------------------------------------------------------
METRICS = (*(f"file@{k}" for k in FILE_KS), *(f"function@{k}" for k in FUNCTION_KS),
           *(f"line@{k}" for k in LINE_KS), "all_files@5")


#: the same metrics in expectation over ties, and the top tie group's size per level
EXPECTED = tuple(f"{m}~" for m in METRICS)
TIES = ("ties_file", "ties_function", "ties_line")
#: the columns of the fusion choice's table: the issue's four targets (plain and in expectation) and file@5~
CHOICE_METRICS = ("file@1", "file@1~", "file@5~", "function@5", "function@5~", "line@1", "line@1~", "line@10",
                  "line@10~")


def totals(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Mean hit rate per signal and metric over the rows that ran (errors left out); `<metric>~` the same in
    expectation over ties, `ties_<level>` the mean top tie group and `ties_<level>_median` its median."""
    good = [r for r in rows if not r.get("error")]
    names = list(dict.fromkeys(n for r in good for n in r["signals"]))
    out = {}
    for n in names:
        hits = [r["signals"].get(n, {}) for r in good]
        values = {m: sum(bool(h.get(m)) for h in hits) / max(1, len(good)) for m in METRICS}
        values.update({m: sum(float(h.get(m, 0.0)) for h in hits) / max(1, len(good)) for m in EXPECTED})
        for m in TIES:
            sizes = sorted(int(h.get(m, 0)) for h in hits)
            values[m] = sum(sizes) / max(1, len(sizes))
            values[f"{m}_median"] = float(sizes[len(sizes) // 2]) if sizes else 0.0
        out[n] = values
    return out


def format_table(setting: str, rows: list[dict]) -> str:
    """The setting's table: every metric as counted today, then in expectation over ties beside the top tie
    group's size (mean and median over rows) per level."""
    good = [r for r in rows if not r.get("error")]
    table = totals(rows)
    seconds = sum(r["seconds"] for r in good) / max(1, len(good))
    head = (f"setting {setting}: {len(good)} rows ({len(rows) - len(good)} errors), {seconds:.1f} s per row; "
            "baselines: lexical = grep, bm25 = BM25 over file contents")
    w = max([11, *(len(n) + 1 for n in table)])
    lines = [head, f"{'signal':<{w}}" + "".join(f"{m:>13}" for m in METRICS)]
    for name, values in table.items():
        lines.append(f"{name:<{w}}" + "".join(f"{values[m]:>13.2f}" for m in METRICS))
    lines.append("in expectation over ties (a tie group straddling k counts as the chance a random order puts gold "
                 "within k); top tie group: mean / median size over rows")
    lines.append(f"{'signal':<{w}}" + "".join(f"{m:>13}" for m in EXPECTED) + "".join(f"{m:>15}" for m in TIES))
    for name, values in table.items():
        lines.append(f"{name:<{w}}" + "".join(f"{values[m]:>13.2f}" for m in EXPECTED)
                     + "".join(f"{values[m]:>8.1f} /{values[m + '_median']:>5.0f}" for m in TIES))
    lines += peer_misses(good)
    costs = [r["cost"] for r in good if "execution_seconds" in r.get("cost", {})]
    if costs:
        lines.append(execution_cost(costs))
    for name in ("execution", "mbfl", "predicates", "insertion"):
        spent = [r["cost"] for r in good if f"{name}_seconds" in r.get("cost", {})]
        if spent:
            lines.append(signal_cost(name, spent))
    if any("insertion_gold" in r for r in good):
        lines.append(insertion_reach(good))
    if any(n in r["signals"] for r in good for n in VARIANTS):
        lines.append(format_choice(good, CHOICE_METRICS))
        lines.append(format_misses(good, AGENT_DEFAULT))
    return "\n".join(lines)


#: what each signal's cost line counts beside its seconds
COST_UNITS = {"execution": "traced tests", "mbfl": "mutants run", "predicates": "switches run", "insertion": "points"}


def signal_cost(name: str, costs: Sequence[dict]) -> str:
    """A signal's cost (`execution`: the spectrum + LDB traced runs) beside the failing tests' own run, against
    the issue's budget: within 3x that + 60 s on at least 90% of rows (the own run as `execution_cost` reads it)."""
    within = sum(c[f"{name}_seconds"] <= 3 * own_run(c) + 60 for c in costs)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    ran = f", {med([c[f'{name}_ran'] for c in costs])} {COST_UNITS[name]}" if all(f"{name}_ran" in c for c in costs) \
        else ""
    verdict = "met" if within >= 0.9 * len(costs) else "not met"
    return (f"{name} cost: median {med([c[f'{name}_seconds'] for c in costs]):.1f} s (max "
            f"{max(c[f'{name}_seconds'] for c in costs):.1f}){ran}, against "
            f"{med([own_run(c) for c in costs]):.2f} s of the failing tests' own run; within 3x + 60 s on "
            f"{within}/{len(costs)} rows (>= 90%: {verdict})")


def insertion_reach(rows: Sequence[dict], k: int = 10) -> str:
    """How many rows' gold lines include pure insertions, and on how many of those each ranking's top k lines
    reach an insertion's gold line."""
    with_ins = [r for r in rows if r.get("insertion_gold")]
    gold = sum(len(ls) for r in rows for ls in r["gold_lines"].values())
    ins = sum(len(ls) for r in with_ins for ls in r["insertion_gold"].values())

    def reached(name: str) -> int:
        return sum(any(n in r["insertion_gold"].get(p, ()) for p, n in r["signals"].get(name, {}).get(
            "top_lines", [])[:k]) for r in with_ins)
    names = [n for n in ("insertion", "spectrum", "fused_split", "fused_ins", "fused_insertion", AGENT_DEFAULT)
             if any(n in r["signals"] for r in with_ins)]
    return (f"insertions: {ins} of {gold} gold lines on {len(with_ins)}/{len(rows)} rows are pure insertions; "
            f"rows with an insertion's gold line in the top {k}: " + ", ".join(f"{n} {reached(n)}" for n in names))


def own_run(cost: dict) -> float:
    """The failing tests' own untraced run in the box, interpreter start and collection included; rows cached before
    it was measured fall back to the failing tests' call phase."""
    return cost.get("failing_run_seconds", cost["failing_test_seconds"])


def execution_cost(costs: Sequence[dict]) -> str:
    """Tracing's cost beside the failing tests' own run (the budget: 3x that, plus 30 s): their untraced run in the
    box, interpreter start and collection included (`failing_run_seconds`; rows cached before it was measured fall
    back to the failing tests' call phase, `failing_test_seconds`). `execution_seconds`: the spectrum + LDB run with
    its localizers' ranking; rows from this change on time the `traceback` signal's retrieval apart."""
    within = sum(c["execution_seconds"] <= 3 * own_run(c) + 30 for c in costs)
    traced = sorted(c["execution_seconds"] for c in costs)
    owns = sorted(own_run(c) for c in costs)
    ratios = sorted(c["execution_seconds"] / max(own_run(c), 0.01) for c in costs)
    return (f"execution cost: median {traced[len(traced) // 2]:.1f} s traced (spectrum + LDB) against "
            f"{owns[len(owns) // 2]:.2f} s of the failing tests' own run (median ratio {ratios[len(ratios) // 2]:.1f}x); "
            f"within 3x + 30 s on {within}/{len(costs)} rows")


def per_repo(rows: list[dict], signal: str = "fused") -> str:
    """The fused ranking's headline metrics per repository."""
    repos = sorted({r["repo"] for r in rows if not r.get("error")})
    lines = [f"{'repo':<22}{'n':>4}" + "".join(f"{m:>13}" for m in ("file@1", "file@5", "function@5", "line@10"))]
    for repo in repos:
        mine = [r for r in rows if r["repo"] == repo and not r.get("error")]
        values = totals(mine).get(signal, {})
        lines.append(f"{repo:<22}{len(mine):>4}" + "".join(f"{values.get(m, 0):>13.2f}"
                                                           for m in ("file@1", "file@5", "function@5", "line@10")))
    return "\n".join(lines)


# -- peers: another tool's ranking as a column beside the signals -------------------------------------------------
@dataclass(frozen=True)
class Peer:
    """Another tool run on the oracle rows as a baseline column (`--peer`): `compute(instance)` runs it in the
    instance's box and returns its row (`suspects`: `[path, line, score]` in the tool's order; `spans`: the function
    spans of their files), cached one file per row in `cache`, apart from the bench's rows."""

    name: str
    cache: Path
    compute: Callable[[object], dict]


def peer_suspects(peer_row: dict, name: str) -> list[Suspect]:
    """A peer row's ranked lines as suspects, in the tool's order."""
    return [Suspect(p, n, n, score, name) for p, n, score in peer_row["suspects"]]


def peer_hits(row: dict, peer_row: dict, name: str) -> dict:
    """A peer's ranking scored on a bench row as every signal is (the row's gold; in the peer's order and in
    expectation over its ties); where the peer could not run, a miss that keeps why (`error`), as a signal that
    found nothing is a miss."""
    sources = row_sources({"spans": {**peer_row.get("spans", {}), **row.get("spans", {})}})
    error = peer_row.get("error")
    hits = ranking_hits([] if error else peer_suspects(peer_row, name), row_gold(row), sources)
    return {**hits, "seconds": peer_row.get("seconds"), **({"error": error} if error else {})}


def with_peers(rows: list[dict], instances: Sequence, peers: Sequence[Peer], log=print,
               executor: LocalExecutor | RayExecutor | None = None) -> list[dict]:
    """The oracle rows, each that ran with every peer's column: peer rows read from their caches, the others
    computed on `executor` (as the bench's own rows are) and written there."""
    ran = [instance for instance, row in zip(instances, rows, strict=True) if not row.get("error")]
    for peer in peers:
        found = peer_rows(peer, ran, log=log, executor=executor)
        for row in rows:
            if (peer_row := found.get(row.get("instance_id", ""))) is not None:
                row["signals"][peer.name] = peer_hits(row, peer_row, peer.name)
    return rows


def peer_rows(peer: Peer, instances: Sequence, log=print, executor: LocalExecutor | RayExecutor | None = None
              ) -> dict[str, dict]:
    """The peer's row of each instance, by id: from its cache, else computed and written there (one that could not
    run says why in one line and is tried again next time)."""
    def headline(row: dict) -> str:
        return (f"{peer.name} could not run: {row['error'][:300]}" if row.get("error")
                else f"{peer.name} ranked {len(row['suspects'])} lines ({row['seconds']}s)")
    return stored_rows(peer.cache, instances, "oracle", peer.compute, log=log, executor=executor, headline=headline)


def peer_misses(rows: Sequence[dict]) -> list[str]:
    """One line per signal that could not run on some rows (a peer), counted there as a miss: which rows, why."""
    lines = []
    for name in dict.fromkeys(n for r in rows for n, hits in r["signals"].items() if hits.get("error")):
        failed = [r for r in rows if r["signals"].get(name, {}).get("error")]
        lines.append(f"{name} could not run on {len(failed)}/{len(rows)} rows (counted as misses): "
                     + "; ".join(f"{r['instance_id']}: {r['signals'][name]['error'][:200]}" for r in failed))
    return lines


# -- the learned fusion, on rows it never trained on ---------------------------------------------------------------
#: the date split: train on rows created before, test on those after (about two thirds of the dev rows before)
DATE_CUT = "2021-07-01"


def rescored(row: dict) -> dict:
    """A cached row's hits computed again from its kept suspects, spans and gold, so the table always reflects the
    current fusion and line walk (the signals themselves are not run again)."""
    signals, _ = row_inputs(row)
    fresh = evaluate_row(signals, row["setting"], row_gold(row), row_sources(row))
    for name, hits in fresh.items():
        row["signals"].setdefault(name, {}).update({k: v for k, v in hits.items() if k != "suspects"})
    return row


def with_test_names(row: dict, instance) -> dict:
    """An oracle row cached before `test_names` existed, given it from what the row kept: the failing tests' files
    (a FAIL_TO_PASS id's own path, else every test file of the test patch, as `oracle_tests` looks for it) and the
    files of the spectrum's line records that a failing test ran (`test_names_from_cache` marks it)."""
    from pinpoint.localization.test_names import TestNamesLocalizer
    from pinpoint.swebench_eval.specs import test_directives

    if row.get("setting") != "oracle" or "test_names" in row["signals"] or not row.get("lines"):
        return row
    patched = [f for f in test_directives(instance) if f.endswith(".py")]
    files = {p for t in instance.FAIL_TO_PASS for p in ([t.split("::")[0]] if t.split("::")[0].endswith(".py")
                                                        else patched)}
    ran = {r["path"] for r in row.get("lines", []) if r.get("ef")}
    ends = {p: max([s[3] for s in spans] + [r["line"] for r in row.get("lines", []) if r["path"] == p])
            for p, spans in row.get("spans", {}).items() if spans}
    found = TestNamesLocalizer([(f, ran) for f in sorted(files)], lambda p: ends.get(p, 1)).localize(LocalizationRequest())
    row["signals"]["test_names"] = {"suspects": [s.to_dict() for s in found]}
    row["test_names_from_cache"] = True
    return row


def with_mentions(row: dict, instance, sources: RepoSources | None = None) -> dict:
    """An oracle row cached before `mentions` existed, given it from its kept line records (the spectrum's best
    lines, what the signal reads in a box) and the issue text, the files read at the row's base commit from the
    offline repository (`mentions_from_cache` marks it); a row whose repository is not offline is left as it is."""
    from pinpoint.localization.mentions import MentionsLocalizer
    from pinpoint.swebench_eval.sources import SourceError

    if row.get("setting") != "oracle" or "mentions" in row["signals"] or not row.get("lines"):
        return row
    try:
        git_dir = (sources or RepoSources()).git_dir(instance.repo)
    except SourceError:
        return row
    lines = [(r["path"], r["line"]) for r in row["lines"]]
    texts = files_at(git_dir, instance.base_commit, list(dict.fromkeys(p for p, _ in lines)))
    found = MentionsLocalizer(lines, texts.get).localize(LocalizationRequest(instance.problem_statement))
    row["signals"]["mentions"] = {"suspects": [s.to_dict() for s in found]}
    row["mentions_from_cache"] = True
    return row


def files_at(git_dir: Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """The text of each of `paths` at `commit` that exists there, read by one `git cat-file --batch`."""
    out = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch"], capture_output=True,
                         input="".join(f"{commit}:{p}\n" for p in paths).encode()).stdout
    texts, at = {}, 0
    for path in paths:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            texts[path] = out[at:at + size].decode("utf-8", "replace")
            at += size + 1
    return texts


def backfilled(row: dict, instance) -> dict:
    """A cached row with every signal added since it was computed that its kept records can give."""
    return with_mentions(with_test_names(row, instance), instance)


def row_gold(row: dict) -> Gold:
    return Gold({p: set(ls) for p, ls in row["gold_lines"].items()},
                frozenset(tuple(f) for f in row["gold_functions"]))


def row_inputs(row: dict) -> tuple[dict[str, list[Suspect]], list[LineRecord]]:
    """A cached row's fused signals' own suspects and its spectrum line records, typed again."""
    signals = {n: [Suspect(**s) for s in row["signals"][n].get("suspects", [])]
               for n in (*FUSED[row["setting"]], *MBFL_SIGNALS) if n in row["signals"]}
    return {n: v for n, v in signals.items() if v}, [LineRecord.from_dict(r) for r in row.get("lines", [])]


def row_examples(row: dict) -> tuple[np.ndarray, np.ndarray]:
    """The row's candidate lines as features, labelled 1 where the reference patch changes them."""
    signals, records = row_inputs(row)
    lines = candidates(signals, records)
    gold = row_gold(row)
    labels = np.array([float(n in gold.lines.get(p, ())) for p, n in lines])
    return features(signals, records, lines), labels


def learned_hits(model: FusionModel, row: dict, lead: int | None = None) -> dict:
    """The learned fusion's hits on one row, read as files, functions and lines like every other signal (and over
    ties); `lead`: `LearnedFusion.lead`, the model ordering lines only inside reciprocal rank's top file."""
    signals, records = row_inputs(row)
    return ranking_hits(LearnedFusion(model, lead=lead).fuse(signals, records), row_gold(row), row_sources(row))


def learnable(rows: Sequence[dict]) -> list[dict]:
    """Rows of the current layout that ran (errors and older rows have no line records to learn from)."""
    return [r for r in rows if not r.get("error") and "spans" in r]


def held_out(rows: Sequence[dict], folds: Sequence[tuple[list[dict], list[dict]]]) -> list[dict]:
    """Each fold's test rows with a `learned` signal from a model trained on that fold's train rows only."""
    cache = {id(r): row_examples(r) for r in rows}
    out = []
    for train_rows, test_rows in folds:
        if not test_rows or not train_rows:  # one repository alone has no other to train on: no `learned` for it
            continue
        model = train([cache[id(r)] for r in train_rows], trained_on=f"{len(train_rows)} rows")
        for row in test_rows:
            out.append({**row, "signals": {**row["signals"], "learned": learned_hits(model, row)}})
    return out


def repository_folds(rows: Sequence[dict]) -> list[tuple[list[dict], list[dict]]]:
    """Leave one repository out: each repository's rows tested on a model trained on every other repository's."""
    repos = sorted({r["repo"] for r in rows})
    return [([r for r in rows if r["repo"] != repo], [r for r in rows if r["repo"] == repo]) for repo in repos]


def date_folds(rows: Sequence[dict], cut: str = DATE_CUT) -> list[tuple[list[dict], list[dict]]]:
    """One fold: train on rows created before `cut`, test on the rows created on or after it."""
    return [([r for r in rows if r["created_at"] < cut], [r for r in rows if r["created_at"] >= cut])]


def with_learned(rows: list[dict]) -> list[dict]:
    """Every row, those that can be learned from with their leave-one-repository-out `learned` hits."""
    done = {r["instance_id"]: r for r in held_out(learnable(rows), repository_folds(learnable(rows)))}
    return [done.get(r.get("instance_id"), r) for r in rows]


def setting_rows(instances: Sequence, settings: Sequence[str], cache: Path = ROWS_DIR, budget_s: float = 300.0,
                 log=print, mbfl: bool = False, executor: LocalExecutor | RayExecutor | None = None,
                 peers: Sequence[Peer] = ()) -> Iterator[tuple[str, list[dict]]]:
    """Each setting's rows in turn (cached ones read back, the others computed and cached), with their `learned`
    hits: what `pinpoint-lab bench localize` prints. `mbfl`: oracle rows also run the targeted signals (MBFL, predicate
    switching, insertion points; cached in their own folder, rows cached before a signal existed extended);
    `peers`: oracle rows also get each peer's column (`with_peers`)."""
    compute = {"issue": issue_row, "oracle": lambda i: oracle_row(i, budget_s, mbfl)}
    for setting in settings:
        variant = "-mbfl" if mbfl and setting == "oracle" else ""
        rows = cached_rows(instances, setting, cache, guarded(compute[setting]), log=log, variant=variant,
                           needs=("predicates", "insertion") if variant else (), executor=executor)
        if setting == "oracle" and peers:
            rows = with_peers(rows, instances, peers, log=log, executor=executor)
        yield setting, with_learned(rows)


def fusion_report(setting: str, rows: list[dict]) -> str:
    """Both held-out splits as tables: every single signal, reciprocal-rank fusion (`fused`) and `learned`."""
    rows = learnable(rows)
    if len({r["repo"] for r in rows}) < 2:
        return f"setting {setting}: {len(rows)} rows of the current layout, too few repositories to hold one out"
    parts = []
    for name, folds in (("leave one repository out", repository_folds(rows)), (f"date split at {DATE_CUT}",
                                                                               date_folds(rows))):
        tested = held_out(rows, folds)
        trained = sorted({len(train_rows) for train_rows, test_rows in folds if test_rows})
        repos = ", ".join(f"{repo} {n}" for repo, n in sorted(Counter(r["repo"] for r in tested).items()))
        parts.append(f"{name} (train rows per fold: {trained}; tested: {repos})\n" + format_table(setting, tested))
    return "\n\n".join(parts)


def cached_folder(cache: Path, setting: str) -> list[dict]:
    """Every row of the current layout cached for `setting`, whichever run wrote it."""
    folder = cache / f"{setting}-v{ROW_VERSION}"
    names = sorted({p.name.removesuffix(".gz") for p in folder.glob("*.json*") if not p.name.endswith(".tmp")})
    rows = [r for r in (read_row(folder / f"{name}.gz") for name in names) if r is not None]
    known = dataset_rows({r["instance_id"] for r in rows})
    return [r if r.get("error") else rescored(backfilled(r, known[r["instance_id"]]) if r["instance_id"] in known
                                              else r) for r in rows]


def dataset_rows(ids: set[str]) -> dict:
    """The dataset's instances among `ids` (a mutant of the fusion-data corpus is none of them), by id."""
    from pinpoint.swebench_eval.datasets import load_instances

    return {i.instance_id: i for i in load_instances() if i.instance_id in ids}


def train_shipped(rows: Sequence[dict], setting: str, path: Path) -> FusionModel:
    """The model trained on every learnable row of a setting, written to `path`."""
    rows = learnable(rows)
    repos = ", ".join(f"{repo} {n}" for repo, n in sorted(Counter(r["repo"] for r in rows).items()))
    model = train([row_examples(r) for r in rows], trained_on=f"{setting}: {len(rows)} dev rows ({repos})")
    model.save(path)
    return model
