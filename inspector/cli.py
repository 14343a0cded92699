"""`pinpoint inspect [PATH] [--port N] [--export FILE.html]`: arguments and prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from pinpoint.environments import paths
from pinpoint.environments.cli import add_command
from pinpoint.environments.errors import UsageError


def _cmd_inspect(args: argparse.Namespace) -> int:
    from pinpoint.inspector.index import check_path, export_data
    from pinpoint.inspector.page import render_page
    from pinpoint.inspector.server import make_server

    if not 0 <= args.port <= 65535:  # the socket layer would raise OverflowError, not OSError
        raise UsageError(f"--port {args.port}: a port is 0 (a free one) to 65535")
    path = Path(args.path) if args.path else paths.runs_dir()
    found = check_path(path)
    if args.export:
        out = Path(args.export)
        if not out.parent.is_dir():
            raise UsageError(f"cannot write {out}: folder {out.parent} does not exist")
        out.write_text(render_page(export_data(path)), encoding="utf-8")
        print(f"pinpoint inspect: wrote {out} ({out.stat().st_size // 1024} KiB, self-contained: open it in any "
              "browser)")
        return 0
    try:
        server = make_server(found, args.port)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"cannot listen on 127.0.0.1:{args.port}: {reason}") from None
    port = server.server_address[1]
    print(f"pinpoint inspect: http://127.0.0.1:{port}/  (following {path}; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    inspect = add_command(subparsers, "inspect", "web inspector: trajectories, localization, search, verdicts, "
                          "batches and RL datasets in a browser",
                          "pinpoint inspect\npinpoint inspect runs/fix --port 8080\n"
                          "pinpoint inspect runs/fix/default/trajectory.json --export fix.html\n"
                          "pinpoint inspect rollouts.jsonl")
    inspect.add_argument("path", nargs="?", help="a trajectory, a run folder, a runs root or an RL dataset "
                         "(default: the runs root)")
    inspect.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    inspect.add_argument("--export", metavar="FILE.html", help="write one self-contained page instead of serving")
    inspect.set_defaults(func=_cmd_inspect)
