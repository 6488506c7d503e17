"""A namespace's runner while this daemon does not lead it: follow it into this daemon's
own folder (runtime.follower), or stand by where there is nothing to follow; say in the
namespace's standby set whether this daemon would take it over; and take the lease once it
is free and this daemon's share allows (runtime.leadership). A holder on this host whose
process is gone is cleared at once."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import redis
import structlog

from mnemod.errors import LockedError
from mnemod.processes import describe_owner, owner_is_gone
from mnemod.redisio.change_feed import ChangeFeed
from mnemod.redisio.connection import OUTAGE_ERRORS, REDIS_FAILURES, Backoff, describe
from mnemod.redisio.lease import Lease
from mnemod.runtime.follower import Follower
from mnemod.runtime.runner_context import RunnerContext, wait_after_refusal
from mnemod.store.engine import Engine
from mnemod.store.replica import folder_id

log = structlog.get_logger("mnemod.daemon")


class Standby:
    """`follow` until this daemon may lead; `stand_by` where it cannot follow."""

    def __init__(self, context: RunnerContext) -> None:
        self.context = context
        self.host, self.namespace = context.host, context.namespace

    def follow(self, lease: Lease) -> tuple[bool, Engine | None]:
        """While another daemon leads: follow the namespace into this daemon's own folder
        (runtime.follower) until this one holds the lease with its copy current. Returns
        (True, the engine to lead with), or (False, None) for a stop. A folder another
        live process writes (the lock is taken) cannot follow: it stands by, and leading
        (runtime.leading) opens the files once it holds the lease (True, None)."""
        host = self.host
        self.context.state = "standby"
        seen = _Seen()

        def may_lead() -> bool:
            now = self.context.beat = host.clock.monotonic()
            holder = lease.holder()
            if holder not in (None, host.owner) and owner_is_gone(holder):
                self._clear_dead_holder(lease)
                holder = lease.holder()
            if now - seen.ready_at >= lease.ttl / 3:
                self._say_ready()
                seen.ready_at = now
            if holder is None or holder == host.owner:
                seen.free_since = now if seen.free_since is None else seen.free_since
                return self._take(lease, seen.free_since)
            seen.free_since = None
            if not seen.announced:
                log.info("lease.standby", namespace=self.namespace, holder=holder)
                host.announce(self.namespace, "standby", describe_owner(holder))
                seen.announced = True
            return False

        backoff = Backoff(sleep=host.stop_requested.wait)
        try:
            while not host.stop_requested.is_set():
                follower = Follower(
                    self._open_copy,
                    host.client,
                    self.context.keys,
                    host.config,
                    host.clock,
                    host.metrics,
                    host.owner,
                    lease,
                    may_lead,
                    host.stop_requested,
                )
                try:
                    if self._leader_writes_my_folder():
                        return self.stand_by(lease), None
                    engine = follower.run()
                except LockedError:
                    return self.stand_by(lease), None
                except OUTAGE_ERRORS as exc:
                    host.wait_out(backoff, describe(exc))
                    continue
                except redis.ResponseError as exc:
                    wait_after_refusal(backoff, exc)
                    continue
                return engine is not None, engine
            return False, None
        finally:
            self._say_ready(False)

    def _leader_writes_my_folder(self) -> bool:
        """The namespace's leader writes this daemon's very folder (one data folder for
        both): nothing to follow, the files are the leader's."""
        leaders = ChangeFeed(self.host.client, self.context.keys, self.host.owner).leader_folder()
        return leaders is not None and leaders == folder_id(self.context.paths)

    def _open_copy(self) -> Engine:
        """This daemon's copy of the namespace, as a follower keeps it (store.replica)."""
        return self.context.open_engine(replica=True)

    def stand_by(self, lease: Lease) -> bool:
        """While another daemon leads (or this one leaves the namespace to a daemon under
        its share: runtime.leadership): wait until this one holds the lease (True) or a
        stop is asked (False)."""
        host = self.host
        announced = False
        self.context.state = "standby"
        free_since: float | None = None  # when the lease was first seen free
        try:
            while not host.stop_requested.is_set():
                self.context.beat = host.clock.monotonic()
                try:
                    self._clear_dead_holder(lease)
                    holder = lease.holder()
                    if holder is None or holder == host.owner:
                        free_since = self.context.beat if free_since is None else free_since
                        if self._take(lease, free_since):
                            return True
                    else:
                        free_since = None
                    self._say_ready()
                except OUTAGE_ERRORS as exc:
                    log.warning("redis.unavailable", error=describe(exc))
                    host.revive_embedded()
                if not announced:
                    holder = lease.holder()
                    log.info("lease.standby", namespace=self.namespace, holder=holder)
                    host.announce(self.namespace, "standby", describe_owner(holder))
                    announced = True
                host.stop_requested.wait(lease.ttl / 3)
            return False
        finally:
            self._say_ready(False)

    def _take(self, lease: Lease, free_since: float) -> bool:
        """Take the free lease, if this daemon's share allows it."""
        leadership = self.host.leadership
        if not leadership.may_take(self.namespace, free_since):
            return False
        if lease.acquire():
            log.info("lease.acquired", namespace=self.namespace, owner=self.host.owner)
            return True
        leadership.let_go(self.namespace)
        return False

    def _say_ready(self, ready: bool | None = None) -> None:
        """Stand by for the namespace in `standby` while under this daemon's share (a leader
        over its share hands it over then), not otherwise."""
        with contextlib.suppress(*REDIS_FAILURES):  # advisory: a refusal costs a hand-over
            if self.host.leadership.willing if ready is None else ready:
                self.context.standby.here(self.host.owner)
            else:
                self.context.standby.gone(self.host.owner)

    def _clear_dead_holder(self, lease: Lease) -> None:
        """A holder on this host whose process is gone (a kill -9, a crash) cannot renew:
        take its lease at once instead of waiting for it to lapse."""
        holder = lease.holder()
        if holder is None or holder == self.host.owner or not owner_is_gone(holder):
            return
        if lease.clear(holder):
            log.info("lease.cleared", holder=holder, reason="its process is gone")


@dataclass
class _Seen:
    """What a following runner noticed of the lease between its looks."""

    free_since: float | None = None  # when the lease was first seen free
    announced: bool = False
    ready_at: float = -math.inf  # when it last said it stands by
