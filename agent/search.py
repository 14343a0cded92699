"""Search policies that run after a failing test: FLARE top-k refinement and BESTER best-first search.

Both produce candidate patches from region rewrites the model proposes, and evaluate every candidate on a reset
environment (base commit + the candidate's patch) with the same test command, so candidates never see each other's
edits. Selection follows the papers: a passing candidate wins, else the one passing most tests, ties to the
smallest edit.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pinpoint.agent import prompts
from pinpoint.agent.config import SearchSection
from pinpoint.environments.runtime import Runtime, RuntimeBroken, RuntimeFailure
from pinpoint.localization import candidates
from pinpoint.localization.candidates import Candidate
from pinpoint.localization.fusion import top_lines
from pinpoint.localization.retrieval import enclosing_definition
from pinpoint.localization.scorer import GGUF_PACKAGE
from pinpoint.localization.suspects import Suspect
from pinpoint.swebench_eval.metrics import edited_lines
from pinpoint.swebench_eval.patches import PatchError, apply_patch
from pinpoint.tools.base import numbered
from pinpoint.tools.run_tests import TestRun, hang_bound, run_tests

if TYPE_CHECKING:
    from pinpoint.localization.scorer import LocalScorer

#: ask(prompt, purpose, diverse) -> the model's reply text; `diverse` asks for a sampled (non-greedy) answer
Ask = Callable[[str, str, bool], str]

_CODE_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)
MAX_REGION_LINES = 60


@dataclass
class Node:
    """A program state in the search: its patch against the base commit and how its tests went."""

    patch: str
    outcome: TestRun


@dataclass
class SearchResult:
    best: Node
    improved: bool
    candidates: list[dict] = field(default_factory=list)


#: expand(level, node) -> the candidates of one search level, each evaluated (None: one that could not be)
Expand = Callable[[int, Node], Iterator[Node | None]]


def extract_code(reply: str) -> str | None:
    """The first fenced code block of a reply, else the reply itself when it has no prose markers; None if empty."""
    match = _CODE_BLOCK.search(reply)
    code = match.group(1) if match else reply.strip("`\n")
    return code if code.strip() else None


def line_revision(code: str | None, original: str, window: list[str]) -> str | None:
    """The revision of one line from a reply. Small models often echo the surrounding code: when the reply repeats
    other lines of the shown window, keep only the reply line closest to the original line."""
    if code is None:
        return None
    lines = [line for line in code.splitlines() if line.strip()]
    context = {w.strip() for w in window if w.strip() and w.strip() != original.strip()}
    if len(lines) > 1 and any(line.strip() in context for line in lines):
        return max(lines, key=lambda line: difflib.SequenceMatcher(None, line.strip(), original.strip()).ratio())
    return code


def replace_region(text: str, start: int, end: int, replacement: str) -> str:
    """`text` with lines start..end (1-based, inclusive) replaced; the replacement is re-indented to the region."""
    lines = text.splitlines(keepends=True)
    old = lines[start - 1 : end]
    new = replacement.rstrip("\n").split("\n")
    first_old = next((line for line in old if line.strip()), "")
    first_new = next((line for line in new if line.strip()), "")
    shift = (len(first_old) - len(first_old.lstrip())) - (len(first_new) - len(first_new.lstrip()))
    if shift > 0:
        new = [(" " * shift + line) if line.strip() else line for line in new]
    elif shift < 0:
        new = [line[-shift:] if line[: -shift].strip() == "" else line for line in new]
    newline = "\n"
    return "".join(lines[: start - 1]) + "".join(line + newline for line in new) + "".join(lines[end:])


def context_window(text: str, line: int, context: int) -> tuple[int, int]:
    """The enclosing function when it is short, else `context` lines either side."""
    enclosing = enclosing_definition(text, line)
    if enclosing and enclosing[1] - enclosing[0] <= 2 * context:
        return enclosing[0], enclosing[1]
    n = len(text.splitlines())
    return max(1, line - context), min(n, line + context)


class CandidateRunner:
    """Builds and evaluates candidates on one runtime; every evaluation starts from a reset working tree."""

    def __init__(self, runtime: Runtime, test_command: str, timeout: float, origin: str) -> None:
        self.runtime = runtime
        self.test_command = test_command
        self.timeout = timeout
        self.origin = origin
        self.records: list[dict] = []
        self._files: dict[tuple[str, str], str] = {}

    def file_at(self, patch: str, path: str) -> str | None:
        """The text of `path` with `patch` applied (cached per patch)."""
        key = (patch, path)
        if key not in self._files:
            apply_patch(self.runtime, patch)
            try:
                self._files[key] = self.runtime.read_text(path)
            except (FileNotFoundError, IsADirectoryError, OSError):
                return None
        return self._files[key]

    def evaluate(self, parent: Node, path: str, start: int, end: int, replacement: str | None, **info) -> Node | None:
        """Apply the rewrite on top of the parent's patch in a reset tree, run the tests, record the candidate."""
        started = time.monotonic()
        record = {"id": f"{self.origin}-{len(self.records) + 1}", "origin": self.origin,
                  "target": f"{path}:{start}" + (f"-{end}" if end != start else ""), **info,
                  "replacement": replacement, "passed": None, "failed": None, "ok": False, "edited_lines": None}
        self.records.append(record)
        text = self.file_at(parent.patch, path)
        if replacement is None or text is None:
            record["status"] = "no code in reply" if text is not None else "file missing"
            return None
        new_text = replace_region(text, start, end, replacement)
        return self._run(record, parent, path, text, new_text, started)

    def evaluate_candidate(self, parent: Node, candidate: Candidate, focused: str | None) -> Node | None:
        """Run an edit candidate: `focused` (the failing tests) first when given, the whole command only when they
        pass. Only a candidate that passes returns its node (the search keeps nothing else), so a failing one costs
        a reset, a write and one test run: no diff is taken of it."""
        started = time.monotonic()
        record = {"id": f"{self.origin}-{len(self.records) + 1}", "origin": self.origin, "source": candidate.source,
                  "target": f"{candidate.path}:{candidate.first}", "edit": candidate.describe(),
                  "kinds": list(candidate.kinds), "suspect_rank": candidate.rank + 1, "gain": candidate.gain,
                  "replacement": candidate.replacement, "passed": None, "failed": None, "ok": False,
                  "edited_lines": None}
        self.records.append(record)
        text = self.file_at(parent.patch, candidate.path)
        if text is None:
            record["status"] = "file missing"
            return None
        new_text = candidate.apply(text)
        if focused is not None:
            first = self._run(record, parent, candidate.path, text, new_text, started, focused, plausible_only=True)
            if first is None:
                record["status"] = "failing tests still fail" if record["status"] == "evaluated" else record["status"]
                return None
            record["focused"] = focused
            return self._run(record, parent, candidate.path, text, new_text, started, written=True,
                             plausible_only=True)
        return self._run(record, parent, candidate.path, text, new_text, started, plausible_only=True)

    def _run(self, record: dict, parent: Node, path: str, text: str, new_text: str, started: float,
             command: str | None = None, written: bool = False, plausible_only: bool = False) -> Node | None:
        """Write `new_text` over the parent's patch in a reset tree (unless `written`), run the tests, record.
        `plausible_only`: a run that fails returns None and its patch is not taken (a diff per run is as dear as
        the run of a small suite)."""
        if not written:
            if new_text == text:
                record["status"] = "no-op"
                return None
            if path.endswith(".py"):
                try:
                    ast.parse(new_text)
                except (SyntaxError, ValueError) as exc:
                    record["status"] = f"unparsable: {exc.msg if isinstance(exc, SyntaxError) else exc}"
                    return None
            try:
                apply_patch(self.runtime, parent.patch)
            except PatchError as exc:
                record["status"] = str(exc)
                return None
            self.runtime.write_file(path, new_text)
        patch = None if plausible_only else self.runtime.diff()
        try:
            outcome = run_tests(self.runtime, command or self.test_command, self.timeout)
        except RuntimeBroken as exc:  # it killed the box's server or the box: a failure, and the next reset
            record.update(status=f"broke the box: {exc}", broke_box=True,  # starts a fresh box
                          seconds=round(time.monotonic() - started, 3))
            return None
        record.update(status="evaluated", passed=outcome.passed, failed=outcome.failed, ok=outcome.ok,
                      exit_code=outcome.exit_code, timed_out=outcome.timed_out, test_output=outcome.output[-2000:],
                      seconds=round(time.monotonic() - started, 3))
        if plausible_only and not outcome.ok:
            return None
        if patch is None:  # the tree as written, before the tests could add files to it
            apply_patch(self.runtime, parent.patch)
            self.runtime.write_file(path, new_text)
            patch = self.runtime.diff()
        outcome.patch_edited_lines = edited_lines(patch)["total"]
        record.update(patch=patch, edited_lines=outcome.patch_edited_lines)
        return Node(patch, outcome)


