"""Examples for the diagnostic model: a program's units, their confidences, the first buggy unit and gold lines.

`build_examples` turns held-out sets and training pools (see `corpora`) into examples, scoring every program with the
local scorer (cached), after its description where it has one. Synthetic bugs are scored incrementally from their
correct base (`LocalScorer.score_mutants`) and keep the base's description.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import pickle
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from pinpoint.localization.confidence import TokenLogprob, program_confidences
from pinpoint.localization.mutations import mutants
from pinpoint.localization.scorer import description_prefix
from pinpoint.localization.units import Unit, lexical_units

from pinpoint_lab.localization import corpora
from pinpoint_lab.localization.corpora import Program


@dataclass
class Example:
    """`target` is the index of the first buggy unit (-1 when the program has none, e.g. a correct program)."""

    id: str
    group: str
    source: str
    code: str
    units: list[Unit]
    confidences: dict[str, list[float | None]]
    target: int
    gold_lines: tuple[int, ...]
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DataConfig:
    """Which programs go into training, sized for CPU scoring; every choice is deterministic under `seed`."""

    seed: int = 0
    mutants_per_base: int = 10
    max_chars: int = 2400
    #: counts per pool (a count above the pool's size takes all of it); ~3 h of scoring on one idle core
    bigcodebench_bases: int = 1000
    livecodebench_bases: int = 1000
    debugbench: int = 1100
    condefects_train: int = 2100
    #: functions of the offline repositories (`corpora.repository_functions`) as bases; 0 keeps the shipped recipe
    repository_bases: int = 0
    #: the validation split takes this fraction of each training count
    val_fraction: float = 0.25
    condefects_test: int = 120
    #: also train on each described program read without its description (users do not always give one)
    undescribed_twins: bool = True


def first_buggy_unit(units: Sequence[Unit], code: str, fixed: str | None, gold_lines: Iterable[int]) -> int:
    """The first unit that differs from the fix and lies on a gold line; else the first unit on a gold line."""
    gold = set(gold_lines)
    if fixed is not None:
        fixed_units = lexical_units(fixed)
        matcher = difflib.SequenceMatcher(None, [u.text for u in units], [u.text for u in fixed_units], autojunk=False)
        for tag, i1, _, _, _ in matcher.get_opcodes():
            if tag != "equal" and i1 < len(units) and units[i1].line in gold:
                return i1
    return next((i for i, u in enumerate(units) if u.line in gold and u.type != "comment"), -1)


def example_from(program: Program, tokens: list[TokenLogprob], target: int | None = None,
                 undescribed: list[TokenLogprob] | None = None) -> Example:
    """`tokens` read after the program's description; `undescribed`, the same code read without it."""
    units = lexical_units(program.code)
    confidences = program_confidences(units, program.code, tokens, undescribed)
    if target is None:
        target = first_buggy_unit(units, program.code, program.fixed_code, program.buggy_lines)
    return Example(program.id, program.group, program.source, program.code, units, confidences, target,
                   program.buggy_lines, dict(program.meta))


def mutant_programs(base: Program, count: int, seed: int) -> list[tuple[Program, int, int]]:
    """Synthetic bugs of `base`: (program, bug start, bug end) with the bug's line as gold."""
    out = []
    for k, m in enumerate(mutants(base.code, count, seed=seed)):
        end_line = m.code.count("\n", 0, max(m.bug_start, m.bug_end - 1)) + 1
        program = Program(id=f"{base.id}/mut{k}", group=base.group, source=f"synthetic/{base.source}", code=m.code,
                          buggy_lines=tuple(range(m.bug_line, end_line + 1)), meta={"operator": m.operator},
                          description=base.description)
        out.append((program, m.bug_start, m.bug_end))
    return out


def _short(programs: list[Program], cfg: DataConfig) -> list[Program]:
    return [p for p in programs if 0 < len(p.code) <= cfg.max_chars and p.code.strip()]


def _sample(programs: list[Program], n: int, seed: int) -> list[Program]:
    programs = sorted(programs, key=lambda p: p.id)
    random.Random(seed).shuffle(programs)
    return programs[:n]


def evaluation_programs(name: str, cfg: DataConfig = DataConfig()) -> list[Program]:
    """A held-out set by name: `humanevalfix` (code alone), `humanevalfix_docs` (code and its docstring, as
    HumanEvalPack's HumanEvalFixDocs gives it), `pdb_multi`, `condefects` (its test split) or `swebench` (the
    functions SWE-bench Verified's fixes change, each read after its issue's text)."""
    if name == "humanevalfix":
        return [replace(p, description="") for p in corpora.humanevalfix()]
    if name == "humanevalfix_docs":
        return corpora.humanevalfix()
    if name == "pdb_multi":  # BigCodeBench bugs first, then LiveCodeBench shortest first (a --limit keeps both)
        return sorted(corpora.pdb_multi(), key=lambda p: (p.group.startswith("livecodebench/"), len(p.code), p.id))
    if name == "condefects":
        return _sample(_short(list(corpora.iter_split(corpora.condefects(), "test")), cfg), cfg.condefects_test, cfg.seed)
    if name == "swebench":
        return corpora.swebench_functions()
    raise ValueError(f"unknown evaluation set {name!r}; choose one of {EVALUATION_SETS}")


