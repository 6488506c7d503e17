"""The consumer side of the events and rpc streams: acknowledging, counting what is
pending, trimming what was acknowledged. The writer decides when; this speaks Redis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis

from mnemod.redisio.keys import GROUP, Keys

ACK_CHUNK = 1000  # ids per XACK


def acknowledge(client: redis.Redis, keys: Keys, events: Sequence[str]) -> None:
    """XACK `events` of the events stream, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(events), ACK_CHUNK):
        pipe.xack(keys.events, GROUP, *events[start : start + ACK_CHUNK])
    pipe.execute()


def pending_events(client: redis.Redis, keys: Keys) -> int:
    """Events delivered to the group and not acknowledged yet."""
    summary = client.xpending(keys.events, GROUP)
    return int(summary.get("pending", 0)) if summary else 0


def trim(client: redis.Redis, keys: Keys, last_applied: str | None, dead_max_len: int) -> int:
    """Trim acknowledged events (below the oldest pending one, at most up to the last
    applied id) and answered requests (acknowledged as soon as they are answered), and cap
    the dead letters; returns how many entries went."""
    trimmed = 0
    for stream, floor in ((keys.events, last_applied), (keys.rpc, None)):
        summary = client.xpending(stream, GROUP)
        oldest = summary.get("min") if summary and summary.get("pending") else None
        minid = oldest or floor
        if stream == keys.rpc and oldest is None:
            minid = client.xinfo_stream(stream).get("last-generated-id")
        if minid:
            trimmed += int(client.xtrim(stream, minid=minid, approximate=False))
    trimmed += int(client.xtrim(keys.dead, maxlen=dead_max_len, approximate=True))
    return trimmed


def claim_stale_requests(
    client: redis.Redis, keys: Keys, consumer: str, min_idle_ms: int, count: int = 100
) -> list[tuple[str, dict[str, str]]]:
    """Requests delivered to a consumer of the group at least `min_idle_ms` ago and never
    answered (its daemon died), claimed for `consumer` to answer. Every daemon of the
    namespace reads the rpc stream, so none waits for the one that died to come back."""
    try:
        reply = client.xautoclaim(
            keys.rpc, GROUP, consumer, min_idle_time=min_idle_ms, start_id="0-0", count=count
        )
    except redis.ResponseError as exc:
        if str(exc).startswith("NOGROUP"):
            return []
        raise
    messages = cast(list[tuple[str, dict[str, str] | None]], reply[1] if reply else [])
    return [(message_id, fields) for message_id, fields in messages if fields is not None]