def _climb(start: Node, levels: int, expand: Expand, records: list[dict]) -> SearchResult:
    """The best-first loop FLARE and BESTER share: per level, expand the node; move to its best child only if that
    beats it, and go on only while the new node still fails."""
    node = start
    for level in range(1, levels + 1):
        best = max((child for child in expand(level, node) if child is not None), key=lambda n: n.outcome.key(),
                   default=None)
        if best is None or best.outcome.key() <= node.outcome.key():
            break
        node = best
        if node.outcome.ok:
            break
    return SearchResult(node, node is not start, records)


def flare_refine(ask: Ask, runtime: Runtime, problem: str, start: Node, suspects: list[Suspect], *,
                 test_command: str, timeout: float, k: int, rounds: int, context: int) -> SearchResult:
    """FLARE: per round, one revision per top-k suspicious line; keep the best; stop on a pass or no progress."""
    runner = CandidateRunner(runtime, test_command, timeout, "flare")

    def revisions(round_no: int, node: Node) -> Iterator[Node | None]:
        for path, line, _suspect in top_lines(suspects, k):
            text = runner.file_at(node.patch, path)
            if text is None or not 1 <= line <= len(text.splitlines()):
                continue
            lo, hi = context_window(text, line, context)
            original = text.splitlines()[line - 1]
            window = text.splitlines()[lo - 1 : hi]
            reply = ask(prompts.revision_prompt(problem, path, numbered(window, lo), line, original,
                                                node.outcome.output), f"flare round {round_no} {path}:{line}", False)
            revision = line_revision(extract_code(reply), original, window)
            yield runner.evaluate(node, path, line, line, revision, round=round_no)

    return _climb(start, rounds, revisions, runner.records)


