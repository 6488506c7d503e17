"""A namespace runner (runtime.runner) on its own thread, with a real Redis and files but a
fake clock: it renews its lease when the clock says a third of its TTL went by, and hands
the namespace over when it leads more than its share and another daemon stands by."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from helpers import wait_until
from mnemod.clock import FixedClock
from mnemod.config import Config, load_config
from mnemod.redisio.change_feed import ChangeFeed
from mnemod.redisio.connection import Backoff
from mnemod.redisio.keys import Keys, daemons_key
from mnemod.redisio.presence import Presence
from mnemod.runtime.leadership import Leadership
from mnemod.runtime.metrics import Metrics
from mnemod.runtime.runner import NamespaceRunner
from mnemod.runtime.runner_context import Folders
from mnemod.store.engine import Engine
from mnemod.store.replica import folder_id

TTL = 30.0
KEYS = Keys("mnemod", "default")


@dataclass
class Host:
    """What the process gives a runner (runtime.daemon.Daemon), with a fake clock."""

    client: redis.Redis
    leadership: Leadership
    clock: FixedClock
    config: Config = field(
        default_factory=lambda: load_config({"daemon": {"lease_ttl": TTL, "block": "50ms"}})
    )
    owner: str = "host:1:me"
    url: str = "unix:///test"
    metrics: Metrics = field(default_factory=Metrics)
    stop_requested: threading.Event = field(default_factory=threading.Event)
    said: list[str] = field(default_factory=list)

    def wait_out(self, backoff: Backoff, error: str) -> None:
        backoff.sleep(backoff.next_delay())

    def revive_embedded(self) -> bool:
        return False

    def announce(self, namespace: str, state: str, text: str) -> None:
        self.said.append(state)

    def stopping(self, text: str) -> None:
        return None

    def fail(self, exc: BaseException) -> None:
        raise AssertionError(f"the runner failed: {exc!r}") from exc


@pytest.fixture
def host(redis_client: redis.Redis) -> Host:
    clock = FixedClock()
    daemons = Presence(redis_client, daemons_key("mnemod"), TTL)
    return Host(redis_client, Leadership(daemons, "host:1:me", clock, TTL), clock)


@contextmanager
def started(host: Host, made: NamespaceRunner) -> Iterator[NamespaceRunner]:
    host.leadership.served = 1
    host.leadership.beat()
    made.start_thread()
    try:
        yield made
    finally:
        host.stop_requested.set()
        assert made.thread is not None
        made.thread.join(timeout=30)
        host.leadership.leave()


@pytest.fixture
def runner(host: Host, tmp_path: Path) -> Iterator[NamespaceRunner]:
    with started(
        host, NamespaceRunner(host, "default", Folders(tmp_path, tmp_path / "l1"))
    ) as made:
        yield made


@dataclass
class Gate:
    """Holds the leader's opening of its files until `release` is set (a long start-up)."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def slow_starter(
    host: Host, tmp_path: Path, redis_client: redis.Redis, gate: Gate
) -> Iterator[NamespaceRunner]:
    """A runner restarting on the folder it led before (the namespace says its leader wrote
    this very folder), so that it opens its files once it holds the lease, slowly."""
    made = NamespaceRunner(host, "default", Folders(tmp_path, tmp_path / "l1"))
    ChangeFeed(redis_client, KEYS, host.owner).mark_folder(folder_id(made.context.paths))
    open_files = made.context.open_engine

    def open_slowly(replica: bool = False) -> Engine:
        engine = open_files(replica)
        gate.entered.set()
        gate.release.wait(timeout=30)
        return engine

    made.context.open_engine = open_slowly  # type: ignore[method-assign]
    try:
        with started(host, made) as running:
            yield running
    finally:
        gate.release.set()


def test_the_lease_is_renewed_when_a_third_of_its_ttl_went_by(
    host: Host, runner: NamespaceRunner, redis_client: redis.Redis
) -> None:
    wait_until(lambda: runner.state == "running", timeout=20)
    assert redis_client.get(KEYS.lease) == host.owner
    redis_client.pexpire(KEYS.lease, 5_000)  # as if time went by since the last renewal
    host.clock.advance(TTL / 3 - 0.5)
    wait_until(lambda: host.clock.monotonic() - runner.beat < 0.01, timeout=5)  # turns on
    assert redis_client.pttl(KEYS.lease) <= 5_000  # not yet due
    host.clock.advance(0.5)
    wait_until(lambda: redis_client.pttl(KEYS.lease) > 5_000, timeout=30)


