"""Who is there: a sorted set of members, each scored with the moment its presence lapses.

The daemons sharing a Redis keep two kinds: `<prefix>:daemons`, every live daemon (how
many share out the leadership of the namespaces), and `<prefix>:{ns}:standby`, the daemons
ready to take a namespace over (whom its leader may hand it to). A member says it is
there again well inside `ttl`; one that stops saying so (a kill -9, a lost host) lapses
after `ttl`. Lapsed members are removed as the set is read, and the key itself expires
when nobody is left to renew it.

Times are the Redis server's (TIME, inside the script), so the hosts' clocks need not
agree.
"""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import redis

_HERE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""


class Presence:
    """`here(member)` renews a member and returns who is there; `gone(member)` leaves."""

    def __init__(self, client: redis.Redis, key: str, ttl: timedelta | float) -> None:
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
        self.ttl_ms = max(1, round(seconds * 1000))
        self.client = client
        self.key = key
        self._here = client.register_script(_HERE)

    def here(self, member: str) -> list[str]:
        """`member` is there for another `ttl`; everyone there now, `member` included."""
        return cast(list[str], self._here(keys=[self.key], args=[member, self.ttl_ms]))

    def present(self) -> list[str]:
        """Everyone there now."""
        return cast(list[str], self._here(keys=[self.key], args=["", self.ttl_ms]))

    def gone(self, member: str) -> None:
        self.client.zrem(self.key, member)
