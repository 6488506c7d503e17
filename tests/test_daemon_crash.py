"""Exactly once under crashes: kill -9 the daemon again and again while an agent writes.

The scale is `MNEMOD_TEST_SCALE`: the default keeps CI fast, `full` runs the 10,000-event
acceptance run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from daemon_proc import (
    KEYS,
    DaemonFactory,
    DaemonProc,
    distinct_content,
    history,
    index_entries,
    index_last_event_id,
    pending,
    unread,
)
from helpers import wait_until
from mnemod.redisio.socket_path import socket_path_for

FULL = os.environ.get("MNEMOD_TEST_SCALE") == "full"
EVENTS = 10_000 if FULL else 2_000
KILLS = 8 if FULL else 5


class Agent(threading.Thread):
    """XADDs `count` add events with distinct contents; three in four carry a client id
    (exact bookkeeping), the rest none (a double apply would show as a second entry)."""

    def __init__(self, url: str, count: int, daemons: DaemonFactory) -> None:
        super().__init__(name="agent", daemon=True)
        self.client = daemons.client(url)
        self.count = count
        self.rng = random.Random(42)
        self.sent: list[str] = []
        self.by_id: dict[str, str] = {}  # client id → content
        self.anonymous: set[str] = set()  # contents sent without an id
        self.error: BaseException | None = None
        self.stop = threading.Event()
        # paced so the kills land while it writes: about 2.5 s of events per kill
        self.pause = 20 / (count / (KILLS * 2.5))

    def run(self) -> None:
        try:
            for start in range(0, self.count, 20):
                pipe = self.client.pipeline(transaction=False)
                for n in range(start, min(start + 20, self.count)):
                    content = distinct_content(self.rng)
                    data: dict[str, object] = {"type": "context", "content": content}
                    if n % 4:
                        data["id"] = f"agent-{n:05d}"
                        self.by_id[f"agent-{n:05d}"] = content
                    else:
                        self.anonymous.add(content)
                    pipe.xadd(KEYS.events, {"op": "add", "data": json.dumps(data)})
                self.sent.extend(str(i) for i in pipe.execute())
                if self.stop.wait(self.pause):
                    return
        except BaseException as exc:  # noqa: BLE001  # reported by the test thread
            self.error = exc


def redis_servers_for(folder: Path) -> list[int]:
    """Every live redis-server process serving `folder`'s socket (orphans included)."""
    conf = str(socket_path_for(folder / "redis"))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if "redis-server" in cmdline and conf in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def kill_and_restart(
    daemons: DaemonFactory, first: DaemonProc, agent: Agent, env: dict[str, str]
) -> DaemonProc:
    """kill -9 the daemon KILLS times at random points of the agent's progress (mid-batch,
    mid-snapshot, during start-up or lease standby) and start a new one each time."""
    rng = random.Random(7)
    data = first.data_dir
    server_pids = redis_servers_for(data)
    url = first.url_from_stdout()
    current = first
    per_kill = EVENTS // KILLS
    for kill in range(KILLS):
        target = min(EVENTS, len(agent.sent) + rng.randint(per_kill // 3, per_kill))
        wait_until(lambda t=target: len(agent.sent) >= t or not agent.is_alive(), 60)  # type: ignore[misc]
        if rng.random() < 0.7:
            current.wait_log("daemon.running", at_least=1, timeout=30)
        current.kill9()
        assert redis_servers_for(data) == server_pids  # Redis outlives its owner
        if kill % 2:  # some events queue up while no daemon runs
            queued = len(agent.sent) + 40
            wait_until(lambda q=queued: len(agent.sent) >= q or not agent.is_alive(), 60)  # type: ignore[misc]
        current = daemons.daemon(data, env=env).start()
        assert current.url_from_stdout() == url  # the same server, adopted
    return current


@pytest.mark.slow
def test_exactly_once_under_kill_9(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    env = {"MNEMOD_DAEMON_LEASE_TTL": "2s"}  # a crashed daemon's lease lapses quickly
    first = daemons.daemon(data, env=env).start()
    url = first.url_from_stdout()
    first.wait_log("daemon.running")
    assert len(redis_servers_for(data)) == 1
    agent = Agent(url, EVENTS, daemons)
    agent.start()
    try:
        current = kill_and_restart(daemons, first, agent, env)
        agent.join(timeout=120)
    finally:
        agent.stop.set()
        agent.join(timeout=30)
    assert agent.error is None, agent.error
    assert len(agent.sent) == EVENTS
    client = daemons.client(url)

    def drained() -> bool:
        return (
            pending(client) == 0
            and unread(client) == 0
            and index_last_event_id(data) == agent.sent[-1]
        )

    wait_until(drained, timeout=120, interval=0.2)
    current.signal(signal.SIGTERM)
    assert current.wait_exit(timeout=30) == 0
    assert redis_servers_for(data) == []  # the clean stop stopped the one server

    reuses = [
        e["reused"]
        for proc in daemons.daemons
        for e in proc.log_events()
        if e.get("event") == "redis.embedded"
    ]
    assert reuses == [False] + [True] * KILLS

    entries = index_entries(data)
    records = history(data)
    merged = sum(len(r.get("merged", [])) for r in records if r["op"] == "merge")
    assert len(entries) + merged == EVENTS
    assert merged == 0  # the contents share no keyword
    ids = Counter(e["id"] for e in entries)
    assert set(agent.by_id) <= set(ids)
    assert all(n == 1 for n in ids.values())
    contents = Counter(e["content"] for e in entries)
    assert all(n == 1 for n in contents.values())
    assert {e["content"] for e in entries} == set(agent.by_id.values()) | agent.anonymous
    adds = Counter(r["id"] for r in records if r["op"] == "add")
    twice = {i: n for i, n in adds.items() if n != 1}
    assert not twice, f"{len(twice)} ids recorded as added more than once"
    assert set(adds) == set(ids)
