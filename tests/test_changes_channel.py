"""The end of a writer batch (redisio.changes): one message per changed entry on the
`changes` channel, its last op, in the batch's order, and the batch's events acknowledged,
in the script of the batch's last hot-layer write or one of its own; none of it while
another owner holds the lease."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import cast

import pytest
import redis

from helpers import wait_until
from mnemod.redisio.change_feed import FencedOut
from mnemod.redisio.changes import BatchEnd
from mnemod.redisio.hot_layer import HotLayer
from mnemod.redisio.keys import GROUP, Keys
from test_hot_layer import item, snapshot

KEYS = Keys("mnemod", "ns")
END = {"op": "none", "id": "the end"}


class Listener:
    """The `changes` channel's messages, as a subscriber gets them."""

    def __init__(self, client: redis.Redis) -> None:
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # redis-py: untyped
        self.pubsub.subscribe(KEYS.changes)
        wait_until(lambda: client.pubsub_numsub(KEYS.changes)[0][1] == 1)
        self.got: list[dict[str, str]] = []

    def wait(self, count: int) -> list[dict[str, str]]:
        def received() -> bool:
            message = self.pubsub.get_message(timeout=0.05)
            if message is not None:
                assert message["channel"] == KEYS.changes
                self.got.append(json.loads(message["data"]))
            return len(self.got) >= count

        wait_until(received)
        return self.got

    def drained(self, client: redis.Redis) -> list[dict[str, str]]:
        """What arrived besides those waited for: all of it once a message sent after it
        is through."""
        client.publish(KEYS.changes, json.dumps(END))
        self.wait(len(self.got) + 1)
        while self.got[-1] != END:
            self.wait(len(self.got) + 1)
        return self.got[:-1]


@pytest.fixture
def listener(redis_client: redis.Redis) -> Iterator[Listener]:
    found = Listener(redis_client)
    try:
        yield found
    finally:
        found.pubsub.close()


def read_events(client: redis.Redis, count: int) -> list[str]:
    """`count` events XADDed and read by the group: pending until acknowledged."""
    client.xgroup_create(KEYS.events, GROUP, id="0", mkstream=True)
    for n in range(count):
        client.xadd(KEYS.events, {"op": "add", "data": json.dumps({"content": f"m{n}"})})
    read = cast(list[tuple[str, list[tuple[str, dict[str, str]]]]],
                client.xreadgroup(GROUP, "writer", {KEYS.events: ">"}, count=count))  # fmt: skip
    return [event_id for event_id, _ in read[0][1]]


def pending(client: redis.Redis) -> int:
    return int(client.xpending(KEYS.events, GROUP)["pending"])


def test_each_change_is_one_message_in_order(redis_client: redis.Redis, listener: Listener) -> None:
    layer = HotLayer(redis_client, KEYS)
    layer.apply([], [], BatchEnd.of({"01A": "add", "01B": "remove", "01C": "update"}))
    layer.apply([], [], BatchEnd.of({}))
    layer.apply([item("時區")], [], BatchEnd.of({"時區": "access"}))
    assert listener.wait(4) == [
        {"op": "add", "id": "01A"},
        {"op": "remove", "id": "01B"},
        {"op": "update", "id": "01C"},
        {"op": "access", "id": "時區"},
    ]


def test_the_events_are_acknowledged_with_the_last_write_of_the_batch(
    redis_client: redis.Redis, listener: Listener
) -> None:
    events = read_events(redis_client, 5)
    layer = HotLayer(redis_client, KEYS, batch_size=2)  # three script calls for five items
    items = [item(f"A{n}") for n in range(5)]
    layer.apply(items, [], BatchEnd.of({i.id: "add" for i in items}, events[:3]))
    assert pending(redis_client) == 2
    assert [m["id"] for m in listener.wait(5)] == ["A0", "A1", "A2", "A3", "A4"]
    layer.apply([], [], BatchEnd.of({}, events[3:]))  # nothing hot changed: the end alone
    assert pending(redis_client) == 0
    assert len(listener.drained(redis_client)) == 5


def test_a_batch_planned_from_what_redis_no_longer_holds_ends_once(
    redis_client: redis.Redis, listener: Listener
) -> None:
    events = read_events(redis_client, 1)
    layer = HotLayer(redis_client, KEYS)
    layer.put(item("A1"))
    redis_client.hset(KEYS.item("A1"), "key", "edited")  # a hand edit
    redis_client.set(KEYS.key("edited"), "A1")
    layer.apply([item("A1", key="moved")], [], BatchEnd.of({"A1": "update"}, events))
    assert redis_client.get(KEYS.key("moved")) == "A1"
    assert not redis_client.exists(KEYS.key("edited"))
    assert listener.drained(redis_client) == [{"op": "update", "id": "A1"}]
    assert pending(redis_client) == 0


@pytest.mark.parametrize("writes", [True, False], ids=["with writes", "alone"])
def test_a_deposed_leader_neither_tells_nor_acknowledges(
    redis_client: redis.Redis, listener: Listener, writes: bool
) -> None:
    events = read_events(redis_client, 2)
    fenced = HotLayer(redis_client, KEYS, owner="leader")
    redis_client.set(KEYS.lease, "leader", px=30_000)
    fenced.apply([item("A1")], [], BatchEnd.of({"A1": "add"}, events[:1]))
    assert listener.wait(1) == [{"op": "add", "id": "A1"}]
    assert pending(redis_client) == 1
    redis_client.set(KEYS.lease, "next-leader", px=30_000)  # deposed, frozen past its lease
    before = snapshot(redis_client)
    with pytest.raises(FencedOut, match="next-leader"):
        puts = [item("A2")] if writes else []
        fenced.apply(puts, [], BatchEnd.of({"A2": "add"}, events[1:]))
    assert pending(redis_client) == 1  # the next leader reads it again
    assert listener.drained(redis_client) == [{"op": "add", "id": "A1"}]
    assert snapshot(redis_client) == before
