"""The programs the diagnostic model trains and is evaluated on, read from `../shared/data`, and their splits.

Held out, never trained on: HumanEvalFix (and all of HumanEval, whose canonical solutions it was made from),
PDB-Multi (and the BigCodeBench / LiveCodeBench tasks it was generated from, and DebugBench rows on the same LeetCode
problems), and the functions SWE-bench Verified's fixes change (the repository pool leaves out every file SWE-bench
touches). ConDefects and the remaining pools are split by base task (repository functions by file), so no task is in
two splits.
"""

from __future__ import annotations

import ast
import hashlib
import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.swebench_eval.metrics import patch_gold_lines

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Program:
    """One program. `buggy_lines` are the gold fault lines (1-based; empty for correct code); `fixed_code` is the
    reference fix where one exists; `tests`/`entry_point` make it runnable (HumanEvalFix only); `description` is
    what the code should do, in words (a docstring, a problem statement), where the source has one."""

    id: str
    group: str
    source: str
    code: str
    buggy_lines: tuple[int, ...] = ()
    fixed_code: str | None = None
    tests: str | None = None
    entry_point: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    description: str = ""


def data_dir() -> Path:
    """The shared data folder (`environments.paths.shared_data`), which must exist."""
    path = paths.shared_data()
    if not path.is_dir():
        raise FileNotFoundError(f"shared data not found at {path}; set PINPOINT_SHARED_DATA to the data folder")
    return path


