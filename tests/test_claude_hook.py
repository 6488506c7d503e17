"""`mnemod hook claude-code` run as Claude Code runs it: the installed `mnemod` executable as
a real subprocess, the hook's JSON on stdin, Claude Code's environment
(`CLAUDE_PROJECT_DIR`, a HOME of its own) and a working folder that is not the project.

Claude Code blocks and erases the prompt on exit code 2, so every problem must end in exit
0 with one line on stderr; the context is read from stdout on exit 0 only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from daemon_proc import FAST, DaemonFactory
from helpers import run_cli, wait_until

pytestmark = pytest.mark.process  # the CLI as a real process

MNEMOD = Path(sys.executable).parent / "mnemod"  # what `scripts/install` puts in .venv/bin
ONCE_L1 = """
[[memory]]
id = "greeting"
content = "Greet the user by name at the start of a session."
once = true

[[memory]]
id = "style"
content = "Answer in British English."
"""


def hook(
    workdir: Path,
    payload: dict[str, Any] | str,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """One prompt's hook call, as Claude Code makes it."""
    assert MNEMOD.is_file(), f"{MNEMOD} missing: run scripts/install --dev"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOD_", "CLAUDE_"))}
    base["HOME"] = str(workdir.parent / "home")
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [str(MNEMOD), "hook", *args],
        cwd=workdir,
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def prompt(text: str, cwd: Path | None = None, session: str = "s1") -> dict[str, Any]:
    data: dict[str, Any] = {
        "session_id": session,
        "transcript_path": "/dev/null",
        "hook_event_name": "UserPromptSubmit",
        "prompt": text,
    }
    if cwd is not None:
        data["cwd"] = str(cwd)
    return data


