"""Diagnostic-model examples from the repository-mutant corpus (`pinpoint-lab train fusion-data`): each kept mutant's
function, mutated, with the mutated line as its label, in the file format `train diagnostic --examples` reads.

The corpus's mutants are real repository code with a bug that the repository's own tests catch, made in files no
SWE-bench row touches, so the `swebench` evaluation set stays held out. Training and validation are split by
repository (`--val-repo`), so the checkpoint is picked on code of a repository it never trained on.

    python -m pinpoint_lab.localization.mutant_examples --out F [--val-repo OWNER/NAME ...] [--corpus DIR]
    pinpoint-lab train diagnostic --examples F --init-from CHECKPOINT --out PATH --lr 1e-4 --epochs N --threads 1
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from pinpoint.localization.execution import LineScore, Sources
from pinpoint.localization.mbfl import MbflConfig, PlannedMutant, plan_mutants
from pinpoint.localization.repair import enclosing_functions
from pinpoint.localization.scorer import description_prefix

from pinpoint_lab.localization.corpora import Program
from pinpoint_lab.localization.examples import DataConfig, Example, example_from, save_examples
from pinpoint_lab.localization.fusion_data import CORPUS_DIR, CorpusConfig, corpus_rows

#: the repository the shipped fine-tune validates on (its mutants are never trained on)
VAL_REPOS = ("psf/requests",)


def rebuilt_mutants(rows: Sequence[dict], text: str, seed: int = CorpusConfig().seed) -> dict[str, PlannedMutant]:
    """The rows' edits (rows of one file) found again in the unmutated file, by mutant id. A corpus row records its
    mutant's id, path, line, operator and replacement, not the edit's offsets, so MBFL's planner (the corpus's own,
    same seed) is asked for every mutant at those lines and the ones whose ids are the rows' are kept; a row whose
    file is no longer the one mutated finds none."""
    path = rows[0]["mutant"]["path"]
    lines = sorted({r["mutant"]["line"] for r in rows})
    every = MbflConfig(top_lines=len(lines), per_line=10_000, seed=seed)
    planned = plan_mutants([LineScore(path, n, 0.0, 0.0, 0.0, 0, 0, 0, 0) for n in lines],
                           Sources(files={path: text}), every)
    wanted = {r["instance_id"].removeprefix("mutant-") for r in rows}
    return {p.id: p for p in planned if p.id in wanted}


def docstring(code: str) -> str:
    """A dedented function's docstring ('' without one), what the repository pool reads first as its description."""
    try:
        node = ast.parse(code).body[0]
    except (SyntaxError, IndexError):
        return ""
    return (ast.get_docstring(node) or "") if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else ""


def mutant_program(repo: str, mutant: PlannedMutant, text: str, max_chars: int = DataConfig().max_chars
                   ) -> Program | None:
    """The innermost function around the mutated line, mutated and dedented (as the `swebench` set reads a function),
    its unmutated version as the fix; None when the edit lies outside a function or the function is longer than
    `max_chars`."""
    mutated = text[: mutant.start] + mutant.replacement + text[mutant.end:]
    spans = enclosing_functions(mutated, {mutant.line})
    if not spans:
        return None
    (first, last), = spans
    code = textwrap.dedent("".join(mutated.splitlines(keepends=True)[first - 1: last]))
    fixed = textwrap.dedent("".join(text.splitlines(keepends=True)[first - 1: last]))  # edits hold no newline
    if len(code) > max_chars:
        return None
    return Program(id=f"mutant/{repo}/{mutant.id}", group=f"mutant/{repo}/{mutant.path}:{first}",
                   source="fusion-mutant", code=code, buggy_lines=(mutant.line - first + 1,), fixed_code=fixed,
                   meta={"repo": repo, "operator": mutant.operator}, description=docstring(fixed))


