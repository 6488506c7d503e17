"""Memory content on a terminal: control characters are shown escaped, never obeyed; on a
pipe and with --json the text is exactly what was stored."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from helpers import run_cli
from mnemod.cli.terminal import escape_controls

HOSTILE = "Deploy on Fridays \x1b[2J\x1b]0;pwned\x07 \x9b31m done \u202eevil\u202c \x7f ok\ttab"


def on_a_terminal(data_dir: Path, *args: str) -> str:
    """What `mnemod ARGS` writes to a terminal (a pseudo-terminal as its stdout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env["MNEMOD_DATA_DIR"] = str(data_dir)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mnemod.cli.main", *args],
            env=env,
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=60,
            check=True,
        )
        assert b"Traceback" not in done.stderr
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the other side is closed and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return b"".join(chunks).decode()


def test_escape_controls() -> None:
    assert escape_controls("a\x1b[31mb\x07\n\tc\x9b\u202e\u2066") == (
        "a\\x1b[31mb\\x07\n\tc\\x9b\\u202e\\u2066"
    )
    assert escape_controls("Grüße, 東京 🙂") == "Grüße, 東京 🙂"


@pytest.mark.process  # runs the CLI
def test_list_and_get_escape_control_characters_on_a_terminal(tmp_path: Path) -> None:
    added = json.loads(run_cli(tmp_path, "add", HOSTILE, "--key", "deploy", "--json").stdout)
    assert added["content"] == HOSTILE
    for args in (["list"], ["get", "deploy"], ["resolve", "when do we deploy?"]):
        shown = on_a_terminal(tmp_path, *args)
        assert "Deploy on Fridays" in shown, args
        assert not any(c in shown for c in "\x1b\x07\x9b\u202e\x7f"), (args, shown)
        assert "\\x1b[2J" in shown or "\\u001b[2J" in shown, (args, shown)

    piped = run_cli(tmp_path, "list").stdout
    assert HOSTILE in piped  # a pipe gets the text as stored
    listed = json.loads(run_cli(tmp_path, "list", "--json").stdout)
    assert listed[0]["content"] == HOSTILE
