"""The daemon's `once` ledger of a session in Redis: a set of the item ids already given,
expiring a day after its last change (`Keys.sessions`). The rpc server and the Claude Code
hook's fallback answer read and extend the same set."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import redis

from mnemod.files.session_ledger import SESSION_TTL_SECONDS
from mnemod.redisio.keys import Keys


def seen_once(client: redis.Redis, keys: Keys, session: str) -> set[str]:
    return set(cast(set[str], client.smembers(keys.sessions(session))))


def remember_once(client: redis.Redis, keys: Keys, session: str, ids: Iterable[str]) -> None:
    given = list(ids)
    if not given:
        return
    pipe = client.pipeline(transaction=True)
    pipe.sadd(keys.sessions(session), *given)
    pipe.expire(keys.sessions(session), SESSION_TTL_SECONDS)
    pipe.execute()
