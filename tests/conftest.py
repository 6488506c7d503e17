"""Shared fixtures: one real, private redis-server per test session.

It is started by the daemon's own embedded-Redis code on a unix socket in a temp folder (no
TCP port), so every test run also tests the embedded default, and no test can touch a
Redis anyone else uses. Without redis-server on PATH the Redis tests fail, loudly.

Every in-process save is also checked against the entries in memory (`saved_as_held`):
the engine keeps entries' JSON between saves, and a change that skipped `touched` would
otherwise reach index.json stale without any test noticing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon_proc import DaemonFactory, managed
from mnemod.files.l3_store import load_index
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import INSTALL_HINT, EmbeddedRedis
from mnemod.store.commits import Commits


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (`unix://…`) of the session's private redis-server."""
    if shutil.which("redis-server") is None:
        pytest.fail(f"redis-server is not on PATH; the tests need a real one: {INSTALL_HINT}")
    folder: Path = tmp_path_factory.mktemp("redis")
    with EmbeddedRedis(folder) as server:
        yield server.url


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client of the private server, emptied before each test."""
    client = connect(redis_server, socket_timeout=5.0)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Real `mnemod run` processes for one test; none is left running afterwards."""
    with managed(tmp_path) as factory:
        yield factory


@pytest.fixture(autouse=True)
def saved_as_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """After every checkpoint, index.json must hold exactly the entries the engine held
    when it took it (the write may run later, on another thread)."""
    prepare = Commits.prepare_checkpoint

    def checked(self: Commits, stats: Any, force: bool = False) -> Callable[[], int] | None:
        write = prepare(self, stats, force)
        if write is None:
            return None
        assert self.texts.resynced == 0, "the kept texts drifted from the entries"
        held = [e.to_dict() for e in self.state.entries.values()]
        held_l2 = sorted((e.to_dict() for e in self.state.l2.values()), key=lambda d: d["id"])

        def write_and_check() -> int:
            seq = write()
            snapshot = load_index(self.paths.index)
            if snapshot.log_seq == seq:
                assert [e.to_dict() for e in snapshot.entries] == held, self.paths.index
                got_l2 = sorted((e.to_dict() for e in snapshot.l2 or []), key=lambda d: d["id"])
                assert got_l2 == held_l2, self.paths.index
            return seq

        return write_and_check

    monkeypatch.setattr(Commits, "prepare_checkpoint", checked)
