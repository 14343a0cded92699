"""SWE-bench rows: load them from .jsonl / .jsonl.gz / .json / .parquet (or a hub dataset) and validate each one.

Every later step trusts these fields, so a malformed row is rejected here with an error that names the file, the
row number and the field, instead of failing halfway through an evaluation.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinpoint.environments import paths
from pinpoint.environments.errors import PinpointError
from pinpoint.environments.files import jsonl_records


def default_dataset() -> Path:
    """The SWE-bench Verified dev rows in the shared data."""
    return paths.shared_data() / "swebench_verified_dev.jsonl.gz"


_REQUIRED_STR = ("instance_id", "repo", "base_commit", "patch", "test_patch", "version")
_TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
#: how a synthesized row's id names the row it was made from: `<row>.synth-<hash>` (rl/synthesize.py)
SYNTH_MARK = ".synth-"


class DatasetError(PinpointError, ValueError):
    """A dataset that cannot be read, or a row with a missing or malformed field."""


@dataclass(frozen=True)
class Instance:
    """One validated SWE-bench task instance (test lists already decoded from their JSON strings)."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    version: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    environment_setup_commit: str
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str = ""
    #: a diff over the non-test files applied before anything else (before an agent starts, before the patch a
    #: grader grades): a synthesized row's starting state, its base commit's tree otherwise being the same as the
    #: row it was made from; empty for a SWE-bench row
    setup_patch: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def owner_name(self) -> str:
        """`owner__name`, the form repository archives and image names use."""
        return self.repo.replace("/", "__")

    def image_row(self) -> Instance:
        """The row whose instance image this row runs in: itself, or for a synthesized row (a setup patch over the
        base commit of the row named before `.synth-` in its id) that row, so its tasks share one image."""
        source, mark, _ = self.instance_id.rpartition(SYNTH_MARK)
        if not self.setup_patch or not mark:
            return self
        return dataclasses.replace(self, instance_id=source, setup_patch="")

    def to_row(self) -> dict[str, Any]:
        """The row in the official dataset shape (test lists as JSON strings)."""
        row = dict(self.extra)
        row.update(
            instance_id=self.instance_id,
            repo=self.repo,
            base_commit=self.base_commit,
            patch=self.patch,
            test_patch=self.test_patch,
            version=self.version,
            FAIL_TO_PASS=json.dumps(list(self.FAIL_TO_PASS)),
            PASS_TO_PASS=json.dumps(list(self.PASS_TO_PASS)),
            environment_setup_commit=self.environment_setup_commit,
            problem_statement=self.problem_statement,
            hints_text=self.hints_text,
            created_at=self.created_at,
        )
        if self.setup_patch:
            row["setup_patch"] = self.setup_patch
        return row


