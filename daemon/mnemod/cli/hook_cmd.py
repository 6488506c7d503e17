"""`mnemod hook claude-code` (run by Claude Code on every prompt) and
`mnemod hook install claude-code` (run by a person, once).

The hook has its own argument parser and error handling: whatever goes wrong — a bad flag,
a bad config, an unknown agent, a data folder it cannot read, a daemon that does not
answer — it says so in one line on stderr and exits 0, because Claude Code blocks and
erases the prompt on exit code 2 (cli/claude_hook.py does the work).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from mnemod.errors import MnemodError

AGENTS = ("claude-code",)
DEFAULT_DEADLINE = 5.0
"""Seconds the hook allows itself; below the `timeout` (10 s) that `hook install` writes."""


def is_agent_hook(argv: Sequence[str]) -> bool:
    """`mnemod hook <anything but install or --help>`: the call an agent makes."""
    return bool(argv) and argv[0] == "hook" and argv[1:2] not in (["install"], ["-h"], ["--help"])


# ---- options ------------------------------------------------------------------------------------
def _budget(text: str) -> int:
    from mnemod.redisio.rpc import MAX_BUDGET  # with redis: not for every command's parser

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if not 1 <= value <= MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"{value} is outside 1–{MAX_BUDGET}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.1 <= value <= 600:
        raise argparse.ArgumentTypeError(f"{value:g} is outside 0.1–600 seconds")
    return value


def add_hook_options(parser: argparse.ArgumentParser) -> None:
    """The options of `hook claude-code`, which `hook install` writes into the command too."""
    parser.add_argument(
        "--budget",
        type=_budget,
        metavar="TOKENS",
        help="most tokens of context per prompt, 1–1000000 (default: resolve.default_budget, 1000)",
    )
    parser.add_argument(
        "--deadline",
        type=_seconds,
        metavar="SECONDS",
        help=f"answer within this many seconds, with the L1 files alone if need be; keep it "
        f"below the hook's timeout in settings.json (default: {DEFAULT_DEADLINE:g})",
    )
    parser.add_argument(
        "--namespace", "-n", default="default", help="namespace to read (default: default)"
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="data folder (default: $MNEMOD_DATA_DIR, else the nearest .mnemod/ of the "
        "prompt's cwd, of $CLAUDE_PROJECT_DIR, then of the working folder)",
    )
    parser.add_argument(
        "--redis-url", metavar="URL", help="the daemon's Redis (default: config, or embedded)"
    )
    parser.add_argument(
        "--config", "-c", metavar="FILE", help="TOML config file (default: none, the defaults)"
    )
    parser.add_argument(
        "--l1-dir",
        metavar="DIR",
        help="L1 folder for answers without the daemon (default: l1.dir, else DATA_DIR/l1; "
        "the systemd service's is /etc/mnemod/l1)",
    )


CLAUDE_CODE_HELP = "Claude Code UserPromptSubmit hook: the prompt's JSON on stdin, context out"
CLAUDE_CODE_DESCRIPTION = (
    "Run by Claude Code before each prompt: reads the hook's JSON on stdin and prints the "
    "context for the prompt as hookSpecificOutput.additionalContext. Always exits 0: a "
    "problem is one line on stderr and no context, never a blocked prompt. "
    "Set it up with `mnemod hook install claude-code`."
)


class _HookParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        from mnemod.cli.claude_hook import HookProblem

        raise HookProblem(f"{message} (see {self.prog} --help)")


def claude_code_parser() -> argparse.ArgumentParser:
    parser = _HookParser(prog="mnemod hook claude-code", description=CLAUDE_CODE_DESCRIPTION)
    add_hook_options(parser)
    return parser


# ---- the hook ------------------------------------------------------------------------------------
def process_age() -> float:
    """Seconds since this process started (Linux), 0 where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: ticks since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def run_agent_hook(
    argv: Sequence[str],
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """`mnemod hook ARGV...` as an agent runs it: exit 0 whatever happens."""
    started = time.monotonic() - process_age()  # the deadline counts Python's start-up too
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        from mnemod.cli.claude_hook import HookProblem

        if not argv or argv[0].startswith("-"):
            raise HookProblem("name the agent first: mnemod hook claude-code [options]")
        if argv[0] not in AGENTS:
            raise HookProblem(f"unknown agent {argv[0]!r} (known: {', '.join(AGENTS)})")
        args = claude_code_parser().parse_args(list(argv[1:]))
        return _claude_code(args, started, stdin, stdout, stderr)
    except MnemodError as exc:
        stderr.write(f"mnemod hook: {exc}\n")
    except OSError as exc:
        stderr.write(f"mnemod hook: {exc.filename or ''}: {exc.strerror or exc}\n")
    except SystemExit:  # --help printed its text
        pass
    except KeyboardInterrupt:
        stderr.write("mnemod hook: interrupted\n")
    except Exception as exc:  # noqa: BLE001 - a bug in mnemod must not block the prompt
        stderr.write(f"mnemod hook: internal error: {type(exc).__name__}: {exc}\n")
    return 0


def _claude_code(
    args: argparse.Namespace, started: float, stdin: TextIO, stdout: TextIO, stderr: TextIO
) -> int:
    import json

    from mnemod.cli.claude_hook import HookInput, HookProblem, answer, check_usable, find_data_dir
    from mnemod.cli.context import Context
    from mnemod.clock import clock_from_env
    from mnemod.config import load_config
    from mnemod.runtime.logs import configure_logging
    from mnemod.store.paths import check_namespace

    hook = HookInput.parse(stdin.read())
    workdir = Path.cwd()
    folder = find_data_dir(args.data_dir, hook.cwd, os.environ, workdir)
    if folder is None:
        where = hook.cwd or os.environ.get("CLAUDE_PROJECT_DIR") or str(workdir)
        raise HookProblem(f"no .mnemod folder in {where} or its parents: no context")
    check_usable(folder)
    overrides = {"redis": {"url": args.redis_url}, "l1": {"dir": args.l1_dir}}
    config = load_config(args.config, overrides=overrides)
    configure_logging("error", "json", stream=stderr)  # stdout carries the answer alone
    ctx = Context(
        args=args,
        config=config,
        clock=clock_from_env(),
        data_dir=folder,
        namespace=check_namespace(args.namespace),
        as_json=False,
    )
    deadline = started + (args.deadline or DEFAULT_DEADLINE)
    result = answer(ctx, hook, args.budget, deadline)
    if result.note:
        stderr.write(
            f"mnemod hook: {result.note}: answered from the L1 files alone "
            "(a running `mnemod run` answers in milliseconds)\n"
        )
    text = (result.payload or {}).get("text", "")
    if text:
        output = {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": text}
        }
        stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0


# ---- registration in `mnemod --help` and `mnemod hook install` -------------------------------
def register(sub: Any, common: argparse.ArgumentParser) -> None:
    hook = sub.add_parser(
        "hook",
        help="agent hooks: `hook claude-code` (run by Claude Code), `hook install claude-code`",
        description="Hooks that put mnemod's context in front of an agent's prompts.",
    )
    agents = hook.add_subparsers(
        dest="hook_command",
        required=True,
        metavar="COMMAND",
        help="claude-code (run by Claude Code) or install (run once, by you)",
    )
    claude = agents.add_parser(
        "claude-code", help=CLAUDE_CODE_HELP, description=CLAUDE_CODE_DESCRIPTION
    )
    add_hook_options(claude)

    install = agents.add_parser(
        "install",
        parents=[common],
        help="add the hook to Claude Code's settings.json (merged, idempotent)",
        description=(
            "Merge a UserPromptSubmit entry running this mnemod's `hook claude-code` (an "
            "absolute path) into Claude Code's settings, keeping every other setting and "
            "hook; run again, it updates that entry in place. --data-dir, --namespace, "
            "--config, --redis-url, --l1-dir, --budget and --deadline are written into the "
            "command."
        ),
    )
    install.add_argument("agent", choices=AGENTS, help="the agent whose settings to change")
    where = install.add_mutually_exclusive_group()
    where.add_argument(
        "--project",
        dest="scope",
        action="store_const",
        const="project",
        help="./.claude/settings.json, shared with the project (the default)",
    )
    where.add_argument(
        "--local",
        dest="scope",
        action="store_const",
        const="local",
        help="./.claude/settings.local.json: this project, this machine only (not committed; "
        "default: --project)",
    )
    where.add_argument(
        "--user",
        dest="scope",
        action="store_const",
        const="user",
        help="~/.claude/settings.json: every project of this user (default: --project)",
    )
    where.add_argument(
        "--settings", metavar="FILE", help="this settings file instead (default: --project's)"
    )
    install.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="Claude Code's timeout for the hook, above --deadline (default: 10)",
    )
    given = "written into the command (default: not written; the hook's own default)"
    install.add_argument("--budget", type=_budget, metavar="TOKENS", help=given)
    install.add_argument("--deadline", type=_seconds, metavar="SECONDS", help=given)
    install.add_argument("--l1-dir", metavar="DIR", help=given)
    install.add_argument(
        "--dry-run",
        action="store_true",
        help="print the settings it would write; write nothing (default: write)",
    )
    install.set_defaults(handler=cmd_install, scope="project")


def cmd_install(ctx: Any) -> int:
    from mnemod.cli.hook_install import run_install

    return run_install(ctx)
