"""`pinpoint-lab train fusion-data`: a training corpus for the learned fusion made of synthetic bugs in real
repositories, not of the dev rows it is judged on.

For each repository, in the box of its newest SWE-bench dev row (the instance image, base commit, no test patch):
1. a baseline: the repository's own test files traced once (per-test line coverage; only tests that pass count);
2. mutants (`localization/mutations.py`'s operators, through MBFL's planner) at covered lines inside functions of
   code files that no dev row's patch or test patch touches, spread over files and functions;
3. a screen: the trace runner's mutation mode (tests loaded once, one fork per mutant with one function's code swapped)
   runs each mutant against the passing tests that cover its line; a mutant is kept only if one of them fails;
4. for each kept mutant, the mutated file is written into the box and every signal the bench runs in the oracle
   setting is run with the screen's failing tests as the failing tests (spectrum, LDB, traceback, and retrieval,
   grep and BM25 reading the failing tests' own text in place of an issue; `--mbfl` adds MBFL, predicate switching
   and insertion points, as `bench localize --mbfl` does), then the file is put back. The row is stored in `bench localize`'s row layout, so one feature extractor reads both.

Every screened mutant leaves one file (`<out>/<owner__name>/<mutant id>.json.gz`, kept or not), so a run resumes
where it stopped and the kept share is counted over everything screened.
"""

from __future__ import annotations

import random
import shlex
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pinpoint.environments.errors import PinpointError
from pinpoint.localization.blocks import innermost_function
from pinpoint.localization.execution import ExecutionEvidence, LineScore, Sources, TracedTest, run_traced
from pinpoint.localization.mbfl import MbflConfig, MutantResult, PlannedMutant, plan_mutants, run_mutants
from pinpoint.localization.retrieval import is_test_path
from pinpoint.swebench_eval.metrics import patch_gold_lines

from pinpoint_lab.localization.localize_bench import (
    Gold,
    evaluate_row,
    execution_signals,
    issue_signals,
    read_row,
    structured,
    write_row,
)
from pinpoint_lab.paths import results_dir

#: where the corpus goes by default: beside the bench's rows, committed, so a later session retrains without rerunning
CORPUS_DIR = results_dir() / "fusion-data"
#: the corpus layout's version (a folder of its own)
CORPUS_VERSION = 1


@dataclass(frozen=True)
class CorpusConfig:
    """How much to make per repository and what each step may spend."""

    per_repo: int = 100
    #: wall seconds per repository for screening and running kept mutants (the baseline comes on top)
    budget_s: float = 1800.0
    baseline_budget_s: float = 300.0
    #: covering passing tests each screened mutant runs (all of them, no early stop)
    screen_tests: int = 12
    #: mutants screened per runner process
    batch: int = 16
    #: at most this many mutants per function (spread over the code, not one hot function)
    per_function: int = 6
    #: each traced run's budget for a kept mutant (as `bench localize --budget`)
    trace_budget_s: float = 120.0
    #: also the targeted signals (MBFL, predicate switching, insertion points); the dev rows most rows are judged on
    #: have none of them, so the ranker cannot read them yet
    mbfl: bool = False
    seed: int = 0


@dataclass
class RepoCorpus:
    """What one repository's run produced: every screened mutant's row (kept or not)."""

    repo: str
    rows: list[dict]
    baseline_tests: int = 0
    planned: int = 0

    @property
    def kept(self) -> list[dict]:
        return [r for r in self.rows if r.get("kept")]

    def summary(self) -> str:
        share = len(self.kept) / max(1, len(self.rows))
        why = Counter(r.get("why", "") for r in self.rows if not r.get("kept"))
        reasons = ", ".join(f"{n} {k}" for k, n in why.most_common(4))
        return (f"{self.repo}: {len(self.kept)} kept of {len(self.rows)} screened ({share:.0%}; planned "
                f"{self.planned}, {self.baseline_tests} passing baseline tests); not kept: {reasons or 'none'}")


# -- the repository and its box -----------------------------------------------------------------------------------
def touched_paths(instances: Sequence) -> set[str]:
    """Every file a dev row's fix or test patch touches: never mutated, so the dev rows stay held out."""
    return {path for i in instances for patch in (i.patch, i.test_patch) for path in patch_gold_lines(patch)}


def box_instance(instances: Sequence):
    """The repository's newest dev row: its image and base commit are the box the mutants run in."""
    return max(instances, key=lambda i: (i.created_at, i.instance_id))