def context(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    if not done.stdout:
        return ""
    output = json.loads(done.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "UserPromptSubmit"
    return str(output["additionalContext"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a memory, an L1 folder and a subfolder; plus an unrelated folder that
    Claude Code's process runs in (`tmp_path/elsewhere`)."""
    root = tmp_path / "project"
    data = root / ".mnemod"
    run_cli(data, "add", "The cat is named Miso")
    (data / "l1").mkdir()
    (data / "l1" / "rules.toml").write_text(ONCE_L1)
    (root / "src" / "deep").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "home").mkdir()
    return root


def mnemod_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(".mnemod") if p.is_dir())


def test_the_project_is_found_from_the_prompts_cwd(project: Path) -> None:
    """Run from an unrelated folder, with the prompt's cwd a subfolder of the project: the
    project's .mnemod/ answers, and no data folder appears anywhere else."""
    elsewhere = project.parent / "elsewhere"
    done = hook(
        elsewhere, prompt("what is my cat called?", cwd=project / "src" / "deep"), "claude-code"
    )
    text = context(done)
    assert "Miso" in text and "British English" in text
    assert done.stderr == ""
    assert mnemod_folders(project.parent) == [project / ".mnemod"]


def test_claude_project_dir_comes_after_the_prompts_cwd(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    env = {"CLAUDE_PROJECT_DIR": str(project)}
    ask = ("claude-code",)
    assert "Miso" in context(hook(elsewhere, prompt("my cat?", cwd=elsewhere), *ask, env=env))
    assert "Miso" in context(hook(elsewhere, prompt("my cat?"), *ask, env=env))
    other = tmp_path / "other"
    run_cli(other / ".mnemod", "add", "The dog is named Rex")
    text = context(hook(elsewhere, prompt("my dog? my cat?", cwd=other), *ask, env=env))
    assert "Rex" in text and "Miso" not in text  # the prompt's cwd wins
    assert "Miso" in context(hook(project, prompt("my cat?"), *ask))  # then the working folder


def test_no_data_folder_means_no_context_and_none_created(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    bare = tmp_path / "bare"
    bare.mkdir()
    env = {"CLAUDE_PROJECT_DIR": str(bare)}
    done = hook(bare, prompt("hello", cwd=bare), "claude-code", env=env)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.count("\n") == 1 and "no .mnemod folder" in done.stderr
    assert mnemod_folders(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "stdin", "said"),
    [
        (["claude-code", "--budget", "lots"], None, "--budget"),
        (["claude-code", "--budget", "0"], None, "--budget"),
        (["claude-code", "--deadline", "soon"], None, "--deadline"),
        (["claude-code", "--frobnicate"], None, "unrecognized arguments"),
        (["claude-code", "--config", "missing.toml"], None, "missing.toml"),
        (["claude-code", "--config", "bad.toml"], None, "bad.toml"),
        (["claude-code", "--namespace", "a:b"], None, "namespace"),
        (["claude-code", "--data-dir", "/proc/nothing/here"], None, "/proc/nothing/here"),
        (["claude-code", "--data-dir", "a-file"], None, "a-file"),
        (["cursor"], None, "unknown agent 'cursor'"),
        ([], None, "name the agent"),
        (["claude-code"], "{not json", "not JSON"),
        (["claude-code"], '{"session_id": "s1"}', "no prompt"),
    ],
)
def test_every_problem_is_one_line_and_exit_0(
    project: Path, args: list[str], stdin: str | None, said: str
) -> None:
    (project / "bad.toml").write_text("[ttl]\ncontext = 'forever'\n")
    (project / "a-file").write_text("not a folder\n")
    done = hook(project, stdin if stdin is not None else prompt("my cat?"), *args)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.startswith("mnemod hook: ") and done.stderr.count("\n") == 1
    assert said in done.stderr


def test_a_bad_environment_setting_does_not_block_the_prompt(project: Path) -> None:
    done = hook(project, prompt("my cat?"), "claude-code", env={"MNEMOD_TTL_CONTEXT": "soon"})
    assert (done.returncode, done.stdout) == (0, "")
    assert "MNEMOD_TTL_CONTEXT" in done.stderr and done.stderr.count("\n") == 1


def test_help_exits_0(project: Path) -> None:
    done = hook(project, "", "claude-code", "--help")
    assert done.returncode == 0
    assert "--deadline" in done.stdout and "CLAUDE_PROJECT_DIR" in done.stdout


def test_once_items_come_once_per_session_without_a_daemon(project: Path) -> None:
    run_cli(project / ".mnemod", "add", "Standup is at nine", "--tier", "hot", "--once")
    first = context(hook(project, prompt("my cat?", session="s1"), "claude-code"))
    assert "Greet the user" in first and "Standup is at nine" in first and "Miso" in first
    again = context(hook(project, prompt("my cat?", session="s1"), "claude-code"))
    assert "Greet the user" not in again and "Standup is at nine" not in again
    assert "British English" in again and "Miso" in again
    other = context(hook(project, prompt("my cat?", session="s2"), "claude-code"))
    assert "Greet the user" in other and "Standup is at nine" in other
    ledgers = list((project / ".mnemod" / "default" / "hook" / "sessions").glob("*.json"))
    assert len(ledgers) == 2


def test_files_too_slow_to_read_give_the_l1_items_within_the_deadline(project: Path) -> None:
    """An index that cannot be read in time (here a FIFO nobody writes: the read blocks):
    the L1 items come back before the deadline, with a line saying why; the next call does
    not wait for the files again."""
    index = project / ".mnemod" / "default" / "l3" / "index.json"
    index.unlink()
    os.mkfifo(index)
    done = hook(project, prompt("my cat?"), "claude-code", "--deadline", "1.5")
    text = context(done)
    assert "British English" in text and "Miso" not in text
    assert "took more than" in done.stderr and "L1 files alone" in done.stderr
    again = hook(project, prompt("my cat?"), "claude-code", "--deadline", "1.5")
    assert "British English" in context(again) and "last time" in again.stderr
    note = project / ".mnemod" / "default" / "hook" / "open-cost.json"
    assert json.loads(note.read_text())["complete"] is False
    old = time.time() - 601  # ten minutes on, the files are tried again
    os.utime(note, (old, old))
    later = hook(project, prompt("my cat?"), "claude-code", "--deadline", "1.5")
    assert "British English" in context(later)
    assert "took more than" in later.stderr and "last time" not in later.stderr


def test_a_data_folder_with_only_l1_files_answers_and_stays_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    data = tmp_path / "p" / ".mnemod"
    (data / "l1").mkdir(parents=True)
    (data / "l1" / "rules.toml").write_text(ONCE_L1)
    done = hook(tmp_path / "p", prompt("hi", session=""), "claude-code")
    assert "British English" in context(done) and done.stderr == ""
    assert sorted(p.name for p in data.iterdir()) == ["l1"]


def test_through_a_daemon_and_while_it_cannot_answer(project: Path, daemons: DaemonFactory) -> None:
    """With a daemon, the hook asks it (its Redis ledger keeps `once`); while the daemon is
    stuck (SIGSTOP: a long maintenance run), the hook answers from the L1 files before its
    deadline, still honouring `once`, and once a request of its went unanswered it does not
    wait for the daemon again until the daemon answers."""
    data = project / ".mnemod"
    proc = daemons.daemon(data).start()
    proc.url_from_stdout()
    proc.wait_log("daemon.running")
    env = {k: v for k, v in FAST.items() if k.startswith("MNEMOD_SCHEDULE")}
    first = hook(project, prompt("my cat?", session="d1"), "claude-code", env=env)
    assert "Miso" in context(first) and "Greet the user" in context(first)
    assert first.stderr == ""
    again = context(hook(project, prompt("my cat?", session="d1"), "claude-code", env=env))
    assert "Miso" in again and "Greet the user" not in again
    proc.signal(signal.SIGSTOP)
    try:
        stuck = hook(project, prompt("my cat?", session="d2"), "claude-code", "--deadline", "2")
        text = context(stuck)
        assert "British English" in text and "Greet the user" in text and "Miso" not in text
        assert "daemon did not answer" in stuck.stderr and stuck.stderr.count("\n") == 1
        # the next prompt does not wait: the daemon has not answered the last request
        later = hook(project, prompt("my cat?", session="d2"), "claude-code", "--deadline", "2")
        assert "British English" in context(later) and "Greet the user" not in context(later)
        assert "left a request unanswered" in later.stderr
    finally:
        proc.signal(signal.SIGCONT)
    wait_until(lambda: "Miso" in context(hook(project, prompt("cat?"), "claude-code")), 20)


def test_a_ledger_that_cannot_be_written_keeps_the_answer(tmp_path: Path) -> None:
    """Where the session ledger cannot be written (here a file stands where its folder
    would go; a read-only folder does the same), the context still comes back."""
    (tmp_path / "home").mkdir()
    data = tmp_path / "p" / ".mnemod"
    (data / "l1").mkdir(parents=True)
    (data / "l1" / "rules.toml").write_text(ONCE_L1)
    (data / "default").write_text("in the way\n")
    done = hook(tmp_path / "p", prompt("hi", session="s1"), "claude-code")
    assert "Greet the user" in context(done) and done.stderr == ""


def test_files_it_may_not_write_are_read_without_recording(project: Path) -> None:
    """Where the namespace cannot be opened for writing (here its lock file cannot be
    created; a read-only folder does the same), the hook answers from a read-only view."""
    lock = project / ".mnemod" / "default" / ".lock"
    lock.unlink()
    lock.mkdir()
    done = hook(project, prompt("my cat?"), "claude-code")
    assert "Miso" in context(done) and done.stderr == ""


def test_an_l1_folder_elsewhere(project: Path, tmp_path: Path) -> None:
    """`--l1-dir`, as for the systemd service's /etc/mnemod/l1 beside /var/lib/mnemod."""
    rules = tmp_path / "etc-l1"
    rules.mkdir()
    (rules / "house.md").write_text("Tabs, never spaces.\n")
    done = hook(project, prompt("my cat?"), "claude-code", "--l1-dir", str(rules))
    text = context(done)
    assert "Tabs, never spaces" in text and "Miso" in text and "British English" not in text