def _test_list(value: Any, where: str, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: field {name!r} is not valid JSON ({exc.msg})") from None
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise DatasetError(f"{where}: field {name!r} must be a list of test names (or its JSON string)")
    return tuple(value)


def validate_row(row: Any, where: str) -> Instance:
    """Turn one raw row into an Instance; `where` (e.g. 'data.jsonl row 7') prefixes every error."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected an object, got {type(row).__name__}")
    for name in _REQUIRED_STR:
        value = row.get(name)
        if not isinstance(value, str) or (name != "patch" and not value.strip()):
            got = "missing" if name not in row else f"{type(value).__name__} {value!r:.40}"
            raise DatasetError(f"{where}: field {name!r} must be a non-empty string ({got})")
    where = f"{where} ({row['instance_id']})"
    if row["repo"].count("/") != 1:
        raise DatasetError(f"{where}: field 'repo' must look like 'owner/name', got {row['repo']!r}")
    if not row["test_patch"].lstrip().startswith(("diff --git", "--- ")):
        raise DatasetError(f"{where}: field 'test_patch' is not a unified diff")
    tests = {name: _test_list(row.get(name, "[]"), where, name) for name in _TEST_LISTS}
    setup = row.get("setup_patch") or ""
    if not isinstance(setup, str) or (setup and not setup.lstrip().startswith(("diff --git", "--- "))):
        raise DatasetError(f"{where}: field 'setup_patch' must be a unified diff (or empty)")
    known = set(_REQUIRED_STR) | set(_TEST_LISTS) | {"environment_setup_commit", "problem_statement", "hints_text",
                                                    "created_at", "setup_patch"}
    return Instance(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        version=row["version"],
        FAIL_TO_PASS=tests["FAIL_TO_PASS"],
        PASS_TO_PASS=tests["PASS_TO_PASS"],
        environment_setup_commit=row.get("environment_setup_commit") or row["base_commit"],
        problem_statement=row.get("problem_statement") or "",
        hints_text=row.get("hints_text") or "",
        created_at=str(row.get("created_at") or ""),
        setup_patch=setup,
        extra={k: v for k, v in row.items() if k not in known},
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, raw row) per line of a .jsonl or .jsonl.gz file; a file that is not that is a DatasetError."""
    name = path.name
    opener = gzip.open if name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as handle:
            text = handle.read()
    except (UnicodeDecodeError, EOFError, OSError) as exc:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{name}: cannot read the file as "
                           f"{'gzip-compressed ' if name.endswith('.gz') else ''}UTF-8 JSON lines ({exc})") from None
    for number, row, not_json in jsonl_records(text):
        if not_json:
            raise DatasetError(f"{name} line {number}: not valid JSON ({not_json})")
        yield f"{name} line {number}", row


def _read_rows(source: str) -> Iterator[tuple[str, Any]]:
    """Yield (location, raw row) from a local file, or from a hub dataset name when `source` is not a path."""
    path = Path(source)
    name = path.name
    if name.endswith((".jsonl", ".jsonl.gz")):
        if not path.exists():
            raise DatasetError(f"dataset file not found: {path}")
        yield from _jsonl_rows(path)
    elif name.endswith(".json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise DatasetError(f"cannot read {path}: {exc}") from None
        if not isinstance(data, list):
            raise DatasetError(f"{name}: expected a JSON list of rows")
        yield from ((f"{name} row {i}", row) for i, row in enumerate(data, 1))
    elif name.endswith(".parquet"):
        import pyarrow.parquet as pq

        if not path.exists():
            raise DatasetError(f"dataset file not found: {path}")
        yield from ((f"{name} row {i}", row) for i, row in enumerate(pq.read_table(path).to_pylist(), 1))
    elif path.exists():
        raise DatasetError(f"unsupported dataset format: {path} (use .jsonl, .jsonl.gz, .json or .parquet)")
    else:  # a hub dataset such as princeton-nlp/SWE-bench_Verified[:split]
        import datasets

        hub_name, _, split = source.partition(":")
        try:
            rows = datasets.load_dataset(hub_name, split=split or "test")
        except Exception as exc:  # the hub raises many types; the message is what the user needs
            raise DatasetError(f"cannot load dataset {source!r}: not a local file, and the hub said: {exc}") from None
        yield from ((f"{hub_name} row {i}", row) for i, row in enumerate(rows, 1))


def load_instances(
    path: str | Path | None = None,
    ids: Iterable[str] | None = None,
    repos: Iterable[str] | None = None,
) -> list[Instance]:
    """Load and validate every row; keep only `ids` / `repos` when given (unknown ids are an error)."""
    source = str(path or default_dataset())
    instances: list[Instance] = []
    seen: set[str] = set()
    for where, row in _read_rows(source):
        instance = validate_row(row, where)
        if instance.instance_id in seen:
            raise DatasetError(f"{where}: duplicate instance_id {instance.instance_id!r}")
        seen.add(instance.instance_id)
        instances.append(instance)
    if ids:
        wanted = list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in seen]
        if missing:
            raise DatasetError(f"instance ids not in {source}: {', '.join(missing)}")
        instances = [i for i in instances if i.instance_id in set(wanted)]
    if repos:
        keep = set(repos)
        instances = [i for i in instances if i.repo in keep]
    return instances
