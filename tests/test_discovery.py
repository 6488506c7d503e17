"""Which namespaces a daemon serving `*` finds: those with files in the data folder and
those with an events stream in Redis (runtime.discovery)."""

from __future__ import annotations

from pathlib import Path

import redis

from mnemod.redisio.keys import Keys
from mnemod.runtime.discovery import found_namespaces


def test_namespaces_are_found_by_their_files_and_by_their_events_stream(
    tmp_path: Path, redis_client: redis.Redis
) -> None:
    (tmp_path / "restored" / "l3").mkdir(parents=True)  # a backup put back, say
    (tmp_path / "redis").mkdir()  # the embedded server's folder: no namespace
    redis_client.xadd(Keys("mnemod", "newagent").events, {"op": "add", "data": "{}"})
    redis_client.xadd("mnemod:{bad name!}:events", {"op": "add"})  # no valid name
    redis_client.set(Keys("mnemod", "notastream").events, "x")  # not a stream
    redis_client.xadd(Keys("other", "elsewhere").events, {"op": "add"})  # another prefix
    found = found_namespaces(redis_client, "mnemod", tmp_path)
    assert found == ["newagent", "restored"]
    redis_client.delete("mnemod:{bad name!}:events", Keys("other", "elsewhere").events)
