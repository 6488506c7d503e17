"""Sharing out the leadership of many namespaces among the daemons that serve them.

Each namespace's lease still decides who leads it; this only decides which leases a daemon
reaches for. A daemon serving M namespaces while N daemons are live (`<prefix>:daemons`,
redisio.presence) takes a free lease while it leads fewer than ceil(M / N), its share. A
lease that stays free for `grace` (one lease TTL) is taken whatever the share, so no
namespace is left unled (daemons serving different lists, a count not yet refreshed). A
daemon leading more than its share hands a namespace it has led for at least `hold` over
to a daemon standing by for it that is under its own share (`<prefix>:{ns}:standby`): it
drains, releases the lease, and the other takes it at its next look. A daemon that joins
thus gets its share within a few lease TTLs; one that dies leaves its share to the others
once its presence lapses (at once when it lived on this host: its process is gone).
"""

from __future__ import annotations

import math
import threading

import structlog

from mnemod.clock import Clock
from mnemod.processes import owner_is_gone
from mnemod.redisio.connection import OUTAGE_ERRORS
from mnemod.redisio.presence import Presence

log = structlog.get_logger("mnemod.leadership")


class Leadership:
    def __init__(self, daemons: Presence, owner: str, clock: Clock, ttl: float) -> None:
        self.daemons = daemons
        self.owner = owner
        self.clock = clock
        self.grace = ttl  # a lease free this long is taken whatever the share
        self.hold = ttl  # a namespace is led at least this long before it is handed over
        self.served = 0  # namespaces this daemon serves
        self.live = 1  # live daemons, this one included
        self.leading: dict[str, float] = {}  # namespace → since when (clock.monotonic)
        self._lock = threading.Lock()

    @property
    def share(self) -> int:
        return max(1, math.ceil(self.served / self.live))

    # ---- the process's thread --------------------------------------------------------------
    def beat(self) -> None:
        """Say this daemon is live and count the live ones (a daemon of this host whose
        process is gone is struck off at once). A Redis error keeps the last count."""
        try:
            members = self.daemons.here(self.owner)
            gone = [m for m in members if m != self.owner and owner_is_gone(m)]
            for member in gone:
                self.daemons.gone(member)
        except OUTAGE_ERRORS:
            return
        live = max(1, len(members) - len(gone))
        if live != self.live:
            log.info("leadership.daemons", live=live, share=math.ceil(self.served / live))
        self.live = live

    def leave(self) -> None:
        try:
            self.daemons.gone(self.owner)
        except OUTAGE_ERRORS:
            return

    # ---- the runners' threads --------------------------------------------------------------
    def may_take(self, namespace: str, free_since: float) -> bool:
        """Whether to take the free lease of `namespace` (seen free since `free_since`); a
        yes counts it as led until `let_go`."""
        now = self.clock.monotonic()
        with self._lock:
            if namespace in self.leading:
                return True
            if len(self.leading) < self.share or now - free_since >= self.grace:
                self.leading[namespace] = now
                return True
            return False

    def let_go(self, namespace: str) -> None:
        """`namespace` is not led by this daemon (any more)."""
        with self._lock:
            self.leading.pop(namespace, None)

    @property
    def willing(self) -> bool:
        """Under its share: a leader may hand this daemon a namespace."""
        with self._lock:
            return len(self.leading) < self.share

    @property
    def over_share(self) -> bool:
        with self._lock:
            return len(self.leading) > self.share

    def hand_off(self, namespace: str) -> bool:
        """Whether to hand `namespace` over (someone under its share stands by for it: the
        caller knows); a yes counts it as no longer led."""
        now = self.clock.monotonic()
        with self._lock:
            since = self.leading.get(namespace)
            if since is None or len(self.leading) <= self.share or now - since < self.hold:
                return False
            del self.leading[namespace]
            return True