def test_a_leader_over_its_share_hands_over_to_a_daemon_standing_by(
    host: Host, runner: NamespaceRunner, redis_client: redis.Redis
) -> None:
    wait_until(lambda: runner.state == "running", timeout=20)
    Presence(redis_client, daemons_key("mnemod"), TTL).here("host:2:other")
    host.leadership.served = 2
    host.leadership.beat()
    host.leadership.leading["another"] = host.clock.monotonic()  # it leads two: share 1
    Presence(redis_client, KEYS.standby, TTL).here("host:2:other")
    redis_client.pexpire(KEYS.lease, 5_000)
    host.clock.advance(TTL / 3)  # renewal due, but led for less than a lease time
    wait_until(lambda: redis_client.pttl(KEYS.lease) > 5_000, timeout=30)
    assert runner.state == "running"
    host.clock.advance(TTL)
    wait_until(lambda: runner.state == "standby", timeout=30)
    assert redis_client.get(KEYS.lease) is None  # released for the other to take
    wait_until(lambda: host.said == ["leading", "standby"], timeout=30)  # said once it looked
    assert "default" not in host.leadership.leading


def test_a_starting_leader_renews_its_lease_while_it_opens_its_files(
    host: Host, slow_starter: NamespaceRunner, gate: Gate, redis_client: redis.Redis
) -> None:
    assert gate.entered.wait(timeout=20)  # the lease held, the files being opened
    assert redis_client.get(KEYS.lease) == host.owner
    redis_client.pexpire(KEYS.lease, 5_000)  # as if the start-up took a while already
    host.clock.advance(TTL / 3)
    wait_until(lambda: redis_client.pttl(KEYS.lease) > 5_000, timeout=10)
    gate.release.set()
    wait_until(lambda: slow_starter.state == "running", timeout=20)
    assert redis_client.get(KEYS.lease) == host.owner


def test_a_leader_deposed_while_it_starts_writes_nothing_and_stands_by(
    host: Host, slow_starter: NamespaceRunner, gate: Gate, redis_client: redis.Redis
) -> None:
    assert gate.entered.wait(timeout=20)
    redis_client.set(KEYS.lease, "host:2:other", px=60_000)  # took it while this one started
    host.clock.advance(TTL / 3)
    gate.release.set()
    wait_until(lambda: host.said == ["standby"], timeout=20)  # lost it, standing by again
    assert redis_client.get(KEYS.lease) == "host:2:other"
    assert slow_starter.state == "standby"
    assert not redis_client.exists(KEYS.marker, KEYS.status)  # no hot layer, no status


def test_the_engine_a_runner_opens_is_kept_out_of_the_collector_s_passes(
    host: Host, tmp_path: Path
) -> None:
    """What the open read lives as long as the engine: frozen before the collector comes
    back, no pass scans it (the first one after the open scanned every entry)."""
    made = NamespaceRunner(host, "default", Folders(tmp_path, tmp_path / "l1"))
    assert gc.isenabled()
    engine = made.context.open_engine()
    try:
        assert gc.isenabled()
        assert gc.is_tracked(engine) and not any(o is engine for o in gc.get_objects())
    finally:
        engine.close()
        gc.unfreeze()


def test_an_engine_opened_again_frees_the_frozen_one_it_replaces(
    host: Host, tmp_path: Path
) -> None:
    """A runner opens its engine again after a lost lease or a diverged copy: the engine
    before, frozen and held in reference cycles, is collected then, not kept for good."""
    made = NamespaceRunner(host, "default", Folders(tmp_path, tmp_path / "l1"))
    first = made.context.open_engine()
    first.close()
    before = weakref.ref(first)
    del first
    second = made.context.open_engine()
    try:
        assert before() is None
    finally:
        second.close()
        gc.unfreeze()
