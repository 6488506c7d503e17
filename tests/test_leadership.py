"""Sharing out the leadership of many namespaces (runtime.leadership) over presence sets in
a real Redis (redisio.presence), its timing driven by a fake clock."""

from __future__ import annotations

import socket

import redis

from helpers import wait_until
from mnemod.clock import FixedClock
from mnemod.redisio.keys import daemons_key
from mnemod.redisio.presence import Presence
from mnemod.runtime.leadership import Leadership

TTL = 15.0
GONE = f"{socket.gethostname()}:999999999:dead00"  # a process of this host that is no more


def leadership(client: redis.Redis, owner: str, clock: FixedClock, served: int) -> Leadership:
    share = Leadership(Presence(client, daemons_key("mnemod"), TTL), owner, clock, TTL)
    share.served = served
    return share


def test_presence_lists_who_is_there_until_they_leave_or_lapse(
    redis_client: redis.Redis,
) -> None:
    daemons = Presence(redis_client, daemons_key("mnemod"), TTL)
    assert daemons.here("a") == ["a"]
    assert sorted(daemons.here("b")) == ["a", "b"]
    assert 0 < redis_client.pttl("mnemod:daemons") <= 2 * TTL * 1000  # never left behind
    daemons.gone("a")
    assert daemons.present() == ["b"]
    brief = Presence(redis_client, daemons_key("mnemod"), 0.05)
    brief.here("c")
    wait_until(lambda: "c" not in brief.present(), timeout=5)  # lapsed on the server's clock


def test_each_daemon_takes_its_share_and_a_lease_left_free_after_the_grace(
    redis_client: redis.Redis,
) -> None:
    clock = FixedClock()
    first = leadership(redis_client, "host:1:a", clock, served=5)
    second = leadership(redis_client, "host:2:b", clock, served=5)
    first.beat()
    second.beat()
    first.beat()
    assert (first.live, first.share) == (2, 3)
    taken = [ns for ns in "abcde" if first.may_take(ns, clock.monotonic())]
    assert taken == ["a", "b", "c"]  # its share, ceil(5 / 2)
    assert not first.willing
    clock.advance(TTL - 0.1)
    assert not first.may_take("d", free_since=0.0)
    clock.advance(0.1)
    assert first.may_take("d", free_since=0.0)  # nobody took it for a lease time: no gap
    first.let_go("d")
    assert first.leading.keys() == {"a", "b", "c"}


def test_a_daemon_over_its_share_hands_over_only_what_it_led_long_enough(
    redis_client: redis.Redis,
) -> None:
    clock = FixedClock()
    first = leadership(redis_client, "host:1:a", clock, served=4)
    first.beat()
    assert [first.may_take(ns, 0.0) for ns in "abcd"] == [True] * 4  # alone: all four
    clock.advance(TTL / 2)
    leadership(redis_client, "host:2:b", clock, served=4).beat()
    first.beat()
    assert first.over_share and first.share == 2
    assert not first.hand_off("a")  # led for less than `hold`
    clock.advance(TTL / 2)
    assert [first.hand_off(ns) for ns in "abcd"] == [True, True, False, False]
    assert not first.over_share and first.leading.keys() == {"c", "d"}


def test_a_dead_daemon_of_this_host_is_struck_off_at_once(redis_client: redis.Redis) -> None:
    clock = FixedClock()
    Presence(redis_client, daemons_key("mnemod"), TTL).here(GONE)
    share = leadership(redis_client, "host:1:a", clock, served=20)
    share.beat()
    assert (share.live, share.share) == (1, 20)
    assert GONE not in Presence(redis_client, daemons_key("mnemod"), TTL).present()
    share.leave()
    assert redis_client.exists("mnemod:daemons") == 0