EVALUATION_SETS = ("humanevalfix", "humanevalfix_docs", "pdb_multi", "condefects", "swebench")


def training_programs(split: str, cfg: DataConfig = DataConfig()) -> tuple[list[Program], list[Program]]:
    """(correct bases to mutate, real buggy programs) of one split ('train' or 'val')."""
    scale = 1.0 if split == "train" else cfg.val_fraction

    def pick(programs: list[Program], n: int) -> list[Program]:
        return _sample(_short(list(corpora.iter_split(programs, split)), cfg), int(n * scale), cfg.seed)

    bases = pick(corpora.bigcodebench_solutions(), cfg.bigcodebench_bases)
    bases += pick(corpora.livecodebench_solutions(), cfg.livecodebench_bases)
    if cfg.repository_bases:
        bases += pick(corpora.repository_functions(), cfg.repository_bases)
    real = pick(corpora.debugbench(), cfg.debugbench) + pick(corpora.condefects(), cfg.condefects_train)
    if cfg.undescribed_twins:
        bases += [replace(p, description="") for p in bases if p.description]
        real += [replace(p, description="") for p in real if p.description]
    return bases, real


def build_examples(
    programs: Sequence[Program], scorer, progress: Callable[[str], None] | None = None, cached_only: bool = False
) -> list[Example]:
    """Score (cached) and turn real programs into examples; `cached_only` skips programs not scored yet."""
    out = []
    for i, program in enumerate(programs):
        prefix = description_prefix(program.description)
        if cached_only and not all(scorer.is_cached(program.code, p) for p in {prefix, ""}):
            continue
        undescribed = scorer.score(program.code) if prefix else None
        out.append(example_from(program, scorer.score(program.code, prefix), undescribed=undescribed))
        if progress and (i + 1) % 20 == 0:
            progress(f"{i + 1}/{len(programs)} programs")
    return out


def build_synthetic(
    bases: Sequence[Program], scorer, cfg: DataConfig, progress: Callable[[str], None] | None = None,
    cached_only: bool = False,
) -> list[Example]:
    """Mutate each base, score the mutants incrementally from the base, target the first unit of each bug.

    Each base's mutants are seeded from its id, so they (and their cached scores) do not depend on which other bases
    are in the list."""
    out = []
    for i, base in enumerate(bases):
        seed = int(hashlib.sha256(f"{cfg.seed}\0{base.id}".encode()).hexdigest()[:8], 16)
        muts = mutant_programs(base, cfg.mutants_per_base, seed=seed)
        prefix = description_prefix(base.description)
        if cached_only:
            muts = [m for m in muts if all(scorer.is_cached(scorer.mutant_key(base.code, m[0].code), p)
                                           for p in {prefix, ""})]
        if not muts:
            continue
        codes = [p.code for p, _, _ in muts]
        token_lists = scorer.score_mutants(base.code, codes, prefix=prefix)
        undescribed = scorer.score_mutants(base.code, codes) if prefix else [None] * len(muts)
        for (program, start, end), tokens, plain in zip(muts, token_lists, undescribed, strict=True):
            units = lexical_units(program.code)
            target = next((k for k, u in enumerate(units) if u.end > start and (u.start < end or start == end)), -1)
            out.append(example_from(program, tokens, target, plain))
        if progress and (i + 1) % 20 == 0:
            progress(f"{i + 1}/{len(bases)} bases")
    return out


EXAMPLES_FORMAT = "pinpoint-examples/1"


def save_examples(path: Path, splits: dict[str, list[Example]], cfg: DataConfig) -> None:
    """Write scored examples (gzipped pickle) so another machine, e.g. one with a GPU, trains without the LLM."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wb") as f:
        pickle.dump({"format": EXAMPLES_FORMAT, "data_config": asdict(cfg), "splits": splits}, f)
    tmp.replace(path)


def load_examples(path: Path) -> dict:
    """What `save_examples` wrote: {"data_config": ..., "splits": {"train": [...], "val": [...]}}.

    Pickle runs code from the file: load only files you wrote."""
    try:
        with gzip.open(Path(path), "rb") as f:
            blob = pickle.load(f)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"no examples at {path}; write them with `pinpoint-lab train diagnostic --save-examples`") from exc
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError) as exc:
        raise ValueError(f"{path} is not a pinpoint examples file ({exc})") from exc
    if not isinstance(blob, dict) or blob.get("format") != EXAMPLES_FORMAT:
        raise ValueError(f"{path} is not a pinpoint examples file")
    return blob
