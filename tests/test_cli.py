"""The CLI as a user runs it: a scripted session at injected times (MNEMOD_NOW)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli

pytestmark = pytest.mark.process  # starts processes of its own


class Cli:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.now = "2026-03-01T09:00:00Z"

    def run(
        self, *args: str, expect: int = 0, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(self.data_dir, *args, now=self.now, stdin=stdin, expect=expect)

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)


def test_scripted_session(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    ts = cli.json("add", "User likes TypeScript", "--type", "context")
    assert ts["expires_at"] == "2026-03-15T09:00:00.000Z"
    same = cli.json("add", "User likes TypeScript a lot", "--type", "context")
    assert same["id"] == ts["id"] and same["content"] == "User likes TypeScript a lot"
    assert len(cli.json("list")) == 1

    pref = cli.json("add", "User prefers Asia/Taipei", "--type", "preference", "--importance", "5")
    assert pref["expires_at"] == "2026-04-30T09:00:00.000Z"  # 30 d × 2
    for _ in range(3):
        cli.run("access", pref["id"])
    assert cli.json("get", pref["id"])["expires_at"] == "2026-05-21T09:00:00.000Z"  # +3 × 7 d

    prog = cli.json("add", "Sprint 12 is half done", "--type", "progress")
    cli.now = "2026-03-09T09:00:00Z"
    dry = cli.json("gc", "--dry-run")
    assert (dry["expired"], dry["dry_run"]) == (1, True)
    report = cli.json("gc")
    assert (report["expired"], report["promotable"]) == (1, 1)
    assert cli.run("get", prog["id"], expect=1).stderr.startswith("mnemod: not found")

    cli.run("promote", pref["id"])
    got = cli.json("get", pref["id"])
    assert (got["layer"], got["expires_at"]) == ("l2", None)
    assert "User prefers Asia/Taipei" in (tmp_path / "data/default/l2/preference.md").read_text()

    history = cli.json("history", ts["id"])
    assert [r["op"] for r in history] == ["add", "merge", "archived"]
    assert history[2]["content"] == "User likes TypeScript"  # the text the merge replaced
    assert history[2]["reason"] == f"merged into {ts['id']}"


def test_export_import_round_trip(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "a")
    cli.run("add", "Cat is called Miso", "--tag", "pets", "--key", "cat")
    one = cli.json("add", "Standup is at 10:00", "--type", "progress")
    cli.run("promote", one["id"])
    exported = cli.run("export").stdout
    other = Cli(tmp_path / "b")
    other.run("import", "-", stdin=exported)
    assert other.run("export").stdout == exported


def test_bad_input_exit_codes(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    assert "importance" in cli.run("add", "x y", "--importance", "7", expect=2).stderr
    assert cli.run("nonsense", expect=2).stderr.startswith("mnemod:")
    bad = tmp_path / "bad.toml"
    bad.write_text("[dedup]\nthreshold = 5\n")
    err = cli.run("list", "--config", str(bad), expect=2).stderr
    assert err.strip() == f"mnemod: {bad}:dedup.threshold: must be in (0, 1]"
    assert "line" in cli.run("import", "-", stdin="{not json\n", expect=2).stderr


def test_corrupt_index_exits_1_and_is_left_alone(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    cli.run("add", "Cat is called Miso")
    index = tmp_path / "data/default/l3/index.json"
    index.write_text("{oops")
    (index.parent / "index.json.bak").unlink(missing_ok=True)
    err = cli.run("add", "Dog is called Bao", expect=1).stderr
    assert "index.json" in err and "not valid JSON" in err
    assert index.read_text() == "{oops"


def test_dedupe_report_lists_candidates_for_review(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data")
    cli.run("add", "The office wifi password rotates every month", "--type", "context")
    cli.run("add", "The office wifi password rotates each quarter now", "--type", "context")
    rows = cli.json("dedupe", "--report", "--threshold", "0.3")
    assert len(rows) == 1
    assert rows[0]["jaccard"] >= 0.3 and rows[0]["would_merge"] is False
    assert rows[0]["refused_by"] in {"floor", "score"}  # both were kept: stored apart on add
    text = cli.run("dedupe", "--report", "--threshold", "0.3").stdout
    assert "wifi" in text and f"keep  {rows[0]['a']} ~ {rows[0]['b']}" in text


def test_the_hook_and_the_client_start_without_the_engine() -> None:
    """The Claude Code hook runs on every prompt and agents import the client: neither loads
    the engine, the tokenizer or the daemon's machinery (the store loads on first use)."""
    heavy = [
        "mnemod.api",
        "mnemod.store.engine",
        "mnemod.runtime.daemon",
        "mnemod.domain.resolve",
        "tiktoken",
        "apscheduler",
        "watchdog",
    ]
    script = (
        "import sys, mnemod.client, mnemod.cli.main\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
        "import mnemod\n"
        "print(mnemod.open is mnemod.open_store, mnemod.Store.__name__, mnemod.Entry.__name__)\n"
        "try:\n    mnemod.nothing\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "True Store Entry", "module 'mnemod' has no attribute 'nothing'"]


def test_list_prints_what_the_full_read_prints(tmp_path: Path) -> None:
    """`list` from the checkpoint's entries as written and the records after it, then from
    the same checkpoint reformatted (which only the full read takes): the same output."""
    from mnemod.clock import FixedClock
    from test_reader import T0, busy_store

    store = busy_store(tmp_path, FixedClock(T0))
    store.add("The wiki lives at wiki.example\nsecond line " + "x" * 90, key="wiki")
    flags = [[], ["--json"], ["--type", "insight"], ["--layer", "l2", "--json"], ["--layer", "l3"]]
    try:
        quick = [run_cli(tmp_path, "list", *f).stdout for f in flags]
        index = store.engine.paths.index
        index.write_text(json.dumps(json.loads(index.read_text()), indent=1))
        assert [run_cli(tmp_path, "list", *f).stdout for f in flags] == quick
        assert "[wiki]" in quick[0] and "Thursday" in quick[0]  # a put after the checkpoint
    finally:
        store.close()


def test_list_of_a_damaged_checkpoint_or_log_says_which_file(tmp_path: Path) -> None:
    """A corrupt line is not the quick read's to pass over: the full read names the file."""
    cli = Cli(tmp_path / "data")
    for text in ("Cat is called Miso", "Dog is called Bao"):
        cli.run("add", text)
    index = tmp_path / "data/default/l3/index.json"
    written = index.read_text()
    index.write_text(written.replace('"log_seq":2,', '"log_seq":0,', 1))  # both records after
    segment = next((tmp_path / "data/default/log").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(b'{"seq":1,oops}\n' + lines[1])
    err = cli.run("list", expect=1).stderr
    assert segment.name in err and "Traceback" not in err
    segment.write_bytes(b"".join(lines))
    index.write_text(written.replace('{"id":', '{"id" ', 1))
    (index.parent / "index.json.bak").unlink(missing_ok=True)
    err = cli.run("list", expect=1).stderr
    assert "index.json" in err and "Traceback" not in err


def test_reading_commands_start_without_redis_or_the_engine() -> None:
    """`stats`, `list`, `get` and `status` of files alone do not import redis, the client,
    the engine or dedup (0.1 s of CPU at every start)."""
    heavy = ["redis", "mnemod.client", "mnemod.store.engine", "mnemod.domain.dedup"]
    script = f"import sys, mnemod.cli.main\nprint([m for m in {heavy!r} if m in sys.modules])\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
