"""The `changes` channel: one message per changed entry, its last op, in the batch's order."""

from __future__ import annotations

import json

import redis

from helpers import wait_until
from mnemod.redisio.changes import publish_changes
from mnemod.redisio.keys import Keys

KEYS = Keys("mnemod", "ns")


def test_each_change_is_one_message_in_order(redis_client: redis.Redis) -> None:
    listener = redis_client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # redis-py: untyped
    listener.subscribe(KEYS.changes)
    try:
        wait_until(lambda: redis_client.pubsub_numsub(KEYS.changes)[0][1] == 1)
        publish_changes(redis_client, KEYS, {"01A": "add", "01B": "remove", "01C": "update"})
        publish_changes(redis_client, KEYS, {})
        publish_changes(redis_client, KEYS, {"時區": "access"})
        got: list[dict[str, str]] = []

        def received() -> bool:
            message = listener.get_message(timeout=0.05)
            if message is not None:
                assert message["channel"] == KEYS.changes
                got.append(json.loads(message["data"]))
            return len(got) == 4

        wait_until(received)
    finally:
        listener.close()
    assert got == [
        {"op": "add", "id": "01A"},
        {"op": "remove", "id": "01B"},
        {"op": "update", "id": "01C"},
        {"op": "access", "id": "時區"},
    ]
