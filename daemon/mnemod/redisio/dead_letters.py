"""The dead-letter stream `mnemod:{ns}:dead`: events and requests mnemod could not use, kept
with their fields as sent and the reason, for a person to look at."""

from __future__ import annotations

from typing import Any, cast

import redis

from mnemod.redisio.connection import as_sent, replacing_foreign
from mnemod.redisio.keys import GROUP, Keys


def dead_letter(
    client: redis.Redis,
    keys: Keys,
    entry_id: str,
    raw: dict[str, str],
    error: str,
    max_len: int,
    *,
    request: bool = False,
) -> None:
    """Add `raw` (its bytes as sent) with `error` and `event_id` to the stream, trimmed to
    about `max_len` entries. A request is marked `stream: rpc` and acknowledged in the same
    transaction: kept once, never lost. An events entry is acknowledged with its batch."""
    extra = {"error": error, "event_id": entry_id} | ({"stream": "rpc"} if request else {})
    fields = as_sent({**raw, **extra})

    def write() -> None:
        pipe = client.pipeline(transaction=True)
        pipe.xadd(keys.dead, cast(Any, fields), maxlen=max_len, approximate=True)
        if request:
            pipe.xack(keys.rpc, GROUP, entry_id)
        pipe.execute()

    replacing_foreign(client, keys.dead, write)


def dead_letter_error(
    client: redis.Redis, keys: Keys, event_id: str, scan_limit: int = 10_000
) -> str | None:
    """The error of the dead-letter entry for `event_id`, if there is one. Dead letters
    are written after their event, so only entries from `event_id` on are looked at."""
    start = event_id
    seen = 0
    while seen < scan_limit:
        batch = cast(
            list[tuple[str, dict[str, str]]],
            client.xrange(keys.dead, min=start, max="+", count=200),
        )
        for _entry_id, fields in batch:
            if fields.get("event_id") == event_id:
                return fields.get("error") or "no reason given"
        if len(batch) < 200:
            return None
        seen += len(batch)
        start = "(" + batch[-1][0]
    return None


def dead_letter_count(client: redis.Redis, keys: Keys) -> int:
    """Entries in the dead-letter stream (0 when there is none)."""
    return int(client.xlen(keys.dead)) if client.exists(keys.dead) else 0