def test_files(runtime) -> list[str]:
    """The repository's test modules (`test_*.py`, `*_test.py`) in the top-level folder that holds most of them:
    the suite itself (`tests/`, `testing/`), not examples whose own conftest needs an install of their own."""
    listing = runtime.run("git ls-files '*.py'", timeout=120).output.splitlines()
    names = [p for p in listing if is_test_path(p) and (p.rsplit("/", 1)[-1].startswith("test_")
                                                      or p.endswith("_test.py"))]
    folders = Counter(p.split("/", 1)[0] for p in names if "/" in p)
    depth = {f: min(p.count("/") for p in names if p.startswith(f"{f}/")) for f in folders}
    suite = max(folders, key=lambda f: (folders[f], -depth[f])) if folders else None  # a tie: the one nearer the top
    return [p for p in names if suite is None or p.startswith(f"{suite}/")]


def runnable_ids(runtime, files: Sequence[str]) -> list[str]:
    """The ids the trace runner can run in this box: the files themselves where pytest is installed, else each
    file's top-level `def test_*` as `file::name` (without pytest, sympy's box, only plain function ids run)."""
    if not files or runtime.run("python -c 'import pytest'", timeout=60).ok:
        return list(files)
    found = runtime.run("git grep -E -o '^def test_[A-Za-z0-9_]+' -- " + " ".join(shlex.quote(f) for f in files),
                        timeout=120).output.splitlines()
    return [f"{path}::{match.removeprefix('def ')}" for path, _, match in (line.partition(":") for line in found)
            if match.startswith("def test_")]


def baseline(runtime, files: Sequence[str], config: CorpusConfig, cache: Path) -> ExecutionEvidence:
    """The test files (their test functions where the box has no pytest) traced once on the unmutated code, in a
    seeded order (a budget that runs out still spans the suite); cached as the passing tests' coverage, since
    nothing else of it is used."""
    cached = read_row(cache)
    if cached is None:
        order = sorted(runnable_ids(runtime, files))
        random.Random(config.seed).shuffle(order)
        evidence = run_traced(runtime, order, failing=[], budget_s=config.baseline_budget_s, per_test_timeout=20.0)
        cached = {"tests": [{"nodeid": t.nodeid, "duration_s": t.duration_s,
                             "lines": {p: sorted(ls) for p, ls in t.lines.items()}} for t in evidence.passing],
                  "summary": evidence.summary()}
        if not cached["tests"]:  # nothing to screen against: say why, and try again next time
            raise PinpointError(f"no test passed on the unmutated code: {evidence.summary()}; "
                               f"{evidence.log_tail[-300:]}")
        write_row(cache, cached)
    tests = [TracedTest(t["nodeid"], "passed", duration_s=t["duration_s"],
                        lines={p: frozenset(ls) for p, ls in t["lines"].items()}) for t in cached["tests"]]
    return ExecutionEvidence(tests=tests, status="finished", expected_failing=[])


# -- which mutants ------------------------------------------------------------------------------------------------
def mutable_lines(evidence: ExecutionEvidence, sources: Sources, touched: set[str], config: CorpusConfig,
                  limit: int) -> list[tuple[str, int]]:
    """Covered lines inside functions of untouched code files, in a seeded order that takes every function's first
    line before any function's second (so a small limit still spans the code), at most `per_function` per function
    and `limit` in all."""
    covered = sorted({(p, n) for t in evidence.passing for p, ls in t.lines.items() for n in ls
                      if p.endswith(".py") and not is_test_path(p) and p not in touched
                      and p.rsplit("/", 1)[-1] != "conftest.py"})
    random.Random(config.seed).shuffle(covered)
    seen: Counter = Counter()
    ranked = []
    for position, (path, line) in enumerate(covered):
        span = innermost_function(sources.functions(path), line)
        if span is not None and seen[(path, span.qualname)] < config.per_function:
            ranked.append((seen[(path, span.qualname)], position, path, line))
            seen[(path, span.qualname)] += 1
    return [(path, line) for _, _, path, line in sorted(ranked)[:limit]]


def plan(lines: Sequence[tuple[str, int]], sources: Sources, config: CorpusConfig) -> list[PlannedMutant]:
    """One parsable mutant per line, by MBFL's planner (its operators, its parse check, its seeded order)."""
    scores = [LineScore(p, n, 0.0, 0.0, 0.0, 0, 0, 0, 0) for p, n in lines]
    planned = plan_mutants(scores, sources, MbflConfig(top_lines=len(scores), per_line=1, seed=config.seed))
    order = {key: i for i, key in enumerate(lines)}
    return sorted(planned, key=lambda m: order[(m.path, m.line)])


