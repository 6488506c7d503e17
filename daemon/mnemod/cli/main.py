"""`mnemod` command line: parse, set up logging, run one command, map errors to exit codes.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad input. An error is one line on
stderr, `mnemod: what: reason`; with `--json` it is one JSON object on stderr instead,
`{"ok": false, "error": "what: reason", "code": 2}` (stdout stays the command's output).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from mnemod import __version__
from mnemod.cli import entries, hook_cmd, maintenance, ops, resolve_cmds, run_cmd
from mnemod.cli.context import Context
from mnemod.cli.progress import AroundBars
from mnemod.cli.terminal import for_stream, is_terminal
from mnemod.errors import MnemodError, UsageError
from mnemod.runtime.logs import configure_logging

Registrar = Callable[[Any, argparse.ArgumentParser], None]
COMMAND_GROUPS: list[Registrar] = [
    entries.register,
    maintenance.register,
    resolve_cmds.register,
    hook_cmd.register,
    ops.register,
    run_cmd.register,
]

EPILOG = (
    "Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad input. "
    "`mnemod COMMAND --help` describes each command."
)


class _Parser(argparse.ArgumentParser):
    """Usage errors are raised, so that `main` reports them like every other error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


class _Namespaces(argparse.Action):
    """`--namespace` as every command takes it (the last one given), and for `run` all of
    them, each of which may be a comma list, in `namespaces` (None when none was given)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = str(values)
        setattr(namespace, self.dest, text)
        given = getattr(namespace, "namespaces", None) or []
        namespace.namespaces = [*given, *text.split(",")]


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--namespace",
        "-n",
        default="default",
        action=_Namespaces,
        metavar="NS",
        help="namespace: 1-64 letters, digits, _ . - (default: default); `run` takes several "
        "(repeated or a,b) and * for every one found (default: daemon.namespaces)",
    )
    common.add_argument(
        "--data-dir", metavar="DIR", help="data folder (default: $MNEMOD_DATA_DIR, else ./.mnemod)"
    )
    common.add_argument(
        "--redis-url",
        metavar="URL",
        help="redis://, rediss:// or unix:// URL (default: redis.url, else the embedded server)",
    )
    common.add_argument(
        "--config", "-c", metavar="FILE", help="TOML config file (default: none, all defaults)"
    )
    common.add_argument(
        "--json",
        action="store_true",
        help="JSON output; errors as JSON objects on stderr (default: text)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mnemod", description="Memory maintenance daemon for LLM agents.", epilog=EPILOG
    )
    parser.add_argument("--version", action="version", version=f"mnemod {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    common = common_options()
    for register in COMMAND_GROUPS:
        register(sub, common)
    for name, command in sub.choices.items():
        # the help line of `mnemod --help` is also the description of `mnemod NAME --help`
        if command.description is None:
            command.description = _sentence(_help_of(sub, name))
    return parser


def _help_of(sub: Any, name: str) -> str:
    for action in sub._choices_actions:
        if action.dest == name:
            return str(action.help or "")
    return ""


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}." if text else text


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if hook_cmd.is_agent_hook(words):  # run by an agent: never an exit code that blocks it
        return hook_cmd.run_agent_hook(words[1:])
    as_json = "--json" in words[: words.index("--")] if "--" in words else "--json" in words
    try:
        args = build_parser().parse_args(words)
        ctx = Context.from_args(args)
        level = ctx.config.log.level
        if args.command != "run" and level in ("debug", "info"):
            level = "warning"  # one-shot commands speak through their output, not logs
        stream = AroundBars(sys.stderr) if is_terminal(sys.stderr) else None
        configure_logging(level, ctx.config.log.format, stream)
        code: int = args.handler(ctx)
    except MnemodError as exc:
        return report_error(str(exc), exc.exit_code, as_json)
    except OSError as exc:  # a file the command needed, not named by a narrower error
        where = f"{exc.filename}: " if exc.filename else ""
        return report_error(f"{where}{exc.strerror or exc}", 1, as_json)
    except KeyboardInterrupt:
        return 130
    return code


def report_error(message: str, code: int, as_json: bool) -> int:
    """One line on stderr: text, or with --json a JSON object."""
    if as_json:
        line = json.dumps({"ok": False, "error": message, "code": code}, ensure_ascii=False)
    else:
        line = for_stream(sys.stderr, f"mnemod: {message}")
    sys.stderr.write(line + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
