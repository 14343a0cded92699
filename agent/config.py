"""Run configuration: one typed tree (llm, budget, search, agent, runs, runtime) loaded from YAML/TOML plus `section.field=value` overrides.

Every value is checked against its declared type, so a bad file fails before a run starts, with the dotted field name
and what was expected (a run that dies half-way on a typo wastes an instance's budget).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pinpoint.agent.llm_config import LLMConfig
from pinpoint.environments import paths
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.environments.settings import ConfigError, build_settings

__all__ = ["Config", "ConfigError", "load_config"]


#: one repair attempt's budget: the agent's run and an RL episode alike
MAX_STEPS = 30
MAX_WALL_S = 1800.0


@dataclass
class BudgetSection:
    """Limits that end a run cleanly with the best patch so far."""

    max_steps: int = MAX_STEPS
    max_tokens: int = 400_000
    max_cost_usd: float = 3.0
    max_wall_s: float = MAX_WALL_S


@dataclass
class SearchSection:
    """Search policies run after a failing test: FLARE top-k refinement and/or BESTER best-first search."""

    #: "candidates" runs edit candidates at the top-k suspect lines (test runs only, no model call) before the
    #: model's revisions are bought
    policy: Literal["none", "candidates", "flare", "bester", "flare+bester", "candidates+flare",
                    "candidates+bester", "candidates+flare+bester"] = "candidates+flare"
    #: edit candidates: test runs and seconds at most, how many of them are pairs of edits, how many plausible
    #: patches to collect before choosing (the smallest, then the likeliest to the embedded model), and their order
    #: ("likelihood" scores every candidate with the embedded model first: about a minute per function on 2 CPUs,
    #: so "rank" by default: suspect rank, then the edit kind)
    candidate_runs: int = 200
    candidate_seconds: float = 300.0
    candidate_pairs: int = 20
    plausible: int = 3
    candidate_order: Literal["rank", "likelihood"] = "rank"
    #: FLARE: candidates per round (one per top-k suspicious line) and rounds
    k: int = 10
    rounds: int = 5
    #: BESTER: self-reflections (= repairs) per node and search depth
    reflections: int = 5
    depth: int = 2
    #: lines of context around a suspicious line shown when asking for a revision
    context_lines: int = 12
    #: how many times the graph may enter the search step in one run
    max_searches: int = 1


@dataclass
class AgentSection:
    """How the graph behaves."""

    test_timeout_s: float = 600.0
    #: the test command's first run on HEAD (fix's preflight): a suite not finished by then is taken as hanging (an
    #: infinite loop is a failing test); later runs are bounded by a few times what that run took (`hang_bound`)
    first_test_timeout_s: float = 120.0
    review_on_submit: bool = True
    relocalize_on_failure: bool = True
    #: suspects quoted in the localization prompt
    show_suspects: int = 8
    #: files (top-ranked by the other signals) whose source is given to code-reading signals
    localize_files: int = 3
    #: add the FLARE diagnostic model as a localization signal (off by default: it scores code with a local copy of
    #: SmolLM2 on the CPU, minutes per large file on 2 cores, which would sit inside every episode)
    diagnostic: bool = False
    #: add repair likelihood as a signal: the diagnostic model's top lines ranked by how much their best one-edit
    #: repair makes their function more probable (off by default: ~75 LLM scorings per 10 lines, on top of the model)
    repair: bool = False
    #: trace the failing tests (coverage spectrum, then LDB block states of the top functions) when there are
    #: some: the task's pytest test command (`fix --test-cmd`), or the oracle's; the `spectrum` and `ldb` signals
    execution: bool = True
    #: also ask the LLM for LDB's verdict (correct / wrong, and why) on each block of the top traced function's
    #: failing run, one query for all blocks: signal `ldb_llm` (off by default: the embedded model's verdicts are
    #: noise; the LLM-free `ldb` value spectrum runs either way)
    ldb_llm: bool = False
    #: targeted mutation-based localization (Metallaxis and MUSE) at the spectrum's top lines, run in the box after
    #: the spectrum: it splits the spectrum's tied lines and is fused as the `mbfl` signal at half weight
    #: (docs/localization.md, "Choosing the fusion": the variant chosen leave one repository out on 32 dev rows of
    #: requests, flask, pytest and sympy)
    mbfl: bool = True
    #: predicate switching at the branches of the spectrum's top functions, fused as the `predicates` signal with
    #: only the switches that made a failing test pass, those that made half of them pass leading the top file
    #: (the same choice; held out, the choice procedure gives line Hit@10 0.25 and file Acc@1 0.47-0.53, and
    #: switching adds a row or two beside MBFL's half-weight member); its suspects are recorded in the trajectory
    predicates: bool = True
    #: insertion points (lines where code may be missing) splitting the spectrum's ties after MBFL (off: on 21 dev
    #: rows it moved function Acc@5 up and line Hit@1 down by a row each; the points are recorded in the trajectory
    #: either way)
    insertion: bool = False
    #: seconds for each traced test run (a slow suite is cut there, never waited on)
    execution_budget_s: float = 300.0
    #: after `view`, ask the model for a script that shows the issue and run it on the base commit; a failing one
    #: feeds localization its traceback (off by default: the embedded model cannot write one; turn it on with a
    #: capable model). It runs outside the repository, so it never enters the patch
    reproduce: bool = False
    reproduce_timeout_s: float = 120.0
    #: SWE-bench only, for localization benchmarks and RL training: the instance's FAIL_TO_PASS tests (its test
    #: patch applied while they are traced, then removed) as the failing tests. Off in a real run: the official
    #: setting hides the tests
    oracle_tests: bool = False
    #: tool observations longer than this are truncated (the tools also truncate)
    max_observation_chars: int = 12_000
    #: how the signals' suspects become one list: reciprocal rank, or the learned ranker over per-line features
    #: (localization/learned_fusion.py; it did not beat reciprocal rank on held-out rows, docs/localization.md)
    fusion: Literal["rrf", "learned"] = "rrf"


@dataclass
class RunsSection:
    """Where results go: `<output_dir>/<run_id>/<model>/` (swebench_eval.layout)."""

    #: the runs root; default $PINPOINT_RUNS, else runs/ in the working directory
    output_dir: str = field(default_factory=lambda: str(paths.runs_dir()))
    #: empty: the command's own (the dataset's name for run/batch, the tasks file's for batch --tasks, fix, demo)
    run_id: str = ""


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    budget: BudgetSection = field(default_factory=BudgetSection)
    search: SearchSection = field(default_factory=SearchSection)
    agent: AgentSection = field(default_factory=AgentSection)
    runs: RunsSection = field(default_factory=RunsSection)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _parse_scalar(text: str) -> Any:
    """`--set a.b=VALUE`: VALUE is read as YAML (so 3, 0.5, true, null, "x" work)."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override value {text!r} is not a YAML scalar ({exc})") from None


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _nest(dotted: dict[str, Any]) -> dict:
    data: dict = {}
    for key, value in dotted.items():
        section, _, name = key.partition(".")
        data = _deep_merge(data, {section: {name: value}})
    return data


