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
