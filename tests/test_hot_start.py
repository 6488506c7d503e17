"""A daemon's start keeps the hot layer a clean stop left at the same committed log record,
and rebuilds it otherwise (a change made while no daemon ran, a crash)."""

from __future__ import annotations

import random
import signal

import pytest

from daemon_proc import KEYS, DaemonFactory, add_event, distinct_content, index_entries
from helpers import run_cli, wait_until
from mnemod.redisio.embedded import EmbeddedRedis

pytestmark = pytest.mark.process


def test_a_clean_stop_lets_the_next_start_keep_the_hot_layer(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    rng = random.Random(11)
    for n in range(12):
        add_event(client, distinct_content(rng), id=f"item-{n}")
    wait_until(lambda: client.zcard(KEYS.hot) == 12 and len(index_entries(data)) == 12, 10)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0  # its embedded server stops too (the AOF stays)

    again = daemons.daemon(data).start()
    client = daemons.client(again.url_from_stdout())
    again.wait_log("daemon.running")
    assert again.count_events("hot.kept") == 1 and again.count_events("hot.rebuilt") == 0
    assert client.zcard(KEYS.hot) == 12
    assert " clean " not in (client.get(KEYS.marker) or "")  # a crash from now: rebuilt
    add_event(client, distinct_content(rng), id="item-after")
    wait_until(lambda: client.exists(KEYS.item("item-after")) == 1, timeout=10)
    again.signal(signal.SIGTERM)
    assert again.wait_exit(timeout=30) == 0

    # a change made while no daemon runs: the next start rebuilds
    run_cli(data, "add", "made without a daemon")
    third = daemons.daemon(data).start()
    client = daemons.client(third.url_from_stdout())
    third.wait_log("daemon.running")
    assert third.count_events("hot.rebuilt") == 1 and third.count_events("hot.kept") == 0
    wait_until(lambda: client.zcard(KEYS.hot) == 14, timeout=10)
    third.kill9()  # no clean mark: the next start rebuilds
    fourth = daemons.daemon(data).start()
    fourth.wait_log("daemon.running", timeout=60)
    assert fourth.count_events("hot.rebuilt") == 1


def test_a_rebuild_at_start_holds_the_entries_of_the_highest_scores(
    daemons: DaemonFactory,
) -> None:
    """Written while no daemon ran, the entries are scored together at the start (the
    scores of a list, domain.retention); at most `hot.max_entries` of them go to Redis,
    the highest first, each with its score."""
    data = daemons.data_dir()
    rng = random.Random(5)
    importance = {"low-a": 1, "low-b": 2, "low-c": 2, "top-5": 5, "top-4": 4, "top-3": 3}
    for entry_id, level in importance.items():
        content = distinct_content(rng)
        run_cli(data, "add", content, "--id", entry_id, "--importance", str(level))
    proc = daemons.daemon(data, env={"MNEMOD_HOT_MAX_ENTRIES": "3"}).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    assert proc.count_events("hot.rebuilt") == 1
    ranked = client.zrevrange(KEYS.hot, 0, -1, withscores=True)
    assert [entry_id for entry_id, _ in ranked] == ["top-5", "top-4", "top-3"]
    assert all(0 < score <= importance[entry_id] for entry_id, score in ranked)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0


def test_a_layer_of_the_older_layout_is_rebuilt_without_keyword_sets(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    """A clean stop of a daemon whose hot layer had a set per keyword (its mark has no
    `layout=`): the next start rebuilds the layer, deleting those sets, not keeps it."""
    data = daemons.data_dir()
    client = daemons.client(external.url)
    proc = daemons.daemon(data, redis_url=external.url).start()
    proc.wait_log("daemon.running")
    add_event(client, "The user prefers the Asia/Taipei timezone", id="tz")
    wait_until(lambda: client.exists(KEYS.item("tz")) == 1, timeout=10)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
    mark = client.get(KEYS.marker) or ""
    assert mark.endswith(" layout=2")
    client.set(KEYS.marker, mark.removesuffix(" layout=2"))  # as the older layout left it
    client.sadd("mnemod:{default}:kw:timezone", "tz")

    again = daemons.daemon(data, redis_url=external.url).start()
    again.wait_log("daemon.running")
    assert again.count_events("hot.rebuilt") == 1 and again.count_events("hot.kept") == 0
    assert client.keys("mnemod:{default}:kw:*") == []
    assert client.hget(KEYS.item("tz"), "keywords") is not None
    again.signal(signal.SIGTERM)
    assert again.wait_exit(timeout=30) == 0
