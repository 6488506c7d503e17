"""A leader's lease kept while it starts up.

Opening the files, catching up and rebuilding the hot layer of a large namespace can take
longer than the lease (1.4-5 s at 100,000 memories on a loaded machine, against a 2 s
lease), and the lead loop renews only once it turns. So a thread renews the lease every
third of its TTL from the moment the leader starts until its loop takes over, and the
start-up looks between its steps: once another daemon holds the lease it stops
(LeaseLost) before its next step, so a deposed leader neither announces nor writes. Its
Redis writes meanwhile are fenced by their own scripts (a publish and a hot-layer batch
look at the lease first).
"""

from __future__ import annotations

import contextlib
import threading
from types import TracebackType

import structlog

from mnemod.clock import Clock
from mnemod.errors import MnemodError
from mnemod.redisio.connection import REDIS_FAILURES, describe
from mnemod.redisio.lease import Lease

log = structlog.get_logger("mnemod.daemon")

POLL_SECONDS = 0.05  # how often the thread looks at the clock (renewing is ttl/3 apart)


class LeaseLost(MnemodError):
    """Another daemon holds the namespace now: stop writing at once."""


class StartupLease:
    """`with StartupLease(lease, clock) as kept:` renews `lease` on a thread until `stop()`;
    `kept.check()` renews at once and raises LeaseLost once it is someone else's (entering
    checks too)."""

    def __init__(self, lease: Lease, clock: Clock, poll: float = POLL_SECONDS) -> None:
        self.lease = lease
        self.clock = clock
        self.poll = min(poll, lease.ttl / 6)
        self.renewed_at = clock.monotonic()  # the last renewal that held (clock.monotonic)
        self.lost_to: str | None = None  # the holder found once it was lost
        self._lost = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mnemod-startup-lease", daemon=True)
        self._warned = False

    def __enter__(self) -> StartupLease:
        self.check()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """End the renewals on the thread (the lead loop renews from now on)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def check(self) -> None:
        """Renew now (a round trip: the next step is sure to run under the lease); LeaseLost
        if another daemon took the lease while this one started."""
        self._renew()
        if self._lost:
            raise LeaseLost(f"lease of {self.lease.key} is held by {self.lost_to} (at start-up)")

    def _run(self) -> None:
        every = self.lease.ttl / 3
        while not self._lost and not self._stop.wait(self.poll):
            if self.clock.monotonic() - self.renewed_at >= every:
                self._renew()

    def _renew(self) -> None:
        with self._lock:  # the thread's and the start-up's, one at a time
            if not self._lost:
                self._renew_held()

    def _renew_held(self) -> None:
        # acquire, as the lead loop does: a lease that lapsed and nobody took is safe to
        # take back; one another daemon holds is lost
        try:
            held = self.lease.acquire()
        except REDIS_FAILURES as exc:  # an outage: the start-up's own steps meet it too
            if not self._warned:
                log.warning("lease.renew_failed", at="start-up", error=describe(exc))
                self._warned = True
            return
        self._warned = False
        if held:
            self.renewed_at = self.clock.monotonic()
            return
        self._lost = True
        with contextlib.suppress(*REDIS_FAILURES):  # only for the message
            self.lost_to = self.lease.holder()
