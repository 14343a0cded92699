"""`pinpoint config init | show`: the user config file (XDG), and the settings a command would run with.

A team member sets the endpoint once per machine (`config init`, then edit) instead of on every command;
`config show` answers "which endpoint, model and budgets will `fix` use here, and where did each come from".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from pinpoint.agent.commands import ENV_SETTINGS, _config_args, config_from_args
from pinpoint.agent.config import read_config_file, user_config_path
from pinpoint.agent.llm_config import LLMConfig
from pinpoint.environments.cli import add_command, subcommand_group
from pinpoint.environments.errors import UsageError

#: what `config init` writes: every line a comment, so the file changes nothing until one is uncommented
TEMPLATE = """\
# pinpoint user config (YAML). Read by every agent command, lowest first: built-in defaults < this file <
# environment (OPENAI_BASE_URL, PINPOINT_MODEL) < --config FILE < --set section.field=value < flags.
# `pinpoint config show` prints the result. Sections and fields: docs/agent.md, "Configuration".
#
# llm:
#   base_url: http://localhost:8000/v1     # any OpenAI-compatible server; null: the embedded SmolLM2
#   model: Qwen2.5-Coder-32B-Instruct
#   api_key_env: OPENAI_API_KEY            # the NAME of the variable holding the key, never the key
#   timeout_s: 120
#   price_per_mtok_in: 0.15                # USD per million tokens; known models have built-in prices
#   price_per_mtok_out: 0.60
# budget:
#   max_steps: 30
#   max_cost_usd: 2.0
# search:
#   policy: flare+bester
# runs:
#   output_dir: ~/pinpoint-runs
"""


def _cmd_init(args: argparse.Namespace) -> int:
    path = user_config_path()
    if path.exists() and not args.force:
        raise UsageError(f"{path} exists; edit it, or --force to overwrite it with the template")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TEMPLATE)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path} (every line commented: uncomment what this machine needs)")
    return 0


def _sources(args: argparse.Namespace) -> list[str]:
    """Where the settings come from, lowest first, for stderr."""
    path = user_config_path()
    if path.is_file():
        read_config_file(path)  # a malformed user file is named here, as a one-line error
    lines = [f"user config: {path} ({'read' if path.is_file() else 'none'})"]
    lines += [f"environment: {var} -> {key}" for var, key in ENV_SETTINGS.items() if os.environ.get(var)]
    if args.config:
        lines.append(f"--config: {args.config}")
    lines += [f"--set: {item}" for item in args.overrides]
    return lines


def _run_model(llm: LLMConfig) -> tuple[LLMConfig, str | None]:
    """The model a run would use and where it comes from: with an endpoint and no model named, a run takes the
    server's first model (the embedded model's name would be wrong), so the server is asked the same way."""
    from pinpoint.agent.preflight import DEFAULT_MODEL, PreflightError, check_endpoint

    if llm.base_url is None or llm.model != DEFAULT_MODEL:
        return llm, None
    try:
        served = check_endpoint(llm)
    except PreflightError as exc:
        unknown = f"(the first model {llm.base_url} lists: not known now)"
        return dataclasses.replace(llm, model=unknown), f"llm.model: none named, and {exc}"
    if served.model == DEFAULT_MODEL:
        return llm, f"llm.model: none named and {llm.base_url} lists none; a run sends {DEFAULT_MODEL}"
    return served, f"llm.model: none named, so the first model {llm.base_url} lists"


def _cmd_show(args: argparse.Namespace) -> int:
    import yaml

    sources = _sources(args)
    config = config_from_args(args)
    config.llm, model_source = _run_model(config.llm)
    for line in [*sources, model_source] if model_source else sources:
        print(f"pinpoint config: {line}", file=sys.stderr)
    print(yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subcommand_group(subparsers, "config", "the user config file and the effective settings",
                             "pinpoint config init\npinpoint config show")
    init = add_command(group, "init", "write a commented template to $XDG_CONFIG_HOME/pinpoint/config.yaml "
                       "(default ~/.config/pinpoint/config.yaml)", "pinpoint config init\npinpoint config init --force")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=_cmd_init)
    show = add_command(group, "show", "print the settings an agent command would use (YAML on stdout, where "
                       "they came from on stderr)", "pinpoint config show\n"
                       "pinpoint config show --config team.yaml --set budget.max_steps=20")
    _config_args(show, results=())
    show.set_defaults(func=_cmd_show)
