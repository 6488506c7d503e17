"""A new leader's writer and the events a deposed leader took: every leader reads under one
consumer name, so a daemon whose lease lapsed while it ran (a stall longer than the lease)
can still read a batch after the new leader read the backlog. Those events are in the
consumer's pending list, before what the new leader reads next; they are applied first, in
order, not skipped as applied once later ids are."""

from __future__ import annotations

import json
import random
from pathlib import Path

from daemon_proc import Client as RedisClient
from daemon_proc import add_event, distinct_content
from mnemod.redisio.keys import GROUP
from mnemod.runtime.writer import CONSUMER
from test_writer import KEYS, pending, running_writer, take_events


def test_events_a_deposed_leader_took_are_applied_before_the_next(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    rng = random.Random(3)
    with running_writer(tmp_path, redis_client) as writer:
        add_event(redis_client, distinct_content(rng), id="first")
        take_events(writer)
        writer.step(1)  # the backlog read: new events from here on
        add_event(redis_client, distinct_content(rng), id="taken")
        access = {"op": "access", "data": json.dumps({"id": "taken"})}
        redis_client.xadd(KEYS.events, access)
        # the deposed leader's read, under the name every leader reads with
        stolen = redis_client.xreadgroup(GROUP, CONSUMER, {KEYS.events: ">"}, count=1)
        assert len(stolen[0][1]) == 1
        take_events(writer)
        writer.step(1)
        assert redis_client.xlen(KEYS.dead) == 0, redis_client.xrange(KEYS.dead)
        taken = writer.engine.find("taken")
        assert taken is not None and taken.access_count == 1
        assert pending(redis_client) == 0
