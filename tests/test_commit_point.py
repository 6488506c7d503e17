"""The change log is the one commit point: real daemons against faults between a commit and
the files and the hot layer derived from it (full and read-only disks on a tmpfs, kill -9,
dropped connections, a broken L2 file, the umask)."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from daemon_proc import (
    KEYS,
    Client,
    DaemonFactory,
    DaemonProc,
    add_event,
    committed_l2,
    distinct_content,
    history,
    index_entries,
    pending,
    unread,
)
from helpers import wait_until
from mnemod.files.l2_markdown import parse_l2
from mnemod.redisio.embedded import DAEMON_CLIENT


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    from daemon_proc import managed

    with managed(tmp_path) as factory:
        yield factory


@contextmanager
def tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    """A small tmpfs mounted on `path` for the test (CI runs as root), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def event(client: Client, op: str, **data: Any) -> str:
    return str(client.xadd(KEYS.events, {"op": op, "data": json.dumps(data)}))


def started(daemons: DaemonFactory, data: Path, **env: str) -> tuple[DaemonProc, Client]:
    proc = daemons.daemon(data, env=env).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    return proc, client


def settled(client: Client, timeout: float = 15) -> None:
    """Every event read and acknowledged."""
    wait_until(lambda: unread(client) == 0 and pending(client) == 0, timeout)


def l2_file(data: Path, type_: str) -> list[dict[str, Any]]:
    path = data / "default" / "l2" / f"{type_}.md"
    if not path.exists():
        return []
    return [e.to_dict() for e in parse_l2(path.read_text(), path)]


def test_a_failed_l2_write_loses_no_event_of_its_batch(daemons: DaemonFactory) -> None:
    """l2/ read-only while a promote and an add arrive in one transaction: both are
    committed and acknowledged, the add is stored, and the L2 file follows once l2/ can be
    written again. Before, the add was never applied nor dead-lettered."""
    data = daemons.data_dir()
    with tmpfs(data / "default" / "l2"):
        proc, client = started(daemons, data)
        event(client, "add", type="insight", content="Backups run nightly at two", id="a")
        settled(client)
        remount(data / "default" / "l2", "ro")
        pipe = client.pipeline(transaction=True)
        pipe.xadd(KEYS.events, {"op": "promote", "data": json.dumps({"id": "a"})})
        pipe.xadd(
            KEYS.events,
            {"op": "add", "data": json.dumps({"type": "context", "content": "Zebra", "id": "z"})},
        )
        pipe.execute()
        settled(client)
        proc.wait_log("l2.write_failed")
        assert {e["id"] for e in index_entries(data)} == {"z"}
        assert [e["id"] for e in committed_l2(data)] == ["a"]
        remount(data / "default" / "l2", "rw")
        add_event(client, "Yak", id="y")
        wait_until(lambda: [e["id"] for e in l2_file(data, "insight")] == ["a"], 15)
        assert {e["id"] for e in index_entries(data)} == {"z", "y"}
        assert client.xlen(KEYS.dead) == 0
        proc.signal(signal.SIGTERM)
        assert proc.wait_exit() == 0


def test_a_failed_l2_write_reverts_no_later_change(daemons: DaemonFactory) -> None:
    """After a failed write the file still holds what mnemod wrote last, so the next write
    does not take it for a person's edit: a promote, a removal and an update made since all
    stay, and the removed item leaves the hot layer."""
    data = daemons.data_dir()
    with tmpfs(data / "default" / "l2"):
        proc, client = started(daemons, data)
        rng = random.Random(8)
        for name in ("a", "b", "c"):
            event(client, "add", type="insight", content=distinct_content(rng), id=name)
        event(client, "promote", id="a")
        event(client, "promote", id="b")
        settled(client)
        wait_until(lambda: {e["id"] for e in l2_file(data, "insight")} == {"a", "b"}, 10)
        remount(data / "default" / "l2", "ro")
        event(client, "promote", id="c")
        settled(client)
        proc.wait_log("l2.write_failed")
        remount(data / "default" / "l2", "rw")
        event(client, "remove", id="a")
        event(client, "update", id="b", content="Fact b, corrected")
        settled(client)
        wait_until(lambda: {e["id"] for e in l2_file(data, "insight")} == {"b", "c"}, 15)
        by_id = {e["id"]: e for e in l2_file(data, "insight")}
        assert "corrected" in by_id["b"]["content"]
        wait_until(lambda: not client.exists(KEYS.item("a")), 10)
        assert client.exists(KEYS.item("b")) and client.exists(KEYS.item("c"))
        proc.signal(signal.SIGTERM)
        assert proc.wait_exit() == 0


