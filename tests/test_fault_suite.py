"""The crash and fault suite: a mixed ingest through real daemons under kill -9 storms, a
full and a read-only disk, a CLIENT KILL loop and a Redis restarted without persistence.
After the last restart the files must equal a model that applies every event once, in
order: entries by layer, their content and access counts, the L2 files, the history.

Marked `slow`: the default test run leaves them to CI. docs/reliability.md gives their
figures.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon_proc import (
    KEYS,
    Client,
    DaemonFactory,
    DaemonProc,
    distinct_content,
    managed,
    pending,
    unread,
)
from helpers import read_only, wait_until
from mnemod.files.journal import read_jsonl
from mnemod.files.l2_markdown import parse_l2
from mnemod.redisio.embedded import DAEMON_CLIENT, EmbeddedRedis
from mnemod.store.paths import NamespacePaths
from mnemod.store.recovery import read_committed

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(900)]

FAULTY = {
    "MNEMOD_DAEMON_BATCH_SIZE": "50",  # more commit points to die between
    "MNEMOD_SCHEDULE_GC": "1s",  # GC runs throughout
    "MNEMOD_SCHEDULE_EXPIRY": "1s",
    "MNEMOD_DAEMON_LEASE_TTL": "2s",
}


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    with managed(tmp_path) as factory:
        yield factory


@dataclass
class Model:
    """What the files must hold once every event is applied exactly once, in order."""

    rng: random.Random
    l3: dict[str, str] = field(default_factory=dict)  # id -> content
    l2: dict[str, str] = field(default_factory=dict)
    accesses: Counter[str] = field(default_factory=Counter)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    promoted: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def next_event(self) -> tuple[str, dict[str, Any]]:
        rng, live = self.rng, [*self.l3, *self.l2]
        roll = rng.random()
        if not live or roll < 0.45:
            entry_id = f"e{rng.getrandbits(48):012x}"
            data = {"type": "insight", "content": distinct_content(rng), "id": entry_id}
            return self.apply("add", data)
        target = rng.choice(live)
        if self.l2 and rng.random() < 0.3:
            target = rng.choice(list(self.l2))  # L2 entries get their share
        if roll < 0.70:
            return self.apply("access", {"id": target})
        if roll < 0.82:
            return self.apply("update", {"id": target, "content": distinct_content(rng)})
        if roll < 0.90 or target in self.l2:
            return self.apply("remove", {"id": target})
        return self.apply("promote", {"id": target})

    def apply(self, op: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        target = data["id"]
        if op == "add":
            self.l3[target] = data["content"]
            self.added.append(target)
        elif op == "access":
            self.accesses[target] += 1
        elif op == "update":
            (self.l2 if target in self.l2 else self.l3)[target] = data["content"]
        elif op == "remove":
            (self.l2 if target in self.l2 else self.l3).pop(target)
            self.removed.append(target)
        elif op == "promote":
            self.l2[target] = self.l3.pop(target)
            self.promoted.append(target)
        return op, data

    def generate(self, count: int) -> list[tuple[str, dict[str, Any]]]:
        made = [self.next_event() for _ in range(count)]
        self.events += made
        return made


def send(client: Client, events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """XADD the events in order; their stream ids."""
    pipe = client.pipeline(transaction=False)
    for op, data in events:
        pipe.xadd(KEYS.events, {"op": op, "data": json.dumps(data)})
    return [str(i) for i in pipe.execute()]


def entries_read(client: Client) -> int:
    groups = client.xinfo_groups(KEYS.events)
    return int(groups[0].get("entries-read") or 0) if groups else 0


def settled(client: Client, timeout: float = 60) -> None:
    """Every event read and acknowledged, none dead-lettered (all are valid)."""
    wait_until(lambda: unread(client) == 0 and pending(client) == 0, timeout)
    assert client.xlen(KEYS.dead) == 0, client.xrange(KEYS.dead, count=3)


def check_against(model: Model, data: Path) -> None:
    """The files equal the model (after a clean stop, so every derived file is written)."""
    paths = NamespacePaths(data, "default")
    state = read_committed(paths)
    assert {i: e.content for i, e in state.entries.items()} == model.l3, "L3 entries"
    assert {i: e.content for i, e in state.l2.items()} == model.l2, "L2 entries"
    counts = {i: e.access_count for i, e in [*state.entries.items(), *state.l2.items()]}
    assert counts == {i: model.accesses[i] for i in [*model.l3, *model.l2]}, "access counts"
    files: dict[str, tuple[str, int]] = {}
    for path in paths.l2_dir.glob("*.md"):
        for entry in parse_l2(path.read_text(), path):
            files[entry.id] = (entry.content, entry.access_count)
    assert files == {i: (e.content, e.access_count) for i, e in state.l2.items()}, "L2 files"
    ops = Counter((r["op"], r["id"]) for r in read_jsonl(paths.history))
    for op, ids in (("add", model.added), ("remove", model.removed), ("promote", model.promoted)):
        off = {i: ops[(op, i)] for i in ids if ops[(op, i)] != 1}
        assert not off, f"one {op} record each, not {off}"
    archived = Counter(r["entry"]["id"] for r in read_jsonl(paths.archive))
    off = {i: archived[i] for i in model.removed if archived[i] != 1}
    assert not off, f"one archived copy each, not {off}"


def start(daemons: DaemonFactory, data: Path, **kwargs: Any) -> DaemonProc:
    env = {**FAULTY, **kwargs.pop("env", {})}
    return daemons.daemon(data, env=env, **kwargs).start()


def test_kill_9_at_random_points_of_a_mixed_ingest_loses_nothing(
    daemons: DaemonFactory,
) -> None:
    data = daemons.data_dir()
    model = Model(random.Random(2026))
    proc = start(daemons, data)
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    send(client, model.generate(10_000))
    rng = random.Random(7)
    kills = 0
    while entries_read(client) < 9_800 or kills < 50:
        target = min(10_000, entries_read(client) + rng.randint(20, 260))

        def reached(t: int = target, p: DaemonProc = proc) -> bool:
            return entries_read(client) >= t or not p.running()

        wait_until(reached, 60)
        proc.kill9()
        kills += 1
        proc = start(daemons, data)
        if entries_read(client) >= 10_000 and kills >= 50:
            break
    # the last start may find every event acknowledged already: stopped only once it runs
    # (its handlers set; a SIGTERM before ends it as the default action does, not cleanly)
    proc.wait_log("daemon.running", timeout=60)
    settled(client, 120)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=60) == 0, proc.tail()
    print(f"kill -9 points: {kills}, events: {len(model.events)}")
    check_against(model, data)


def test_a_full_then_read_only_disk_during_ingest_loses_nothing(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    from test_commit_point import tmpfs

    data = tmp_path / "disk"
    model = Model(random.Random(11))
    with tmpfs(data, size="4m"):
        redis = EmbeddedRedis(tmp_path / "redis")  # beside the disk, not on it
        redis.start()
        try:
            proc = start(daemons, data, redis_url=redis.url)
            client = daemons.client(redis.url)
            proc.wait_log("daemon.running")
            send(client, model.generate(1_500))
            wait_until(lambda: entries_read(client) >= 500, 30)
            filler = data / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:  # the disk fills up under the ingest
                while True:
                    os.write(fd, b"x" * 512)
            except OSError:
                pass
            finally:
                os.close(fd)
            proc.wait_log("files.write_failed")
            assert proc.running()
            filler.unlink()  # space again
            send(client, model.generate(1_000))
            wait_until(lambda: entries_read(client) >= 2_000, 30)
            with read_only(data):  # the namespace's lock file stays open: a bind mount
                proc.wait_log("files.write_failed", at_least=2)
                assert proc.running()
            send(client, model.generate(500))
            settled(client, 90)
            proc.signal(signal.SIGTERM)
            assert proc.wait_exit(timeout=60) == 0, proc.tail()
            check_against(model, data)
        finally:
            redis.stop()


def test_a_client_kill_loop_during_ingest_loses_nothing(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    model = Model(random.Random(5))
    proc = start(daemons, data)
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    stop = threading.Event()

    def kill_loop() -> None:
        killer = daemons.client(proc.url_from_stdout())
        while not stop.is_set():
            for connection in killer.client_list():
                if connection.get("name", "").startswith(DAEMON_CLIENT):
                    killer.client_kill_filter(_id=connection["id"])
            stop.wait(0.02)
        killer.close()

    thread = threading.Thread(target=kill_loop)
    thread.start()
    try:
        for _ in range(10):
            send(client, model.generate(300))
        wait_until(lambda: entries_read(client) >= 3_000, 120)
    finally:
        stop.set()
        thread.join()
    settled(client, 90)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=60) == 0, proc.tail()
    check_against(model, data)


def test_redis_restarted_without_persistence_mid_ingest(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """What Redis had not handed to the daemon is Redis's to lose; all the daemon applied
    stays, exactly once, and the hot layer is rebuilt from the files."""
    data = daemons.data_dir()
    model = Model(random.Random(13))
    redis = EmbeddedRedis(tmp_path / "volatile")
    redis.start()
    try:
        proc = start(daemons, data, redis_url=redis.url)
        client = daemons.client(redis.url)
        proc.wait_log("daemon.running")
        first = model.generate(3_000)
        ids = send(client, first)
        wait_until(lambda: entries_read(client) >= 1_000, 60)
        redis.stop()
        shutil.rmtree(redis.folder / "appendonlydir", ignore_errors=True)  # nothing kept
        redis.start()
        proc.wait_log("redis.data_lost", timeout=30)
        # a batch read before the restart is committed once Redis takes its record again
        wait_until(lambda: client.hget(KEYS.committed, "seq") == str(_last_seq(data)), 30)
        applied = {e for r in _log_records(data) for e in r.get("events", [])}
        assert 1_000 <= len(applied) < 3_000
        assert all(i in applied for i in ids[: len(applied)])  # a prefix, in order
        kept = Model(random.Random(17))
        for op, payload in first[: len(applied)]:
            kept.apply(op, payload)
        wait_until(lambda: client.zcard(KEYS.hot) == len(kept.l3), 30)  # rebuilt
        send(client, kept.generate(1_000))
        settled(client, 90)
        proc.signal(signal.SIGTERM)
        assert proc.wait_exit(timeout=60) == 0, proc.tail()
        check_against(kept, data)
    finally:
        redis.stop()


def _last_seq(data: Path) -> int:
    records = _log_records(data)
    return int(records[-1]["seq"]) if records else 0


def _log_records(data: Path) -> list[dict[str, Any]]:
    from mnemod.files.change_log import ChangeLog

    return list(ChangeLog(data / "default" / "log", readonly=True).read_after(0))
