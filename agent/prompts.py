"""Every text the agent sends to the model. Prompts ask for minimal edits (PreciseCoder) and quote localization
evidence, so the model starts from the suspicious lines instead of rediscovering them."""

from __future__ import annotations

from pinpoint.localization.suspects import Suspect

SYSTEM = """You are pinpoint, a careful software engineer fixing one problem in a repository.
Work with the tools: `view` files, `search` the code, edit with `str_replace_editor`, `run_tests`, and `submit`.
Rules:
- Make the smallest change that fixes the problem: change only the lines the fault needs; do not reformat,
  rename, refactor or touch unrelated code, and do not edit tests unless the problem is in them.
- `old_str` must match the file exactly once; include enough surrounding lines to make it unique.
- Run tests to check your fix when you can, then call `submit`. You will be shown your diff once for a final
  review before it is accepted.
- Use exactly one tool call per reply."""

NO_TOOL_CALL = (
    "Your reply contained no tool call. Use one of the tools (view, search, str_replace_editor, run_tests), "
    "or call submit when the fix is done."
)


def task_message(problem: str, tree: str, hints: str = "", test_command: str | None = None) -> str:
    parts = [f"<problem>\n{problem.strip()}\n</problem>"]
    if hints.strip():
        parts.append(f"<hints>\n{hints.strip()}\n</hints>")
    parts.append(f"Repository layout (depth 2):\n{tree.strip()}")
    if test_command:
        parts.append(f"The fix is checked with: `{test_command}`")
    return "\n\n".join(parts)


def reproduce_message(problem: str) -> str:
    """Ask for a script that shows the issue: it runs from the repository root and must fail on the current code."""
    return (f"Before any fix, write a short Python script that reproduces this issue:\n\n{problem.strip()}\n\n"
            "The script runs from the repository root with the repository importable. It must fail on the current "
            "code (an exception or a failed assert naming what is wrong) and succeed once the issue is fixed. "
            "Reply with the script alone in one ```python block; it is run as is and never becomes part of the "
            "patch.")


def reproduction_note(status: str, output: str) -> str:
    """What the model reads after its script ran."""
    return f"Your reproduction script {status}. Its output (tail):\n{test_feedback(output)}"


def suspects_message(suspects: list[Suspect], snippets: dict[int, str], test_output: str = "") -> str:
    """The ranked suspects with their evidence and the code they point at."""
    if not suspects:
        return "Localization found no suspicious code from the problem text; explore with `search` and `view`."
    head = "Failing tests point at new locations." if test_output else "Localization ranked these suspects."
    lines = [f"{head} Start from the most suspicious code (evidence quoted):"]
    for i, s in enumerate(suspects):
        span = f"{s.path}:{s.start_line}" + (f"-{s.end_line}" if s.end_line != s.start_line else "")
        lines.append(f"\n#{i + 1} {span} (score {s.score:.3f})\n  evidence: {s.describe()}")
        if snippets.get(i):
            lines.append(snippets[i])
    return "\n".join(lines)


def trace_message(blocks: list[Suspect]) -> str:
    """The failing run's recorded state after its most suspicious basic blocks (LDB), for the model to judge."""
    if not blocks:
        return ""
    lines = ["\n\nExecution trace of the failing test (LDB: the blocks that behaved most unlike the passing runs, "
             "with the variables after each; judge which value first goes wrong):"]
    lines += [f"- {b.path}:{b.start_line}-{b.end_line}: {b.evidence}" for b in blocks]
    return "\n".join(lines)


def review_message(diff: str, edited_lines: int) -> str:
    return (
        f"Review your patch before it is accepted ({edited_lines} edited lines):\n```diff\n{diff.rstrip()}\n```\n"
        "Check that every changed line is needed for the fix and nothing unrelated changed (debug prints, "
        "reformatting, test edits). If it is right, call `submit` again to accept it; otherwise fix it first."
    )


def test_feedback(output: str, limit: int = 3000) -> str:
    output = output.strip()
    return output if len(output) <= limit else "…" + output[-limit:]


def _failing_code(problem: str, path: str, code: str, feedback: str) -> str:
    """What FLARE's revisions and BESTER's reflections both start from: the task, the numbered code, its failure."""
    return (
        f"Problem:\n{problem.strip()}\n\nCode from {path} (line numbers on the left):\n{code}\n\n"
        f"Test feedback:\n{test_feedback(feedback)}\n\n"
    )


def revision_prompt(problem: str, path: str, code: str, line: int, original: str, feedback: str) -> str:
    """FLARE: one revision of one suspicious line, given the task, the code and the execution feedback."""
    return (
        _failing_code(problem, path, code, feedback)
        + f"Line {line} is suspicious:\n{original}\n\n"
        f"Rewrite line {line} so the code is correct. Reply with only the new code for line {line} (one or a few "
        "lines, same indentation) in a single ```python block. Change nothing else."
    )


def reflection_prompt(problem: str, path: str, code: str, feedback: str) -> str:
    """BESTER: a self-reflection on why the current program fails."""
    return (
        _failing_code(problem, path, code, feedback)
        + "In two or three sentences, explain what is wrong in this code and how to fix it. Do not write code."
    )


def repair_prompt(problem: str, path: str, code: str, start: int, end: int, reflection: str) -> str:
    """BESTER: one repair following one reflection; the model rewrites the shown region."""
    return (
        f"Problem:\n{problem.strip()}\n\nCode from {path}, lines {start}-{end}:\n{code}\n\n"
        f"Analysis of the bug:\n{reflection.strip()}\n\n"
        f"Rewrite lines {start}-{end} to fix the bug with the smallest change. Reply with only the complete new "
        f"code for lines {start}-{end} (without line numbers) in a single ```python block."
    )


def candidate_message(origin: str, summary: str, diff: str) -> str:
    return f"The {origin} search applied its best candidate ({summary}):\n```diff\n{diff.rstrip()}\n```"