def user_config_path() -> Path:
    """The user's own settings, `$XDG_CONFIG_HOME/pinpoint/config.yaml` (XDG: unset, empty or relative means
    ~/.config), read below the environment and `--config` so one machine's endpoint need not be repeated."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "pinpoint" / "config.yaml"


def read_config_file(path: str | Path) -> dict:
    """A YAML or TOML file of sections, as a dict; an unreadable or malformed one is a ConfigError naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        loaded = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {exc}") from exc
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"config file {path}: expected a mapping of sections at the top level")
    return loaded or {}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                defaults: dict[str, Any] | None = None, *, user_file: str | Path | None = None,
                environment: dict[str, Any] | None = None, **fields: Any) -> Config:
    """Built-in defaults <- `defaults` (a command's own, {"section.field": value}) <- `user_file` (when it exists)
    <- `environment` ({"section.field": value} from variables) <- file (YAML or TOML) <- `overrides`
    ("section.field=value") <- `fields` ({"section.field": value}; None values are ignored)."""
    data = _nest(defaults or {})
    if user_file is not None and Path(user_file).is_file():
        data = _deep_merge(data, read_config_file(user_file))
    data = _deep_merge(data, _nest(environment or {}))
    if path is not None:
        data = _deep_merge(data, read_config_file(path))
    pairs: list[tuple[str, Any]] = []
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"override {item!r}: expected section.field=value (e.g. budget.max_steps=10)")
        pairs.append((key.strip(), _parse_scalar(raw)))
    pairs.extend((k, v) for k, v in fields.items() if v is not None)
    for key, value in pairs:
        data = _deep_merge(data, _nest({key: value}))
    return build_settings(Config, data)


#: llm fields that change how a run reaches the model (a server restarted on another port), never what it answers
#: (the model is named apart): left out of a run's identity
TRANSPORT_FIELDS = ("base_url", "api_key_env", "timeout_s", "max_retries", "retry_backoff_s")


def answer_settings(config: Config) -> dict:
    """The part of `config` that shapes a run's answer (model, endpoint, budgets, search, agent, runtime): what a
    run's identity hashes; where results go (`runs`) and how the model is reached are left out."""
    settings = config.to_dict()
    settings.pop("runs", None)
    for name in TRANSPORT_FIELDS:
        settings["llm"].pop(name, None)
    return settings