def test_accesses_of_l2_entries_reach_the_file(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    proc, client = started(daemons, data)
    event(client, "add", type="insight", content="The NAS is called vault", id="a")
    event(client, "promote", id="a")
    for _ in range(4):
        event(client, "access", id="a")
    settled(client)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0
    assert [e["access_count"] for e in l2_file(data, "insight")] == [4]


def test_a_promote_is_applied_once_across_kill_9(daemons: DaemonFactory) -> None:
    """kill -9 right after a promote is committed: after the restart the accesses count
    once and the history has the promote once. Before, the L2 file was written before the
    snapshot, and the replayed events counted the accesses twice."""
    data = daemons.data_dir()
    proc, client = started(daemons, data, MNEMOD_SCHEDULE_SNAPSHOT="1h")
    event(client, "add", type="insight", content="The router is a Mikrotik", id="a")
    for _ in range(3):
        event(client, "access", id="a")
    event(client, "promote", id="a")
    wait_until(lambda: [e["id"] for e in l2_file(data, "insight")] == ["a"], 10)
    proc.kill9()
    again, client = started(daemons, data)
    settled(client)
    again.signal(signal.SIGTERM)
    assert again.wait_exit() == 0
    assert [e["access_count"] for e in committed_l2(data)] == [3]
    assert [e["access_count"] for e in l2_file(data, "insight")] == [3]
    assert [r["op"] for r in history(data) if r["id"] == "a"].count("promote") == 1


def test_a_remove_of_an_l2_entry_is_not_dead_lettered_after_kill_9(
    daemons: DaemonFactory,
) -> None:
    data = daemons.data_dir()
    proc, client = started(daemons, data, MNEMOD_SCHEDULE_SNAPSHOT="1h")
    event(client, "add", type="insight", content="The printer is on the landing", id="a")
    event(client, "promote", id="a")
    wait_until(lambda: [e["id"] for e in l2_file(data, "insight")] == ["a"], 10)
    event(client, "remove", id="a")
    wait_until(lambda: l2_file(data, "insight") == [], 10)
    proc.kill9()
    again, client = started(daemons, data)
    settled(client)
    assert client.xlen(KEYS.dead) == 0
    assert committed_l2(data) == []
    again.signal(signal.SIGTERM)
    assert again.wait_exit() == 0


def test_a_broken_l2_file_makes_only_its_writes_wait(daemons: DaemonFactory) -> None:
    """An update of an entry of a file a person broke: committed, the file left untouched,
    status names the file and line, and the daemon goes on (before: exit 1, at every start
    while the event was pending)."""
    data = daemons.data_dir()
    proc, client = started(daemons, data)
    event(client, "add", type="insight", content="The wiki lives on the Pi", id="a")
    event(client, "promote", id="a")
    md = data / "default" / "l2" / "insight.md"
    wait_until(md.exists, 10)
    broken = md.read_text().replace('"importance": 3', '"importance": "high"')
    md.write_text(broken)
    proc.wait_log("l2.file_refused")
    event(client, "update", id="a", content="The wiki moved to the NAS")
    add_event(client, "Unrelated work goes on", id="b")
    settled(client)
    assert proc.running()
    assert md.read_text() == broken
    wait_until(lambda: "insight.md" in (client.hget(KEYS.status, "waiting") or ""), 10)
    assert "line" in json.loads(client.hget(KEYS.status, "waiting") or "{}")["l2/insight.md"]
    md.write_text(broken.replace('"importance": "high"', '"importance": 4'))  # fixed, edited
    wait_until(lambda: "moved to the NAS" in md.read_text(), 15)
    assert [e["importance"] for e in committed_l2(data)] == [4]  # the person's edit kept
    md.write_text(broken)  # broken again, and the daemon restarted with an event waiting
    proc.wait_log("l2.file_refused", at_least=2)
    proc.kill9()  # its Redis stays up
    event(client, "update", id="a", content="The wiki moved to the cloud")
    again, client = started(daemons, data)
    settled(client)
    assert again.running() and md.read_text() == broken
    again.signal(signal.SIGTERM)
    assert again.wait_exit() == 0
    assert "cloud" in committed_l2(data)[0]["content"]


def test_removed_items_leave_the_hot_layer_through_dropped_connections(
    daemons: DaemonFactory,
) -> None:
    data = daemons.data_dir()
    proc, client = started(daemons, data)
    rng = random.Random(3)
    count = 300
    for n in range(count):
        event(client, "add", type="context", content=distinct_content(rng), id=f"i{n}")
    settled(client, 30)
    stop = threading.Event()
    killed = [0]

    def kill_loop() -> None:
        killer = daemons.client(proc.url_from_stdout())
        while not stop.is_set():
            for connection in killer.client_list():  # the daemon's, not the test's
                if connection.get("name", "").startswith(DAEMON_CLIENT):
                    killed[0] += int(killer.client_kill_filter(_id=connection["id"]))
            stop.wait(0.003)
        killer.close()

    thread = threading.Thread(target=kill_loop)
    thread.start()
    try:
        for n in range(0, count, 2):
            event(client, "remove", id=f"i{n}")
        wait_until(lambda: killed[0] >= 5, 30)
    finally:
        stop.set()
        thread.join()
    # the daemon may wait out an outage's backoff (up to 30 s) before it reconnects
    wait_until(lambda: unread(client) == 0 and pending(client) == 0, 120)
    removed = {f"i{n}" for n in range(0, count, 2)}
    wait_until(lambda: {e["id"] for e in index_entries(data)}.isdisjoint(removed), 15)

    def stale() -> list[str]:
        return [i for i in sorted(removed) if client.exists(KEYS.item(i))]

    wait_until(lambda: not stale(), 40)  # the daemon may be in an outage's backoff
    assert not removed & set(client.zrange(KEYS.hot, 0, -1))
    assert client.zcard(KEYS.hot) == count // 2
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0


def test_a_torn_archive_append_on_a_full_disk_is_cut_and_written_once(
    daemons: DaemonFactory,
) -> None:
    data = daemons.data_dir()
    with tmpfs(data / "default" / "l3", size="64k") as l3:
        proc, client = started(daemons, data, MNEMOD_SCHEDULE_SNAPSHOT="1h")
        rng = random.Random(5)
        for n in range(12):
            big = distinct_content(rng, words=250)
            event(client, "add", type="context", content=big, id=f"i{n}")
        settled(client)
        filler = l3 / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # fill the disk up
            while True:
                os.write(fd, b"x" * 512)
        except OSError:
            pass
        finally:
            os.close(fd)
        for n in range(12):
            event(client, "remove", id=f"i{n}")
        settled(client)
        proc.wait_log("journal.write_failed")
        filler.unlink()  # space again
        add_event(client, "After the space came back", id="later")
        archive = l3 / "archive.jsonl"
        wait_until(lambda: archive.exists() and len(archive.read_text().splitlines()) == 12, 15)
        lines = archive.read_text().splitlines()
        records = [json.loads(line) for line in lines]  # every line parses
        assert sorted(r["entry"]["id"] for r in records) == sorted(f"i{n}" for n in range(12))
        proc.signal(signal.SIGTERM)
        assert proc.wait_exit() == 0
        adds = [r["id"] for r in history(data) if r["op"] == "add"]
        assert len(adds) == len(set(adds)) == 13


def test_memory_files_are_private_whatever_the_umask(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    old = os.umask(0o022)
    try:
        proc, client = started(daemons, data)
    finally:
        os.umask(old)
    event(client, "add", type="insight", content="The garage code is in the safe", id="a")
    event(client, "promote", id="a")
    add_event(client, "Another memory", id="b")
    event(client, "remove", id="b")
    settled(client)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0
    namespace = data / "default"
    seen = []
    for path in [namespace, *namespace.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        expected = 0o700 if path.is_dir() else 0o600
        seen.append(path.name)
        assert mode == expected, f"{path}: {oct(mode)}"
    assert {".lock", "index.json", "insight.md", "history.jsonl", "archive.jsonl"} <= set(seen)
