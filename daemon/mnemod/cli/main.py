"""`mnemod` command line: parse, set up logging, run one command, map errors to exit codes.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mnemod import __version__
from mnemod.cli import entries, maintenance, ops, resolve_cmds, run_cmd
from mnemod.cli.context import Context
from mnemod.errors import MnemodError
from mnemod.runtime.logs import configure_logging

Registrar = Callable[[Any, argparse.ArgumentParser], None]
COMMAND_GROUPS: list[Registrar] = [
    entries.register,
    maintenance.register,
    resolve_cmds.register,
    ops.register,
    run_cmd.register,
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"mnemod: {message} (see {self.prog} --help)\n")


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--namespace", "-n", default="default", help="namespace (default: default)")
    common.add_argument("--data-dir", help="data folder (default: $MNEMOD_DATA_DIR or ./.mnemod)")
    common.add_argument("--redis-url", help="Redis URL (default: config, or the embedded server)")
    common.add_argument("--config", "-c", help="TOML config file")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mnemod", description="Memory maintenance daemon for LLM agents.")
    parser.add_argument("--version", action="version", version=f"mnemod {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    common = common_options()
    for register in COMMAND_GROUPS:
        register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        ctx = Context.from_args(args)
        level = ctx.config.log.level
        if args.command != "run" and level in ("debug", "info"):
            level = "warning"  # one-shot commands speak through their output, not logs
        configure_logging(level, ctx.config.log.format)
        code: int = args.handler(ctx)
    except MnemodError as exc:
        sys.stderr.write(f"mnemod: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
