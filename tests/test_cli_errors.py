"""The CLI explains itself: every command's help, and one line with the right exit code
(1 runtime, 2 bad usage or input) for what a user gets wrong; with --json, a JSON object."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from mnemod.cli.main import build_parser

pytestmark = pytest.mark.process  # runs the CLI (one test reads the parser in process)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_and_option_is_described() -> None:
    commands = subcommands()
    assert len(commands) >= 19
    for name, command in commands.items():
        description = command.description or ""
        assert description and "\n" not in description, name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"mnemod {name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{where}: no help"
            if action.option_strings and not action.required:
                assert "default" in action.help, f"{where}: the help names no default"


def test_option_help_gives_values_ranges_and_defaults() -> None:
    text = run_cli(Path("/nonexistent"), "add", "--help").stdout
    flat = " ".join(text.split())
    assert "context, preference, progress, relation, insight" in flat
    assert "--importance 1-5" in flat and "(default: 3)" in flat
    assert "repeatable" in flat.split("--tag")[2]  # the usage line names it first
    assert "--trigger REGEX" in flat and "regular expression" in flat
    assert "ISO-8601" in flat
    assert "reads it from standard input" in flat
    dedupe = " ".join(run_cli(Path("/nonexistent"), "dedupe", "--help").stdout.split())
    assert "--threshold 0..1" in dedupe and "at most 1" in dedupe


def one_line(done: Any) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return str(lines[0])


def test_unusable_paths_get_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run_cli(data, "add", "Something to export")
    line = one_line(run_cli(data, "export", "-o", "/proc/x.jsonl", expect=2))
    assert line == "mnemod: --output: /proc/x.jsonl: No such file or directory"

    line = one_line(run_cli(data, "run", "--data-dir", "/proc/x", expect=2))
    assert line.startswith("mnemod: --data-dir: cannot create /proc/x:")

    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    for command in ("list", "stats", "get"):
        args = [command, "--data-dir", str(a_file)] + (["x"] if command == "get" else [])
        line = one_line(run_cli(data, *args, expect=2))
        assert line == f"mnemod: --data-dir: {a_file} is not a folder"
    line = one_line(run_cli(a_file, "list", expect=2))  # given by MNEMOD_DATA_DIR
    assert line == f"mnemod: MNEMOD_DATA_DIR: {a_file} is not a folder"


def test_add_dash_reads_standard_input(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = json.loads(
        run_cli(data, "add", "-", "--json", stdin="The cat is called Mochi\nand is 3\n").stdout
    )
    assert added["content"] == "The cat is called Mochi\nand is 3"
    listed = json.loads(run_cli(data, "list", "--json").stdout)
    assert [e["content"] for e in listed] == ["The cat is called Mochi\nand is 3"]


def test_history_takes_a_key_label_as_get_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = json.loads(run_cli(data, "add", "Timezone Asia/Taipei", "--key", "tz", "--json").stdout)
    run_cli(data, "update", "tz", '{"importance": 5}')
    by_key = json.loads(run_cli(data, "history", "tz", "--json").stdout)
    by_id = json.loads(run_cli(data, "history", added["id"], "--json").stdout)
    assert by_key == by_id and [r["op"] for r in by_key] == ["add", "update"]

    other = json.loads(run_cli(data, "add", "Editor is vim", "--json").stdout)
    run_cli(data, "update", other["id"], '{"key": "editor"}')  # a key given later
    assert [r["op"] for r in json.loads(run_cli(data, "history", "editor", "--json").stdout)] == [
        "add",
        "update",
    ]
    run_cli(data, "remove", "tz")  # a removed entry's story is still found by its key
    assert [r["op"] for r in json.loads(run_cli(data, "history", "tz", "--json").stdout)] == [
        "add",
        "update",
        "remove",
        "archived",  # and the text it left
    ]
    assert "no history" in one_line(run_cli(data, "history", "nothing-like-it", expect=2))


@pytest.mark.parametrize("threshold", ["5", "0", "-0.2", "1.01", "half"])
def test_dedupe_threshold_outside_0_to_1_is_refused(tmp_path: Path, threshold: str) -> None:
    line = one_line(run_cli(tmp_path, "dedupe", "--report", "--threshold", threshold, expect=2))
    assert "--threshold" in line


def test_a_bad_redis_url_flag_is_named(tmp_path: Path) -> None:
    line = one_line(run_cli(tmp_path, "run", "--redis-url", "http://x", expect=2))
    assert line.startswith("mnemod: --redis-url (redis.url): must start with redis://")
    line = one_line(run_cli(tmp_path, "run", "--metrics-port", "70000", expect=2))
    assert line.startswith("mnemod: --metrics-port (metrics.port):")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["get", "no-such-entry"], 1, "not found"),
        (["add", "x y", "--importance", "9"], 2, "--importance"),
        (["dedupe", "--report", "--threshold", "5"], 2, "--threshold"),
        (["list", "--config", "/nonexistent.toml"], 2, "file not found"),
        (["list", "--no-such-flag"], 2, "unrecognized arguments"),
    ],
)
def test_json_errors_are_json_objects(
    tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    done = run_cli(tmp_path, *args, "--json", expect=code)
    assert done.stdout == ""
    error = json.loads(one_line(done))
    assert error["ok"] is False and error["code"] == code and says in error["error"]


def test_config_show_json_is_typed(tmp_path: Path) -> None:
    tree = json.loads(run_cli(tmp_path, "config", "show", "--json").stdout)
    assert tree["hot"]["max_entries"] == 5000
    assert tree["dedup"]["threshold"] == 0.382 and tree["dedup"]["floor"] == 0.45
    assert tree["daemon"]["drain_deadline"] == 20 and tree["ttl"]["context"] == 14 * 86400
    assert tree["daemon"]["watch_debounce"] == 0.3
    assert tree["log"]["level"] == "info" and tree["schedule"]["gc"] == "1h"
    text = run_cli(tmp_path, "config", "show").stdout
    assert 'drain_deadline = "20s"' in text