def split_of(group: str) -> str:
    """Deterministic 80/10/10 split by base task (a salted hash, so adding data never moves a task)."""
    bucket = int(hashlib.sha256(f"pinpoint-split\0{group}".encode()).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "val" if bucket == 1 else "train"


# -- held-out evaluation sets -----------------------------------------------------------------------------------
def humanevalfix() -> list[Program]:
    root = data_dir() / "humanevalfix"
    labels = {r["task_id"]: r for r in _jsonl(root / "humanevalpack_python.line_labels.jsonl")}
    out = []
    for row in _jsonl(root / "humanevalpack_python.jsonl"):
        lab = labels[row["task_id"]]
        out.append(
            Program(
                id=row["task_id"],
                group=row["task_id"],
                source="humanevalfix",
                code=row["declaration"] + row["buggy_solution"],
                buggy_lines=tuple(sorted(set(lab["buggy_lines"]) | set(lab["insert_before_lines"]))),
                fixed_code=row["declaration"] + row["canonical_solution"],
                tests=row["test"],
                entry_point=row["entry_point"],
                meta={"bug_type": row["bug_type"]},
                description=row["docstring"],
            )
        )
    return out


def pdb_multi() -> list[Program]:
    """PDB-Multi; gold lines are the keys of `gt_diff` (for an `Add`, the line the code is inserted before)."""
    out = []
    for path in sorted((data_dir() / "pdb").glob("*/bug_data/*_pdb_multi.json")):
        for row in json.loads(path.read_text()):
            task_id = str(_value(row["task_id"]))
            gold = tuple(sorted({int(str(k).strip()) for k in _value(row["gt_diff"])}))
            out.append(
                Program(
                    id=f"pdb/{task_id}",
                    group=_pdb_base(task_id),
                    source="pdb_multi",
                    code=_value(row["buggy_code"]),
                    buggy_lines=gold,
                    fixed_code=_value(row["gt_solution"]),
                    meta={"bug_type": _value(row.get("bug_type", ""))},
                )
            )
    return out


def swebench_functions(max_chars: int = 4000) -> list[Program]:
    """Real repository bugs at function size: the innermost function around the lines each SWE-bench Verified fix
    changes, as it stood at the row's base commit (dedented), with the issue's text as its description. Only rows
    whose repository is in `repos/`; functions longer than `max_chars` and changes outside any function are left out.
    Ordered round-robin over repositories, so a `--limit` keeps every repository."""
    from pinpoint.localization.repair import enclosing_functions

    per_repo: dict[str, list[Program]] = {}
    for repo, instances in _offline_swebench().values():
        for instance in instances:
            for path, gold in sorted(patch_gold_lines(instance.patch).items()):
                if not path.endswith(".py"):
                    continue
                source = repo.git.show(f"{instance.base_commit}:{path}")
                lines = source.splitlines(keepends=True)
                for (first, last), inside in sorted(enclosing_functions(source, gold).items()):
                    code = textwrap.dedent("".join(lines[first - 1 : last]))
                    if len(code) <= max_chars:
                        per_repo.setdefault(instance.repo, []).append(Program(
                            id=f"swebench/{instance.instance_id}/{path}:{first}", group=instance.instance_id,
                            source="swebench", code=code, buggy_lines=tuple(sorted(n - first + 1 for n in inside)),
                            meta={"repo": instance.repo}, description=instance.problem_statement))
    queues = [per_repo[r] for r in sorted(per_repo)]
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


@cache
def repository_functions(repos: tuple[str, ...] | None = None) -> list[Program]:
    """Correct-code bases from the offline repositories (`owner__name`; default all): every function and method at
    the newest base commit of the repository's SWE-bench rows, dedented, with its docstring as its description.
    Test files and every file a SWE-bench fix or test patch touches are left out, so the `swebench` set stays held
    out; grouped by file, so a file's functions share a split."""
    from pinpoint.localization.mutations import Source, nodes
    from pinpoint.localization.retrieval import is_test_path

    out = []
    for name, (repo, instances) in sorted(_offline_swebench().items()):
        if repos is not None and name not in repos:
            continue
        touched = {path for i in instances for patch in (i.patch, i.test_patch) for path in patch_gold_lines(patch)}
        commit = max(instances, key=lambda i: i.created_at).base_commit
        for path in repo.git.ls_tree("-r", "--name-only", commit).splitlines():
            if not path.endswith(".py") or is_test_path(path) or path in touched:
                continue
            source = Source(repo.git.show(f"{commit}:{path}"))
            lines = source.code.splitlines(keepends=True)
            for node in nodes(source.tree.root_node):
                if node.type != "function_definition" or _inside_function(node):
                    continue
                first, last = node.start_point[0] + 1, node.end_point[0] + 1
                body = node.child_by_field_name("body")
                doc = body.named_children[0] if body is not None and body.named_children else None
                described = doc is not None and doc.type == "expression_statement" and doc.named_children and \
                    doc.named_children[0].type == "string"
                out.append(Program(
                    id=f"repo/{name}/{path}:{first}", group=f"repo/{name}/{path}", source="repository",
                    code=textwrap.dedent("".join(lines[first - 1 : last])), meta={"repo": name},
                    description=_docstring(source.text(doc.named_children[0])) if described else ""))
    return sorted(out, key=lambda p: p.id)


def _docstring(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return ""
    return textwrap.dedent(value).strip() if isinstance(value, str) else ""


def _inside_function(node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type == "function_definition":
            return True
        parent = parent.parent
    return False


@cache
def _offline_swebench() -> dict:
    """{owner__name: (git.Repo of the offline bare repository, its SWE-bench Verified rows)} for repos in `repos/`."""
    import git
    from pinpoint.environments.repo_image import extract_shared_repo
    from pinpoint.swebench_eval.datasets import load_instances

    offline = {p.name.removesuffix(".git.tar") for p in (data_dir() / "repos").glob("*.git.tar")}
    rows: dict[str, list] = {}
    for instance in load_instances(data_dir() / "swebench_verified_dev.jsonl.gz"):
        if instance.owner_name in offline:
            rows.setdefault(instance.owner_name, []).append(instance)
    return {name: (git.Repo(extract_shared_repo(name)), instances) for name, instances in rows.items()}



@cache
def pdb_held_out_tasks() -> frozenset[str]:
    """Base tasks PDB-Multi's bugs come from: BigCodeBench ids and LiveCodeBench question ids."""
    return frozenset(p.group for p in pdb_multi())


# -- real labelled bugs -----------------------------------------------------------------------------------------
def condefects() -> list[Program]:
    return [
        Program(
            id=f"condefects/{row['task']}/{row['submission_id']}",
            group=f"condefects/{row['task']}",
            source="condefects",
            code=row["faulty_version"],
            buggy_lines=tuple(row["fault_lines"]),
            fixed_code=row["correct_version"],
        )
        for row in _jsonl(data_dir() / "condefects" / "condefects_python.jsonl")
    ]


def debugbench() -> list[Program]:
    """DebugBench rows, minus LeetCode problems PDB-Multi's LiveCodeBench tasks share (by slug)."""
    held = _livecodebench_held_out_slugs()
    out = []
    for row in _jsonl(data_dir() / "debugbench" / "debugbench_python3.jsonl"):
        if row["slug"] in held:
            continue
        code = row["buggy_code"].strip("\n")
        lab = row["derived_line_labels"]
        out.append(
            Program(
                id=f"debugbench/{row['source_file']}/{row['index_in_file']}",
                group=f"leetcode/{row['slug']}",
                source="debugbench",
                code=code,
                buggy_lines=tuple(sorted(set(lab["buggy_lines"]) | set(lab["insert_before_lines"]))),
                fixed_code=row["oracle_code"].strip("\n"),
                meta={"bug_type": row["bug_category"]},
                description=row["description"],
            )
        )
    return out


# -- correct code to mutate -------------------------------------------------------------------------------------
def bigcodebench_solutions() -> list[Program]:
    held = pdb_held_out_tasks()
    rows: dict[str, dict] = {}
    for path in sorted((data_dir() / "pdb" / "tasks" / "bigcodebench" / "data").glob("*.json")):
        for key, row in json.loads(path.read_text()).items():
            rows.setdefault(_value(row["task_id"]) if "task_id" in row else key, row)
    return [
        Program(
            id=task_id,
            group=task_id,
            source="bigcodebench",
            code=_value(row["code_prompt"]) + _value(row["canonical_solution"]),
            description=_bigcodebench_description(row["doc_struct"]),
        )
        for task_id, row in sorted(rows.items())
        if task_id not in held
    ]


def livecodebench_solutions() -> list[Program]:
    held = pdb_held_out_tasks()
    rows = json.loads((data_dir() / "pdb" / "tasks" / "livecodebench" / "data" / "full_data.json").read_text())
    out = []
    for row in rows:
        qid = str(_value(row["question_id"]))
        if f"livecodebench/{qid}" in held:
            continue
        graded = _value(row["graded_list"])
        code = next((c for c, ok in zip(_value(row["code_list"]), graded, strict=False) if ok), None)
        if code:
            out.append(Program(id=f"livecodebench/{qid}", group=f"leetcode/{_value(row['question_title'])}",
                               source="livecodebench", code=code, description=_value(row["question_content"])))
    return out


def condefects_correct() -> list[Program]:
    """The correct version of each ConDefects submission (one per submission), grouped like the faulty one."""
    return [
        Program(id=p.id + "/correct", group=p.group, source="condefects_correct", code=p.fixed_code or "")
        for p in condefects()
    ]


def iter_split(programs: list[Program], split: str) -> Iterator[Program]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    return (p for p in programs if split_of(p.group) == split)


# -- helpers ----------------------------------------------------------------------------------------------------
def _bigcodebench_description(doc_struct: str | dict) -> str:
    """The task's docstring in words: its description, parameters and return value (not its examples)."""
    doc = json.loads(doc_struct) if isinstance(doc_struct, str) else doc_struct
    parts = [*doc.get("description", [])]
    parts += ["Parameters:", *doc["params"]] if doc.get("params") else []
    parts += ["Returns:", *doc["returns"]] if doc.get("returns") else []
    return "\n".join(parts)


def _pdb_base(task_id: str) -> str:
    """'BigCodeBench/1015_0' -> 'BigCodeBench/1015'; '3532_0' (LiveCodeBench) -> 'livecodebench/3532'."""
    base = task_id.rsplit("_", 1)[0]
    return base if base.startswith("BigCodeBench/") else f"livecodebench/{base}"


@cache
def _livecodebench_held_out_slugs() -> frozenset[str]:
    held = pdb_held_out_tasks()
    rows = json.loads((data_dir() / "pdb" / "tasks" / "livecodebench" / "data" / "full_data.json").read_text())
    return frozenset(
        _value(r["question_title"]) for r in rows if f"livecodebench/{_value(r['question_id'])}" in held
    )


def _value(raw):
    """PDB's JSON stores most fields as Python literals inside strings (`"'abc'"`, `"{...}"`), some as plain text.

    Only quoted strings, lists and dicts are decoded: a bare `3532_0` would otherwise read as the integer 35320.
    """
    if not isinstance(raw, str) or raw[:1] not in "'\"[{" or raw[-1:] not in "'\"]}":
        return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def _jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
