"""The writer's read of the events stream on a real redis-server: a connection error in
any reply of its pipeline is raised as that error (the daemon's loop waits out an outage),
never read as a reply."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from mnemod.redisio.keys import Keys
from mnemod.redisio.streams import EventStream

KEYS = Keys("mnemod", "default")


def test_a_lost_node_in_the_read_s_pipeline_is_raised_as_a_connection_error(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = EventStream(redis_client, KEYS)
    stream.ensure_groups()
    redis_client.xadd(KEYS.events, {"op": "add", "data": "{}"})
    real = redis.client.Pipeline.execute

    def second_reply_lost(self: redis.client.Pipeline, raise_on_error: bool = True) -> Any:
        replies = real(self, raise_on_error)
        if len(replies) > 1:  # as a cluster pipeline answers when a node went mid-failover
            replies[1] = redis.ConnectionError("Connection closed by server.")
        return replies

    monkeypatch.setattr(redis.client.Pipeline, "execute", second_reply_lost)
    with pytest.raises(redis.ConnectionError, match="closed by server"):
        stream.read_after("writer", {KEYS.events: ">"}, 10, None, "0-0")
