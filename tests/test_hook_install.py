"""`mnemod hook install claude-code`: the entry merged into Claude Code's settings, with an
absolute command that exists and works from any folder, every other setting kept, the
same file after a second run; a settings file it cannot read is left alone."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli

pytestmark = pytest.mark.process  # the CLI as a real process

MNEMOD = Path(sys.executable).parent / "mnemod"
THEIRS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo hi", "timeout": 3}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}],
    },
}


def install(
    home: Path, workdir: Path, *args: str, expect: int = 0
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOD_", "CLAUDE_"))}
    env["HOME"] = str(home)
    done = subprocess.run(
        [str(MNEMOD), "hook", "install", "claude-code", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == expect, (done.stdout, done.stderr)
    return done


def ours(settings: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        hook
        for group in settings["hooks"]["UserPromptSubmit"]
        for hook in group["hooks"]
        if "hook claude-code" in hook["command"]
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_user_install_merges_and_is_idempotent(tmp_path: Path, home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS, indent=4))
    settings.chmod(0o600)
    install(home, tmp_path, "--user", "--budget", "800")
    merged = json.loads(settings.read_text())
    (entry,) = ours(merged)
    assert entry["type"] == "command" and entry["timeout"] == 10
    program, *rest = shlex.split(entry["command"])
    assert Path(program).is_absolute() and os.access(program, os.X_OK)
    assert rest == ["hook", "claude-code", "--budget", "800"]
    # everything that was there is still there, unchanged
    assert {k: v for k, v in merged.items() if k != "hooks"} == {
        k: v for k, v in THEIRS.items() if k != "hooks"
    }
    assert merged["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    assert merged["hooks"]["UserPromptSubmit"][0] == THEIRS["hooks"]["UserPromptSubmit"][0]
    assert settings.stat().st_mode & 0o777 == 0o600
    written = settings.read_bytes()
    again = install(home, tmp_path, "--user", "--budget", "800")
    assert settings.read_bytes() == written and "already in" in again.stdout
    install(home, tmp_path, "--user", "--budget", "500")  # a new option updates in place
    (entry,) = ours(json.loads(settings.read_text()))
    assert entry["command"].endswith("--budget 500")


def test_project_install_works_from_any_folder(tmp_path: Path, home: Path) -> None:
    """The command written into ./.claude/settings.json, run as Claude Code runs it (a shell
    with Claude Code's PATH, which has no venv in it, in another folder), gives context."""
    project = tmp_path / "project"
    run_cli(project / ".mnemod", "add", "The cat is named Miso")
    done = install(home, project, "--project")
    assert str(project / ".claude" / "settings.json") in done.stdout
    (entry,) = ours(json.loads((project / ".claude" / "settings.json").read_text()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    prompt = {"session_id": "s", "prompt": "my cat?", "cwd": str(project)}
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CLAUDE_PROJECT_DIR": str(project)}
    ran = subprocess.run(
        ["/bin/sh", "-c", entry["command"]],
        cwd=elsewhere,
        env=env,
        input=json.dumps(prompt),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Miso" in json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]


def test_local_and_explicit_settings_files(tmp_path: Path, home: Path) -> None:
    install(home, tmp_path, "--local", "--data-dir", "data", "--namespace", "work", "--l1-dir", "r")
    (entry,) = ours(json.loads((tmp_path / ".claude" / "settings.local.json").read_text()))
    assert f"--data-dir {tmp_path / 'data'} --namespace work" in entry["command"]
    assert entry["command"].endswith(f"--l1-dir {tmp_path / 'r'}")
    target = tmp_path / "custom.json"
    install(home, tmp_path, "--settings", str(target), "--deadline", "3", "--timeout", "6")
    (entry,) = ours(json.loads(target.read_text()))
    assert entry["timeout"] == 6 and entry["command"].endswith("--deadline 3")
    assert not (home / ".claude").exists()


def test_dry_run_writes_nothing(tmp_path: Path, home: Path) -> None:
    done = install(home, tmp_path, "--user", "--dry-run")
    assert not (home / ".claude").exists()
    assert ours(json.loads(done.stdout)) and "dry run" in done.stderr


def test_unreadable_settings_are_left_alone(tmp_path: Path, home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": [}')
    done = install(home, tmp_path, "--user", expect=1)
    assert str(settings) in done.stderr and "not valid JSON" in done.stderr
    assert settings.read_text() == '{"hooks": [}'
    settings.write_text('{"hooks": {"UserPromptSubmit": {}}}')
    done = install(home, tmp_path, "--user", expect=1)
    assert "UserPromptSubmit" in done.stderr


def test_a_timeout_below_the_deadline_is_refused(tmp_path: Path, home: Path) -> None:
    done = install(home, tmp_path, "--user", "--timeout", "4", expect=2)
    assert "--timeout" in done.stderr and not (home / ".claude").exists()


def test_the_install_in_the_docs_gives_the_settings_shown(tmp_path: Path, home: Path) -> None:
    """docs/agents.md's install commands, run verbatim in a project whose .venv is this
    one, write the entry its JSON block shows, with the absolute path of that .venv's
    mnemod; and that command gives Claude Code the context."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    section = doc.split("## Claude Code", 1)[1].split("\n## ", 1)[0]
    commands = re.search(r"```sh\n(.*?)```", section, re.S)
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert commands is not None and block is not None
    shown = json.loads(block.group(1))
    project = tmp_path / "project"
    run_cli(project / ".mnemod", "add", "The cat is named Miso")
    (project / ".venv").symlink_to(MNEMOD.parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOD_", "CLAUDE_"))}
    env["HOME"] = str(home)
    lines = [line.split("#")[0].strip() for line in commands.group(1).splitlines()]
    assert len(lines) == 2
    for line in lines:
        subprocess.run(["bash", "-c", line], cwd=project, env=env, check=True, timeout=60)
    for written in (project / ".claude" / "settings.json", home / ".claude" / "settings.json"):
        settings = json.loads(written.read_text())
        (entry,) = ours(settings)
        (example,) = ours(shown)
        assert settings.keys() == shown.keys() and entry.keys() == example.keys()
        assert entry["timeout"] == example["timeout"]
        program, *args = shlex.split(entry["command"])
        assert program == str(project / ".venv" / "bin" / "mnemod")
        assert args == shlex.split(example["command"])[1:]
        prompt = {"session_id": "s1", "prompt": "my cat?", "cwd": str(project)}
        ran = subprocess.run(
            ["/bin/sh", "-c", entry["command"]],
            cwd=home,
            env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
            input=json.dumps(prompt),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "Miso" in json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