def corpus_programs(rows: Sequence[dict], read: Callable[[dict], str]) -> list[Program]:
    """Every kept row's program (rows whose edit is not found again are left out); `read(row)` gives the unmutated
    file the row's mutant was made in."""
    by_file: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_file.setdefault((row["box"], row["mutant"]["path"]), []).append(row)
    programs = []
    for group in by_file.values():
        text = read(group[0])
        found = rebuilt_mutants(group, text)
        programs += [mutant_program(r["repo"], found[mid], text) for r in group
                     if (mid := r["instance_id"].removeprefix("mutant-")) in found]
    return [p for p in programs if p is not None]


def offline_reader() -> Callable[[dict], str]:
    """Files at the base commit of each row's box, from the offline repositories in `../shared/data/repos`."""
    from pinpoint_lab.localization.corpora import _offline_swebench

    boxes = {i.instance_id: (repo, i.base_commit) for repo, rows in _offline_swebench().values() for i in rows}

    def read(row: dict) -> str:
        repo, commit = boxes[row["box"]]
        return repo.git.show(f"{commit}:{row['mutant']['path']}", strip_newline_in_stdout=False)

    return read


def build(programs: Sequence[Program], scorer, log: Callable[[str], None] = print) -> list[Example]:
    """Scored examples: a function's mutants are read incrementally from its unmutated code (`score_mutants`),
    after its docstring where it has one; the target is the first unit that differs from the unmutated code."""
    by_base: dict[tuple[str, str], list[Program]] = {}
    for p in programs:
        by_base.setdefault((p.fixed_code or "", p.description), []).append(p)
    out = []
    for k, ((base, description), group) in enumerate(by_base.items(), 1):
        tokens = scorer.score_mutants(base, [p.code for p in group], prefix=description_prefix(description))
        out += [example_from(p, t) for p, t in zip(group, tokens, strict=True)]
        if k % 20 == 0:
            log(f"{k}/{len(by_base)} functions scored")
    return out


def round_robin(programs: Sequence[Program], limit: int | None = None) -> list[Program]:
    """The programs taken in turn from each repository (so a `limit` keeps every repository), at most `limit`."""
    queues: dict[str, list[Program]] = {}
    for p in programs:
        queues.setdefault(p.meta["repo"], []).append(p)
    ordered = [q[i] for i in range(max(map(len, queues.values()), default=0)) for q in queues.values() if i < len(q)]
    return ordered[:limit]


def split(examples: Sequence[Example], val_repos: Sequence[str]) -> dict[str, list[Example]]:
    """Train on every repository but `val_repos`, validate on those."""
    val = [ex for ex in examples if ex.meta.get("repo") in val_repos]
    return {"train": [ex for ex in examples if ex.meta.get("repo") not in val_repos], "val": val}


def main(argv: Sequence[str] | None = None) -> int:
    from pinpoint.localization.scorer import LocalScorer

    parser = argparse.ArgumentParser(prog="python -m pinpoint_lab.localization.mutant_examples",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the examples file to write (gzipped pickle)")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, help="the fusion-data folder (default: committed)")
    parser.add_argument("--val-repo", action="append", default=None, metavar="OWNER/NAME",
                        help=f"validate on this repository's mutants (repeatable; default {', '.join(VAL_REPOS)})")
    parser.add_argument("--limit", type=int, default=None,
                        help="at most N mutants, taken in turn from each repository (scores are cached: a larger "
                             "limit later scores only the new ones)")
    args = parser.parse_args(argv)
    rows = corpus_rows(args.corpus)
    val_repos = tuple(args.val_repo or VAL_REPOS)
    if not rows or not {r["repo"] for r in rows} - set(val_repos):
        print(f"{parser.prog}: no kept mutant outside {', '.join(val_repos)} in {args.corpus}", file=sys.stderr)
        return 2
    every = corpus_programs(rows, offline_reader())
    programs = round_robin(every, args.limit)
    print(f"{len(every)} of {len(rows)} kept mutants as functions; {len(programs)} taken", file=sys.stderr)
    splits = split(build(programs, LocalScorer(), lambda s: print(s, file=sys.stderr)), val_repos)
    save_examples(args.out, splits, DataConfig(bigcodebench_bases=0, livecodebench_bases=0, debugbench=0,
                                               condefects_train=0, undescribed_twins=False))
    print(json.dumps({"examples": str(args.out), **{k: len(v) for k, v in splits.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
