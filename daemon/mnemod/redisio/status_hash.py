"""The namespace's status hash `<prefix>:{ns}:status`: the leading daemon writes it on every
heartbeat, `mnemod status`, `mnemod doctor` and `Client.status` read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis

from mnemod.redisio.connection import replacing_foreign
from mnemod.redisio.keys import Keys


def write_status(client: redis.Redis, keys: Keys, fields: Mapping[str, str]) -> None:
    """HSET the fields (a key of another type there is replaced)."""
    replacing_foreign(
        client, keys.status, lambda: client.hset(keys.status, mapping=cast(Any, fields))
    )


def read_status(client: redis.Redis, keys: Keys) -> dict[str, str]:
    """The hash (empty when no daemon ever ran on the namespace)."""
    return cast(dict[str, str], client.hgetall(keys.status))
