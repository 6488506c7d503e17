"""Leader lease per namespace: several daemons may share a Redis, one applies the events.

The lease is a string key holding the owner's id with a PX expiry. Acquire is SET NX PX;
renew and release are compare-and-act Lua scripts, so a daemon whose lease already lapsed
(and was taken over) can never extend or delete the new leader's lease.
"""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import redis
import structlog

from mnemod.redisio.keys import Keys

log = structlog.get_logger("mnemod.lease")

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class Lease:
    """`acquire()` when standing by, `renew()` well inside `ttl`, `release()` on shutdown.

    Each returns whether we hold the lease afterwards (release: whether we held it).
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, owner_id: str, ttl: timedelta | float
    ) -> None:
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
        self.ttl_ms = max(1, round(seconds * 1000))
        self.ttl = self.ttl_ms / 1000  # seconds: renew every ttl/3 or so
        self.client = client
        self.keys = keys
        self.key = keys.lease
        self.owner_id = owner_id
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self) -> bool:
        """Take the lease if free; if it is already ours, extend it."""
        if self.client.set(self.key, self.owner_id, nx=True, px=self.ttl_ms):
            log.info("lease.acquired", owner=self.owner_id, ttl_ms=self.ttl_ms)
            return True
        return self.renew()

    def renew(self) -> bool:
        """Extend the lease only if it is still ours; False means we lost it: stop writing."""
        return bool(self._renew(keys=[self.key], args=[self.owner_id, self.ttl_ms]))

    def release(self) -> bool:
        """Give the lease up (only if ours) so a standby takes over at once."""
        released = bool(self._release(keys=[self.key], args=[self.owner_id]))
        if released:
            log.info("lease.released", owner=self.owner_id)
        return released

    def clear(self, holder: str) -> bool:
        """Delete the lease only if `holder` still holds it (taking over from a dead owner)."""
        return bool(self._release(keys=[self.key], args=[holder]))

    def holder(self) -> str | None:
        """Owner id of the current leader, None when nobody holds the lease."""
        return lease_holder(self.client, self.keys)


def lease_holder(client: redis.Redis, keys: Keys) -> str | None:
    """Owner id of a namespace's leader, None when nobody holds its lease."""
    return cast("str | None", client.get(keys.lease))