def bester_search(ask: Ask, runtime: Runtime, problem: str, start: Node, suspects: list[Suspect], *,
                  test_command: str, timeout: float, reflections: int, depth: int, context: int) -> SearchResult:
    """BESTER: n self-reflections per node, one repair each; expand the best child, to `depth`."""
    runner = CandidateRunner(runtime, test_command, timeout, "bester")
    target = next(((s.path, s.start_line) for s in suspects), None)

    def repairs(level: int, node: Node) -> Iterator[Node | None]:
        if target is None or (text := runner.file_at(node.patch, target[0])) is None:
            return
        path, line = target
        lo, hi = context_window(text, min(line, len(text.splitlines()) or 1), context)
        hi = min(hi, lo + MAX_REGION_LINES - 1)
        window = text.splitlines()[lo - 1 : hi]
        code, region = numbered(window, lo), "\n".join(window)
        for i in range(reflections):
            reflection = ask(prompts.reflection_prompt(problem, path, code, node.outcome.output),
                             f"bester depth {level} reflection {i + 1}", True)
            reply = ask(prompts.repair_prompt(problem, path, region, lo, hi, reflection),
                        f"bester depth {level} repair {i + 1}", False)
            yield runner.evaluate(node, path, lo, hi, extract_code(reply), depth=level, reflection=reflection)

    return _climb(start, depth, repairs, runner.records)


@dataclass
class CandidateBudget:
    """How much a candidate search may spend: runs, seconds, pairs, and how many plausible patches it collects."""

    runs: int = 60
    seconds: float = 300.0
    pairs: int = 10
    lines: int = 10
    plausible: int = 3
    #: "likelihood": every candidate scored by the model before the search; "rank": only plausible ones, to choose
    order: str = "rank"


def focused_command(runtime: Runtime, command: str, failing: list[str]) -> str | None:
    """The pytest command narrowed to the failing tests (its path arguments replaced by their ids), so a candidate
    meets the failing tests first; None when the command is not pytest's or no failing test is known."""
    words = shlex.split(command)
    at = next((i for i, w in enumerate(words) if w.endswith("pytest") or w == "py.test"), None)
    ids = [t for t in failing if "::" in t]
    if at is None or not ids:
        return None
    paths = [w for w in words[at + 1 :] if not w.startswith("-") and
             runtime.run(f"test -e {shlex.quote(w.split('::')[0])}", timeout=30).exit_code == 0]
    kept = [w for i, w in enumerate(words) if i <= at or w not in paths]
    return shlex.join(kept + ids)