def screen(runtime, evidence: ExecutionEvidence, batch: Sequence[PlannedMutant], config: CorpusConfig,
           ) -> tuple[list[MutantResult], dict]:
    """The batch against the passing tests that cover each mutant's line (every one, no early stop)."""
    mbfl = MbflConfig(max_passing=config.screen_tests, stop_after_kills=config.screen_tests + 1,
                      budget_s=60.0 + 10.0 * len(batch), cache_dir=None)
    mutation = run_mutants(runtime, evidence, batch, mbfl)
    return mutation.results, mutation.baseline


def killing_tests(result: MutantResult, baseline: dict) -> list[str]:
    """The tests that passed on the unmutated code and fail on the mutant."""
    return sorted(t for t, outcome in result.tests.items()
                  if not outcome.passed and t in baseline and baseline[t].passed)


# -- one kept mutant ----------------------------------------------------------------------------------------------
def failing_text(sources: Sources, failing: Sequence[str], limit: int = 4000) -> str:
    """The failing tests' own source, the query the text signals read in place of an issue."""
    parts = []
    for nodeid in failing:
        path, _, rest = nodeid.partition("::")
        name = rest.split("[")[0].replace("::", ".")
        span = next((s for s in sources.functions(path) if s.qualname == name), None)
        text = sources.text(path) or ""
        if span is not None:
            parts.append("\n".join(text.splitlines()[span.first_line - 1: span.end_line]))
    return "\n\n".join(parts)[:limit]


def mutant_row(runtime, mutant: PlannedMutant, failing: Sequence[str], evidence: ExecutionEvidence,
               config: CorpusConfig) -> dict:
    """Every oracle signal on the mutated code, in `bench localize`'s row layout (gold: the mutated line); the
    file is put back whatever happens."""
    from pinpoint.swebench_eval.oracle import OracleTests

    original = Sources(runtime).text(mutant.path) or ""
    mutated = original[: mutant.start] + mutant.replacement + original[mutant.end:]
    runtime.write_file(mutant.path, mutated)
    try:
        sources = Sources(runtime)
        files = sorted({t.split("::", 1)[0] for t in failing})
        passing = [t.nodeid for t in evidence.passing if t.nodeid.split("::", 1)[0] in files and t.nodeid not in failing]
        signals = issue_signals(runtime, failing_text(sources, failing))
        execution, cost, records = execution_signals(runtime, OracleTests(list(failing), passing, files),
                                                     config.trace_budget_s, config.mbfl, predicates=config.mbfl,
                                                     insertion=config.mbfl)
        if not cost["failing_failed"]:
            return {"kept": False, "why": "passed when traced", "cost": cost}
        signals.update(execution)
        span = innermost_function(sources.functions(mutant.path), mutant.line)
        gold = Gold({mutant.path: {mutant.line}}, frozenset({(mutant.path, span.qualname if span else "<module>")}))
        return {"kept": True, "gold_files": [mutant.path], "gold_functions": sorted(gold.functions),
                "gold_lines": {mutant.path: [mutant.line]}, "cost": cost,
                "signals": evaluate_row(signals, "oracle", gold, sources), **structured(signals, records, sources)}
    finally:
        runtime.write_file(mutant.path, original)


