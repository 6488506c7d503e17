"""`mnemod resolve` and the Claude Code hook, on the files (no daemon)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import run_cli

pytestmark = pytest.mark.process  # starts processes of its own


def run(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(data, *args, now="2026-03-01T09:00:00Z", stdin=stdin, expect=None)


def test_resolve_stays_within_budget_and_traces(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run(data, "add", "The cat is named Miso and sleeps on the sofa")
    run(data, "add", "Deploys happen on Fridays after the standup", "--type", "progress")
    out = run(data, "resolve", "what is the cat called?", "--budget", "60", "--trace", "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert "Miso" in payload["text"]
    assert payload["tokens_used"] <= 60
    assert any(row.get("reason") for row in payload["trace"])
    listed = json.loads(run(data, "list", "--json").stdout)
    cat = next(e for e in listed if "Miso" in e["content"])
    assert cat["access_count"] == 1  # resolve records accesses, as agents use it


def test_resolve_prints_only_the_context_on_stdout(tmp_path: Path) -> None:
    """What `mnemod resolve` writes to stdout is the text to prepend, nothing more; how much
    it took goes to stderr."""
    data = tmp_path / "data"
    run(data, "add", "The cat is named Miso and sleeps on the sofa")
    out = run(data, "resolve", "what is the cat called?", "--budget", "60")
    assert out.returncode == 0, out.stderr
    as_json = json.loads(run(data, "resolve", "what is the cat called?", "--json").stdout)
    assert out.stdout == as_json["text"] + "\n"
    assert "Miso" in out.stdout
    assert out.stderr.strip() == f"mnemod: {as_json['tokens_used']} tokens, 1 item, 0 left out"


def test_hook_prints_additional_context(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "l1").mkdir(parents=True)
    (data / "l1" / "rules.md").write_text("Always answer in British English.\n")
    run(data, "add", "The cat is named Miso")
    hook_input = json.dumps(
        {
            "session_id": "s1",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "what is my cat called?",
        }
    )
    out = run(data, "hook", "claude-code", stdin=hook_input)
    assert out.returncode == 0, out.stderr
    output = json.loads(out.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "UserPromptSubmit"
    assert "Miso" in output["additionalContext"]
    assert "British English" in output["additionalContext"]


def test_hook_never_blocks_the_prompt(tmp_path: Path) -> None:
    out = run(tmp_path / "data", "hook", "claude-code", stdin="{not json")
    assert out.returncode == 0
    assert out.stdout == ""
    assert "mnemod hook" in out.stderr