def candidate_search(runtime: Runtime, problem: str, start: Node, suspects: list[Suspect], *, test_command: str,
                     timeout: float, budget: CandidateBudget, scorer: LocalScorer | None = None) -> SearchResult:
    """Edit candidates at the top suspect lines, best first, each on a reset tree: the failing tests first, the
    whole command on a candidate that passes them. Stops at `budget.plausible` plausible patches (or the budget);
    the smallest plausible patch wins, ties to the model's likelihood."""
    runner = CandidateRunner(runtime, test_command, timeout, "candidate")
    targets = [(path, line) for path, line, _ in top_lines(suspects, budget.lines)]
    files = {p: t for p in dict.fromkeys(p for p, _ in targets) if (t := runner.file_at(start.patch, p)) is not None}
    queue = candidates.single_candidates(files, [t for t in targets if t[0] in files])
    if scorer is not None and budget.order == "likelihood":
        queue = candidates.with_likelihood(queue, scorer, problem)
    queue = candidates.ordered(queue)
    queue = queue[: max(0, budget.runs - budget.pairs)] + candidates.pair_candidates(queue, budget.pairs)
    focused = focused_command(runtime, test_command, start.outcome.failed_tests)
    started = time.monotonic()
    plausible: list[tuple[Candidate, Node]] = []
    tried = 0
    for candidate in queue[: budget.runs]:
        if len(plausible) >= budget.plausible or time.monotonic() - started > budget.seconds:
            break
        tried += 1
        node = _evaluate(runner, start, candidate, focused)
        if node is False:
            break
        if node is not None and node.outcome.ok:
            plausible.append((candidate, node))
            runner.records[-1]["seconds_to_plausible"] = round(time.monotonic() - started, 3)
    if not plausible:
        return SearchResult(start, False, runner.records)
    for candidate in _simpler(plausible, queue[tried:])[: max(0, budget.runs - tried)]:
        node = _evaluate(runner, start, candidate, focused)
        if node is False:
            break
        if node is not None and node.outcome.ok:
            plausible.append((candidate, node))
    return SearchResult(_survivor(plausible, runner.records, scorer, problem), True, runner.records)


def _evaluate(runner: CandidateRunner, start: Node, candidate: Candidate, focused: str | None) -> Node | None | bool:
    """One candidate's run; False when the box cannot be reset any more (a candidate broke it beyond repair, e.g.
    removed the local checkout): the search ends with what it found, said in the candidate's record."""
    try:
        return runner.evaluate_candidate(start, candidate, focused)
    except RuntimeFailure as exc:
        runner.records[-1].update(status=f"the box could not be reset, the search stops: {exc}", broke_box=True)
        return False


#: edits that take code out: when one passes, the code it removes was not needed to pass
REMOVALS = frozenset({"drop_operand", "drop_method_call", "unwrap_call", "drop_element", "drop_statement"})


def _simpler(plausible: list[tuple[Candidate, Node]], untried: list[Candidate]) -> list[Candidate]:
    """The removals not yet tried on the lines a plausible patch edits: a swapped operator that turns `x + 1` into
    `x * 1` passes for the same reason that dropping `+ 1` does, and the removal is the patch a reader would write."""
    lines = {(c.path, line) for c, _ in plausible for line in c.lines}
    return [c for c in untried if set(c.kinds) <= REMOVALS and c.source == "edit"
            and all((c.path, line) in lines for line in c.lines)]


def _survivor(plausible: list[tuple[Candidate, Node]], records: list[dict], scorer: LocalScorer | None,
              problem: str) -> Node:
    """The plausible patch to keep: the smallest edit, then a removal (less code), then the one the model finds
    most natural (a patch that only games a weak test is rarely the likeliest code); only these few are scored."""
    if scorer is not None and len(plausible) > 1 and any(c.gain is None for c, _ in plausible):
        scored = candidates.with_likelihood([c for c, _ in plausible], scorer, problem)
        plausible = [(c, node) for c, (_, node) in zip(scored, plausible, strict=True)]
        for c, node in plausible:
            record = next(r for r in records if r.get("patch") == node.patch)
            record["gain"] = c.gain
    _, best = min(plausible, key=lambda cn: (cn[0].size, not set(cn[0].kinds) <= REMOVALS, -(cn[0].gain or 0.0)))
    return best


def run_candidates(runtime: Runtime, problem: str, start: Node, suspects: list[Suspect], test_command: str,
                   settings: SearchSection, cap_s: float) -> SearchResult:
    """The candidate search as the agent configures it (`search.candidate_*`); the embedded model scores the
    candidates only when `search.candidate_order` asks for it and its package is installed."""
    budget = CandidateBudget(settings.candidate_runs, settings.candidate_seconds, settings.candidate_pairs,
                             settings.k, settings.plausible, settings.candidate_order)
    return candidate_search(runtime, problem, start, suspects, test_command=test_command,
                            timeout=hang_bound(start.outcome, cap_s), budget=budget, scorer=embedded_scorer())


def embedded_scorer() -> LocalScorer | None:
    """The embedded model as a scorer of code (it loads on first use), or None when its package is not installed."""
    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        return None
    from pinpoint.localization.scorer import LocalScorer

    return LocalScorer()
