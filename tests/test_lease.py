"""Leader lease with two contenders and real expiry in Redis."""

from __future__ import annotations

from datetime import timedelta

import redis

from helpers import wait_until
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import Lease

KEYS = Keys("mnemod", "ns")


def test_one_holder_at_a_time(redis_client: redis.Redis) -> None:
    first = Lease(redis_client, KEYS, "daemon-a", timedelta(seconds=30))
    second = Lease(redis_client, KEYS, "daemon-b", timedelta(seconds=30))
    assert first.acquire() is True
    assert second.acquire() is False
    assert first.acquire() is True  # idempotent for the holder
    assert first.holder() == second.holder() == "daemon-a"
    assert redis_client.get("mnemod:{ns}:lease") == "daemon-a"
    assert 0 < redis_client.pttl("mnemod:{ns}:lease") <= 30_000
    assert (first.ttl, first.ttl_ms) == (30.0, 30_000)


def test_only_the_holder_renews_or_releases(redis_client: redis.Redis) -> None:
    first = Lease(redis_client, KEYS, "daemon-a", 30.0)
    second = Lease(redis_client, KEYS, "daemon-b", 30.0)
    first.acquire()
    assert second.renew() is False
    assert second.release() is False
    assert first.holder() == "daemon-a"
    assert first.renew() is True
    assert first.release() is True
    assert first.holder() is None
    assert second.acquire() is True


def test_standby_takes_over_when_the_lease_lapses(redis_client: redis.Redis) -> None:
    first = Lease(redis_client, KEYS, "daemon-a", timedelta(milliseconds=200))
    second = Lease(redis_client, KEYS, "daemon-b", timedelta(milliseconds=200))
    assert first.acquire()
    wait_until(second.acquire, timeout=5.0)
    assert second.holder() == "daemon-b"
    assert first.renew() is False  # a lapsed leader cannot extend the new leader's lease
    assert first.release() is False
    assert second.holder() == "daemon-b"


def test_renew_extends_the_expiry(redis_client: redis.Redis) -> None:
    lease = Lease(redis_client, KEYS, "daemon-a", timedelta(seconds=10))
    lease.acquire()
    redis_client.pexpire("mnemod:{ns}:lease", 50)
    assert lease.renew() is True
    assert redis_client.pttl("mnemod:{ns}:lease") > 5_000


def test_no_lease_when_nobody_holds_it(redis_client: redis.Redis) -> None:
    lease = Lease(redis_client, KEYS, "daemon-a", 1.0)
    assert lease.holder() is None
    assert lease.renew() is False
