"""LDB block traces (Zhong et al., 2024) as a localization signal: the suspicious functions' basic blocks, the
locals after each block in failing and passing runs of the repository's tests, and two verdicts on them.

- LLM-free (`value_spectrum`): a block scores by its execution spectrum (Ochiai over the runs that called the
  function) plus its *value* novelty: the share of its failing-run steps that set a variable (or return a value) to
  something no passing run's step of that block did. Values are compared abstracted (None, a sign, empty or not, a
  type name), since the failing tests' inputs differ from the passing ones' everywhere.
- LLM (`llm_block_verdicts`): LDB's query, all blocks of one failing trace in one prompt, `correct`/`wrong` and why
  per block; `ask(prompt) -> str` is any client, and a reply it cannot read gives no verdicts.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pinpoint.environments.runtime import Runtime
from pinpoint.localization.blocks import Block, FunctionBlocks, function_blocks
from pinpoint.localization.execution import (
    DEFAULT_PYTHON,
    CallTrace,
    ExecutionEvidence,
    Sources,
    rank_functions,
    rank_lines,
    run_traced,
)
from pinpoint.localization.spectrum_rules import ochiai, spread_evenly
from pinpoint.localization.suspects import LocalizationRequest, Suspect

RETURN, RAISED = "<return>", "<raised>"


def trace_targets(evidence: ExecutionEvidence, sources: Sources, top: int = 3) -> list[FunctionBlocks]:
    """The `top` functions the coverage spectrum ranks highest, split into blocks (module-level code has none)."""
    targets = []
    for function in rank_functions(rank_lines(evidence), sources, limit=top):
        text = sources.text(function.path)
        if function.span is not None and text is not None:
            targets.append(function_blocks(text, line=function.span.def_line, path=function.path))
    return targets


def collect_block_traces(
    runtime: Runtime,
    evidence: ExecutionEvidence,
    targets: Sequence[FunctionBlocks],
    *,
    max_passing: int = 10,
    budget_s: float = 300.0,
    per_test_timeout: float = 60.0,
    python: str = DEFAULT_PYTHON,
) -> ExecutionEvidence:
    """Run the spectrum's failing tests again, and up to `max_passing` of its passing tests that ran a target,
    recording block states of the targets."""
    def runs_a_target(test) -> bool:
        return any(set(range(t.span.first_line, t.span.end_line + 1)) & test.lines.get(t.path, frozenset())
                   for t in targets)

    failing = [t.nodeid for t in evidence.failing]
    passing = spread_evenly([t.nodeid for t in evidence.passing if runs_a_target(t)], max_passing)
    return run_traced(runtime, failing + passing, targets=targets, failing=failing, budget_s=budget_s,
                      per_test_timeout=per_test_timeout, python=python)


# -- the LLM-free verdict --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockVerdict:
    """One block of a traced function, scored by how differently it behaved in failing runs."""

    key: str
    path: str
    index: int
    block: Block
    score: float
    ran_failing: int
    failing: int
    ran_passing: int
    passing: int
    novel: tuple[str, ...]
    state: dict[str, str]

    def evidence(self) -> str:
        state = ", ".join(f"{k}={v}" for k, v in self.state.items())
        novel = f"; values no passing run gave here: {', '.join(self.novel)}" if self.novel else ""
        text = (f"{self.key} block {self.index} (lines {self.block.start_line}-{self.block.end_line}, "
                f"{self.block.kind}) ran in {self.ran_failing}/{self.failing} failing and {self.ran_passing}/"
                f"{self.passing} passing runs{novel}; after it in a failing run: {state or '(no locals)'}")
        return text[:600]


_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(\d+\.\d*|\.\d+|\d+)(e[-+]?\d+)?|-?inf|nan", re.IGNORECASE)
_NAME = re.compile(r"<?([A-Za-z_][\w.]*)")


def abstract(value: str) -> str:
    """A recorded repr reduced to what differs in kind, not in data: None/True/False, a sign, empty or not, a type."""
    if value in ("None", "True", "False"):
        return value
    if _INT.fullmatch(value):
        number = int(value)
        return "int<0" if number < 0 else "int=0" if number == 0 else "int>0"
    if _FLOAT.fullmatch(value):
        number = float(value)
        return "float:nan" if number != number else "float<0" if number < 0 else "float=0" if number == 0 else "float>0"
    for empty, kind in (("''", "str"), ('""', "str"), ("b''", "bytes"), ("[]", "list"), ("()", "tuple"),
                        ("{}", "dict"), ("set()", "set")):
        if value == empty:
            return f"{kind}:empty"
    opener = {"'": "str", '"': "str", "[": "list", "(": "tuple", "{": "dict"}.get(value[:1])
    if opener:
        return opener
    if value.startswith("<repr failed"):
        return "repr-failed"
    match = _NAME.match(value)
    return match.group(1) if match else "other"


def _deltas(trace: CallTrace) -> list[tuple[int, dict[str, str], set[tuple[str, str]]]]:
    """(block, state, abstract changes) per step: the variables the block set or changed, and its return value."""
    out = []
    for step in trace.steps:
        changed = {(k, abstract(step.state[k])) for k in step.changed if k in step.state}
        if step.returned is not None:
            changed.add((RETURN, abstract(step.returned)))
        if step.raised is not None:
            changed.add((RAISED, abstract(step.raised)))
        out.append((step.block, step.state, changed))
    return out


def value_spectrum(evidence: ExecutionEvidence, function: FunctionBlocks) -> list[BlockVerdict]:
    """Every block of `function` that a failing run executed, best first."""
    key = function.key
    failing = [t.blocks[key] for t in evidence.failing if key in t.blocks]
    passing = [t.blocks[key] for t in evidence.passing if key in t.blocks]
    seen_passing: dict[int, set[tuple[str, str]]] = {}
    for run in passing:
        for trace in run.traces:
            for block, _state, changed in _deltas(trace):
                seen_passing.setdefault(block, set()).update(changed)
    verdicts = []
    for index, block in enumerate(function.blocks):
        ran_failing = sum(index in run.executed for run in failing)
        if not ran_failing:
            continue
        ran_passing = sum(index in run.executed for run in passing)
        steps = [(state, changed) for run in failing for trace in run.traces
                 for b, state, changed in _deltas(trace) if b == index]
        novel: set[str] = set()
        novel_steps = 0
        if index in seen_passing:
            for _state, changed in steps:
                unseen = changed - seen_passing[index]
                novel_steps += bool(unseen)
                novel.update(f"{k}={v}" for k, v in unseen)
        novelty = novel_steps / len(steps) if steps else 0.0
        score = ochiai(ran_failing, ran_passing, len(failing)) + novelty
        verdicts.append(BlockVerdict(key, function.path, index, block, score, ran_failing, len(failing),
                                     ran_passing, len(passing), tuple(sorted(novel))[:8],
                                     steps[-1][0] if steps else {}))
    verdicts.sort(key=lambda v: (-v.score, v.block.start_line))
    return verdicts


def ldb_suspects(evidence: ExecutionEvidence, max_blocks: int = 20) -> list[Suspect]:
    """Blocks of every traced function as `ldb` suspects, by their value-spectrum score."""
    verdicts = [v for function in evidence.functions.values() for v in value_spectrum(evidence, function)]
    verdicts.sort(key=lambda v: (-v.score, v.path, v.block.start_line))
    return [Suspect(v.path, v.block.start_line, v.block.end_line, v.score, "ldb", v.evidence())
            for v in verdicts[:max_blocks]]


class LdbLocalizer:
    """The `ldb` signal over block traces collected beforehand (`collect_block_traces`)."""

    name = "ldb"

    def __init__(self, evidence: ExecutionEvidence, max_blocks: int = 20) -> None:
        self.evidence = evidence
        self.max_blocks = max_blocks

    def localize(self, request: LocalizationRequest) -> list[Suspect]:
        return ldb_suspects(self.evidence, self.max_blocks)


# -- the LLM verdict -------------------------------------------------------------------------------------------------
def failing_trace(evidence: ExecutionEvidence, key: str) -> CallTrace | None:
    """The last kept call (with recorded steps) of the function in the first failing test that ran it: the one
    closest to the failure."""
    for test in evidence.failing:
        run = test.blocks.get(key)
        recorded = [trace for trace in run.traces if trace.steps] if run is not None else []
        if recorded:
            return recorded[-1]
    return None


def _block_code(lines: list[str], block: Block, max_lines: int = 12) -> str:
    code = lines[block.start_line - 1:block.end_line]
    if len(code) > max_lines:
        code = code[:max_lines] + [f"... ({len(code) - max_lines} more lines)"]
    return textwrap.dedent("\n".join(code))


def block_prompt(function: FunctionBlocks, source: str, trace: CallTrace, *, task: str = "",
                 failure: str = "") -> str:
    """LDB's debugging query: each executed block of one call, its code and the locals after it, and a request for
    one verdict per block."""
    lines = source.splitlines()
    parts = [f"A failing test ran `{function.span.qualname}` in {function.path}. Its execution is split into basic "
             "blocks; after each block you see the values of the local variables."]
    if task.strip():
        parts.append(f"What the code should do:\n{task.strip()[:1500]}")
    if failure.strip():
        parts.append(f"How the test failed:\n{failure.strip()[:800]}")
    for i, step in enumerate(trace.steps):
        if trace.omitted and i == len(trace.steps) // 2:
            parts.append(f"... {trace.omitted} blocks omitted ...")
        state = "; ".join(f"{k} = {v}" for k, v in step.state.items()) or "(no locals)"
        returned = f"\n# returns: {step.returned}" if step.returned is not None else ""
        returned += f"\n# raises: {step.raised}" if step.raised is not None else ""
        parts.append(f"[BLOCK-{i}]\n{_block_code(lines, function.blocks[step.block])}\n# after: {state}{returned}")
    parts.append("For every block, say whether it is correct or wrong for what the code should do, and why in one "
                 "sentence. Answer one line per block, exactly in this form:\n"
                 "BLOCK-0: correct - <why>\nBLOCK-1: wrong - <why>")
    return "\n\n".join(parts)


_VERDICT_LINE = re.compile(r"BLOCK[-_ ]?(\d+)\W{0,6}?(correct|incorrect|wrong)\b\W*(.*)", re.IGNORECASE)


def parse_block_verdicts(reply: str, steps: int) -> dict[int, tuple[str, str]]:
    """Step index -> (`correct` | `wrong`, why), from lines `BLOCK-i: verdict - why` or LDB's JSON objects
    ({"block": "BLOCK-i", "correct": bool, "explanation": ...}); anything unreadable gives nothing."""
    verdicts: dict[int, tuple[str, str]] = {}
    for raw in re.findall(r"\{[^{}]*\}", reply or ""):
        try:
            item = json.loads(raw)
        except json.JSONDecodeError:
            continue
        index = re.search(r"\d+", str(item.get("block", ""))) if isinstance(item, dict) else None
        if index and isinstance(item.get("correct"), bool) and 0 <= int(index.group()) < steps:
            why = str(item.get("explanation", item.get("why", "")))[:300]
            verdicts.setdefault(int(index.group()), ("correct" if item["correct"] else "wrong", why))
    if verdicts:
        return verdicts
    for match in _VERDICT_LINE.finditer(reply or ""):
        index = int(match.group(1))
        if 0 <= index < steps and index not in verdicts:
            word = match.group(2).lower()
            verdicts[index] = ("correct" if word == "correct" else "wrong", match.group(3).strip()[:300])
    return verdicts


@dataclass(frozen=True)
class LlmBlockVerdict:
    step: int
    index: int
    block: Block
    verdict: str
    why: str
    state: dict[str, str]


def llm_block_verdicts(ask: Callable[[str], str], function: FunctionBlocks, source: str, trace: CallTrace, *,
                       task: str = "", failure: str = "") -> list[LlmBlockVerdict]:
    """One query for all blocks of `trace`; a client error or an unreadable reply gives no verdicts."""
    try:
        reply = ask(block_prompt(function, source, trace, task=task, failure=failure))
    except Exception:  # any client's failure: the signal is simply absent
        return []
    parsed = parse_block_verdicts(reply, len(trace.steps))
    out = []
    for step, (verdict, why) in sorted(parsed.items()):
        index = trace.steps[step].block
        out.append(LlmBlockVerdict(step, index, function.blocks[index], verdict, why, trace.steps[step].state))
    return out


def llm_ldb_suspects(verdicts: Sequence[LlmBlockVerdict], function: FunctionBlocks) -> list[Suspect]:
    """The blocks the LLM called wrong, first wrong step first, as `ldb` suspects quoting its reason and the state."""
    suspects, seen = [], set()
    for v in verdicts:
        if v.verdict != "wrong" or v.index in seen:
            continue
        seen.add(v.index)
        state = ", ".join(f"{k}={val}" for k, val in v.state.items())
        evidence = (f"{function.key} block {v.index} (lines {v.block.start_line}-{v.block.end_line}) judged wrong: "
                    f"{v.why}; after it: {state}")[:600]
        suspects.append(Suspect(function.path, v.block.start_line, v.block.end_line, 1.0 / (len(suspects) + 1),
                                "ldb", evidence))
    return suspects