# -- a repository's run -------------------------------------------------------------------------------------------
def build_repo(repo: str, instances: Sequence, config: CorpusConfig, out: Path = CORPUS_DIR,
               log: Callable[[str], None] = print) -> RepoCorpus:
    """Screen and run mutants of `repo` until `per_repo` are kept, its budget is spent or the plan ends; rows
    already on disk are read back, not run again."""
    from pinpoint.swebench_eval.runtime import runtime_for

    folder = out / f"v{CORPUS_VERSION}" / repo.replace("/", "__")
    folder.mkdir(parents=True, exist_ok=True)
    box = box_instance(instances)
    runtime, _ = runtime_for(box)
    with runtime:
        sources = Sources(runtime)
        evidence = baseline(runtime, test_files(runtime), config, folder / "baseline.json.gz")
        planned = plan(mutable_lines(evidence, sources, touched_paths(instances), config, 20 * config.per_repo),
                       sources, config)
        corpus = RepoCorpus(repo, [], len(evidence.passing), len(planned))
        todo = []
        for mutant in planned:
            row = read_row(folder / f"{mutant.id}.json.gz")
            (corpus.rows.append(row) if row is not None else todo.append(mutant))
        log(f"{repo}: box {box.instance_id}, {len(evidence.passing)} passing baseline tests, {len(planned)} mutants "
            f"planned, {len(corpus.rows)} done before ({len(corpus.kept)} kept)")
        started = time.monotonic()
        while todo and len(corpus.kept) < config.per_repo and time.monotonic() - started < config.budget_s:
            batch, todo = todo[: config.batch], todo[config.batch:]
            results, base = screen(runtime, evidence, batch, config)
            for result in results:
                row = _screened_row(runtime, result, base, evidence, config, box)
                write_row(folder / f"{result.mutant.id}.json.gz", row)
                corpus.rows.append(row)
            log(corpus.summary() + f" [{time.monotonic() - started:.0f}s]")
    return corpus


def _screened_row(runtime, result: MutantResult, base: dict, evidence: ExecutionEvidence, config: CorpusConfig,
                  box) -> dict:
    """A screened mutant's row: run whole when a covering test fails on it, else why not."""
    mutant = result.mutant
    failing = killing_tests(result, base)
    where = {"repo": box.repo, "box": box.instance_id, "instance_id": f"mutant-{mutant.id}", "setting": "oracle",
             "created_at": "", "mutant": {"path": mutant.path, "line": mutant.line, "operator": mutant.operator,
                                          "replacement": mutant.replacement, "status": result.status}}
    if result.status in ("not_run", "unswappable") or not failing:
        return {**where, "kept": False, "why": result.status if result.status != "ok" else "no covering test failed"}
    started = time.monotonic()
    try:
        row = mutant_row(runtime, mutant, failing, evidence, config)
    except Exception as exc:  # one mutant that breaks the box's tools must not end the corpus; it is counted apart
        row = {"kept": False, "why": f"error: {type(exc).__name__}: {exc}"[:300]}
    return {**where, **row, "failing": failing, "seconds": round(time.monotonic() - started, 1)}


def corpus_rows(out: Path = CORPUS_DIR) -> list[dict]:
    """Every kept mutant on disk, all repositories."""
    folder = out / f"v{CORPUS_VERSION}"
    rows = [read_row(p) for p in sorted(folder.glob("*/*.json.gz")) if p.name != "baseline.json.gz"]
    return [r for r in rows if r is not None and r.get("kept")]


def corpus_summary(out: Path = CORPUS_DIR) -> str:
    """Per repository: mutants screened, kept, the kept share, the bytes on disk."""
    folder = out / f"v{CORPUS_VERSION}"
    lines = [f"{'corpus ' + str(folder):<60}{'screened':>10}{'kept':>7}{'share':>7}{'MB':>7}"]
    for repo in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.exists() else []:
        files = [p for p in repo.glob("*.json.gz") if p.name != "baseline.json.gz"]
        kept = sum(bool((r := read_row(p)) and r.get("kept")) for p in files)
        size = sum(p.stat().st_size for p in repo.glob("*.json.gz")) / 1e6
        lines.append(f"{repo.name:<60}{len(files):>10}{kept:>7}{kept / max(1, len(files)):>7.0%}{size:>7.1f}")
    return "\n".join(lines)


# -- the ranker trained on mutants, judged on the dev rows ---------------------------------------------------------
#: what the table shows per variant (ties counted in expectation, `~`, beside the metric as ranked)
HEADLINE = ("file@1", "file@1~", "file@5~", "function@5~", "line@1~", "line@10", "line@10~")
#: the two figures the learned ranker must beat reciprocal rank on to become the default
DECIDING = ("file@1~", "line@10~")


#: the learned rankers compared: (training pools, `LearnedFusion.lead`, whether the text signals' features are hidden)
VARIANTS = {"mutants": (("mutants",), None, False), "mutants, lead 3": (("mutants",), 3, False),
            "mutants, no text": (("mutants",), None, True), "mutants, no text, lead 3": (("mutants",), 3, True),
            "dev rows": (("dev rows",), None, False), "dev rows, lead 3": (("dev rows",), 3, False),
            "mutants + dev rows": (("mutants", "dev rows"), None, False)}
