"""Shared fixtures: one real, private redis-server per test session; the tiers; leak guards.

The server is started by the daemon's own embedded-Redis code on a unix socket in a temp
folder (no TCP port), so every test run also tests the embedded default, and no test can
touch a Redis anyone else uses. Without redis-server on PATH the Redis tests fail, loudly.

Tiers (markers set from the fixtures a test uses, tests/guards.py): `process` for a test
that starts processes of its own (it uses `daemons`, or its module says
`pytestmark = pytest.mark.process`), `redis` for one that uses the session's server, `unit`
for the rest. `scripts/test` runs unit and redis, `scripts/test --all` every tier. A test
outside `process` that starts a process fails, so the fast tiers stay fast.

Guards: a test fails when it leaves a thread running, or a key in the session's server that
should expire and never does (outside mnemod's own key space, or one of its answers,
session ledgers or lease): an agent's Redis would keep it forever.
Hypothesis runs without its timing checks (a deadline per example, "generation is slow"):
on a shared machine they fail on the load, not on the code.
Every in-process save is also checked against the entries in memory (`saved_as_held`):
the engine keeps entries' JSON between saves, and a change that skipped `touched` would
otherwise reach index.json stale without any test noticing.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings

from daemon_proc import DaemonFactory, managed
from guards import (
    Processes,
    keys_without_ttl,
    refuse_stray_processes,
    starting_processes,
    threads_started,
    tier,
)
from helpers import wait_until
from mnemod.files.l3_store import load_index
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import INSTALL_HINT, EmbeddedRedis
from mnemod.store.commits import Commits

THREAD_GRACE_SECONDS = 5.0
"""How long a thread a test started may take to end after it (a join on another thread)."""

settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")


# -- tiers (tests/guards.py) --------------------------------------------------------------
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(tier(item))


sys.addaudithook(refuse_stray_processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    Processes.allowed = item.get_closest_marker("process") is not None
    Processes.test = item.nodeid
    try:
        return (yield)
    finally:
        Processes.allowed = True


# -- the session's Redis ----------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (`unix://…`) of the session's private redis-server."""
    if shutil.which("redis-server") is None:
        pytest.fail(f"redis-server is not on PATH; the tests need a real one: {INSTALL_HINT}")
    folder: Path = tmp_path_factory.mktemp("redis")
    server = EmbeddedRedis(folder)
    with starting_processes():
        server.start()
    try:
        yield server.url
    finally:
        with starting_processes():
            server.stop()


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


@pytest.fixture
def external(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of the test's own (stands in for a shared or managed Redis)."""
    server = EmbeddedRedis(tmp_path / "external")
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- guards -----------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_leaked_keys(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test of the session's server must not leave a key that should expire and never
    does (`guards.keys_without_ttl`): an agent's Redis would keep it forever."""
    if "redis_server" not in request.fixturenames:
        yield
        return
    client = connect(request.getfixturevalue("redis_server"), socket_timeout=5.0)
    try:
        before = keys_without_ttl(client)
        yield
        leaked = sorted(keys_without_ttl(client) - before)
        assert not leaked, f"keys that should expire and never do: {leaked[:10]}"
    finally:
        client.close()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """A test must not leave a thread running: the daemon's threads (snapshot writer,
    scheduler, watcher) end with what started them."""
    before = set(threading.enumerate())
    yield
    if threads_started(before):
        try:
            wait_until(lambda: not threads_started(before), timeout=THREAD_GRACE_SECONDS)
        except AssertionError:
            names = sorted(f"{t.name} (daemon={t.daemon})" for t in threads_started(before))
            pytest.fail(f"threads left running: {', '.join(names)}")


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
