"""`mnemod hook install claude-code`: merge the hook into a Claude Code settings file.

The command is an absolute path to this installation's `mnemod` (Claude Code runs hooks
with its own PATH, where a venv's bin is not), so it works from any folder. The merge
keeps every other setting and hook as it was; our entry is recognised by its command
(`… mnemod … hook claude-code …`) and updated in place, so a second run changes nothing.
A settings file that is not valid JSON is refused, never overwritten.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from mnemod.cli.context import Context
from mnemod.cli.hook_cmd import DEFAULT_DEADLINE
from mnemod.errors import CorruptFileError, InvalidInputError
from mnemod.files.atomic import atomic_write_text

EVENT = "UserPromptSubmit"


def settings_path(scope: str, explicit: str | None, home: Path, workdir: Path) -> Path:
    if explicit:
        return Path(explicit).absolute()
    if scope == "user":
        return home / ".claude" / "settings.json"
    name = "settings.local.json" if scope == "local" else "settings.json"
    return workdir / ".claude" / name


def mnemod_executable() -> list[str]:
    """This installation's `mnemod`, absolute: the script that runs now, else the one beside
    the interpreter (a venv's bin), else the interpreter with `-m`. Symlinks are kept (a
    pipx link or a venv's python stays the stable name)."""
    running = Path(sys.argv[0])
    if running.name == "mnemod" and _executable(running):
        return [str(running.absolute())]
    beside = Path(sys.executable).parent / "mnemod"
    if _executable(beside):
        return [str(beside.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "mnemod.cli.main"]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def hook_command(ctx: Context) -> str:
    a = ctx.args
    words = [*mnemod_executable(), "hook", "claude-code"]
    if a.data_dir:
        words += ["--data-dir", str(Path(a.data_dir).absolute())]
    if a.namespace != "default":
        words += ["--namespace", a.namespace]
    if a.config:
        words += ["--config", str(Path(a.config).absolute())]
    if a.redis_url:
        words += ["--redis-url", a.redis_url]
    if a.l1_dir:
        words += ["--l1-dir", str(Path(a.l1_dir).absolute())]
    if a.budget is not None:
        words += ["--budget", str(a.budget)]
    if a.deadline is not None:
        words += ["--deadline", f"{a.deadline:g}"]
    return shlex.join(words)


def is_mnemod_hook(hook: Any) -> bool:
    """An entry that runs some mnemod's `hook claude-code`."""
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return False
    try:
        words = shlex.split(hook["command"])
    except ValueError:
        return False
    runs_mnemod = any(Path(w).name == "mnemod" or w == "mnemod.cli.main" for w in words)
    return runs_mnemod and ("hook", "claude-code") in itertools.pairwise(words)


def merge(settings: dict[str, Any], command: str, timeout: float, where: str) -> dict[str, Any]:
    """`settings` with our UserPromptSubmit entry added, or updated where it already is."""
    merged = copy.deepcopy(settings)
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise CorruptFileError(Path(where), "`hooks` is not a JSON object")
    groups = hooks.setdefault(EVENT, [])
    if not isinstance(groups, list):
        raise CorruptFileError(Path(where), f"`hooks.{EVENT}` is not a JSON list")
    entry = {"type": "command", "command": command, "timeout": _number(timeout)}
    found = False
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        for index, hook in enumerate(inner):
            if is_mnemod_hook(hook):
                inner[index] = {**hook, **entry}
                found = True
    if not found:
        groups.append({"hooks": [entry]})
    return merged


def _number(seconds: float) -> int | float:
    return int(seconds) if float(seconds).is_integer() else seconds


def read_settings(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 (byte {exc.start}); left as it is") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(path, f"not valid JSON ({exc}); left as it is", exc.lineno) from None
    if not isinstance(data, dict):
        raise CorruptFileError(path, "not a JSON object; left as it is")
    return data


def run_install(ctx: Context) -> int:
    a = ctx.args
    deadline = a.deadline if a.deadline is not None else DEFAULT_DEADLINE
    if a.timeout <= deadline:
        raise InvalidInputError(
            "--timeout", f"{a.timeout:g} s must exceed the hook's deadline ({deadline:g} s)"
        )
    path = settings_path(a.scope, a.settings, Path.home(), Path.cwd())
    before = read_settings(path)
    command = hook_command(ctx)
    after = merge(before, command, a.timeout, str(path))
    text = json.dumps(after, indent=2, ensure_ascii=False) + "\n"
    payload = {"settings": str(path), "command": command, "changed": after != before}
    if a.dry_run:
        ctx.emit({**payload, "written": False, "content": after}, text.rstrip("\n"))
        if not ctx.as_json:
            sys.stderr.write(f"mnemod: dry run, {path} not written\n")
        return 0
    if after != before:
        mode = path.stat().st_mode & 0o7777 if path.exists() else None
        atomic_write_text(path, text)
        if mode is not None:
            path.chmod(mode)
    done = "added to" if after != before else "already in"
    lines = [f"{EVENT} hook {done} {path}:", f"  {command}"]
    project = a.scope in ("project", "local") and not a.settings
    if project and not a.data_dir and not (Path.cwd() / ".mnemod").is_dir():
        lines.append(
            "  (no .mnemod/ here yet: the hook gives context once there is one; "
            "`mnemod add` or `mnemod run` makes it)"
        )
    ctx.emit({**payload, "written": after != before}, "\n".join(lines))
    return 0