#: signals that read the issue on a dev row but the failing tests' source on a mutant (not the same evidence)
TEXT_SIGNALS = ("retrieval", "lexical", "bm25")


def hide_text(examples: Sequence[tuple]) -> list[tuple]:
    """The examples with the text signals' own features zeroed: a weight never moved by training stays 0, so the
    model ignores them wherever it is applied."""
    from pinpoint.localization.learned_fusion import FEATURES

    hidden = [i for i, name in enumerate(FEATURES) if name.split("_")[0] in TEXT_SIGNALS]
    out = []
    for x, y in examples:
        x = x.copy()
        x[:, hidden] = 0.0
        out.append((x, y))
    return out


def validate(corpus: Sequence[dict], dev_rows: Sequence[dict]) -> dict:
    """Leave one repository out on the dev rows: each repository's rows ranked by models trained without that
    repository, on the mutants, on the other repositories' dev rows (today's learned fusion) or both, each as a
    whole ranking or ordering lines only inside reciprocal rank's top file (`lead`), beside reciprocal rank
    (`rrf`, the agent's default)."""
    from pinpoint.localization.learned_fusion import train

    from pinpoint_lab.localization.localize_bench import learnable, learned_hits, row_examples, totals

    dev = learnable(dev_rows)
    if len({r["repo"] for r in corpus}) < 2:
        raise ValueError("the corpus holds mutants of fewer than 2 repositories: none is left to hold one out")
    pools = {"mutants": [(r["repo"], row_examples(r)) for r in corpus],
             "dev rows": [(r["repo"], row_examples(r)) for r in dev]}
    repos = sorted({r["repo"] for r in dev})
    scored: dict[str, list[dict]] = {"rrf": [{"repo": r["repo"], "signals": {"x": r["signals"]["fused"]}}
                                             for r in dev]}
    models = {}
    for name, (names, lead, masked) in VARIANTS.items():
        scored[name] = []
        for repo in repos:
            key = (names, masked, repo)
            if key not in models:
                examples = [ex for pool in names for other, ex in pools[pool] if other != repo]
                models[key] = train(hide_text(examples) if masked else examples,
                                    trained_on=f"{' + '.join(names)} without {repo}")
            scored[name] += [{"repo": repo, "signals": {"x": learned_hits(models[key], r, lead)}}
                             for r in dev if r["repo"] == repo]
    table = {name: {m: round(totals(rows)["x"][m], 4) for m in HEADLINE} for name, rows in scored.items()}
    per_repo = {repo: {name: {m: round(totals([r for r in rows if r["repo"] == repo])["x"][m], 4) for m in DECIDING}
                       for name, rows in scored.items()} for repo in repos}
    beats = {name: all(table[name][m] > table["rrf"][m] for m in DECIDING) for name in VARIANTS}
    return {"dev_rows": len(dev), "dev_repos": dict(Counter(r["repo"] for r in dev)),
            "corpus": dict(Counter(r["repo"] for r in corpus)), "table": table, "per_repo": per_repo, "beats": beats}


def format_validation(report: dict) -> str:
    """The leave-one-repository-out table, per repository the deciding figures, and the verdict."""
    corpus = ", ".join(f"{k} {v}" for k, v in sorted(report["corpus"].items()))
    lines = [f"leave one repository out on {report['dev_rows']} dev rows (oracle); mutant corpus: {corpus}",
             f"{'ranker':<26}" + "".join(f"{m:>13}" for m in HEADLINE)]
    lines += [f"{name:<26}" + "".join(f"{values[m]:>13.3f}" for m in HEADLINE)
              for name, values in report["table"].items()]
    names = list(report["table"])
    width = max(map(len, names)) + 2
    lines.append(f"per repository, {' / '.join(DECIDING)}:")
    lines.append(f"{'repo':<20}{'rows':>5}" + "".join(f"{n:>{width}}" for n in names))
    for repo, values in report["per_repo"].items():
        lines.append(f"{repo:<20}{report['dev_repos'][repo]:>5}"
                     + "".join(f"{' / '.join(f'{values[n][m]:.2f}' for m in DECIDING):>{width}}" for n in names))
    for name, beats in report["beats"].items():
        gaps = ", ".join(f"{m} {report['table'][name][m] - report['table']['rrf'][m]:+.3f}" for m in DECIDING)
        lines.append(f"{name}: {'beats' if beats else 'does not beat'} reciprocal rank on both ({gaps})")
    return "\n".join(lines)
