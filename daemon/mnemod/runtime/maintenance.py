"""Maintenance that never holds up an answer: GC, expiry and the hot refresh run on the
writer's thread (one writer per namespace: only it changes the engine) in slices of about
`SLICE_SECONDS` between batches, and a request or event that arrives meanwhile waits for
one slice at most.

A job is started by a command (the scheduler's) or an `op gc` event and queued; one runs
at a time, and a job of a kind already queued or running is not queued twice (a full GC
also expires: an expiry while one waits is dropped). The writer runs a slice whenever no
event or request waits, and, under a load that never pauses, one after a batch once none
ran for `STARVED_SECONDS`. After each slice that changed the engine, the writer commits it
through the change log and brings the hot layer in step, as after any batch: a GC is
durable slice by slice, and a crash in the middle loses nothing committed (the next GC
finds what this one did not do). What each job finished with is handed to `finished`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from mnemod.runtime.hot_refresh import HotRefresh
from mnemod.runtime.hot_sync import HotSync
from mnemod.store.engine import Engine
from mnemod.store.gc_run import GcRun

log = structlog.get_logger("mnemod.maintenance")

SLICE_SECONDS = 0.015  # one slice while nothing waits
CATCH_UP_SECONDS = 0.01  # one slice after a batch, under a load that never pauses
STARVED_SECONDS = 0.2  # ... once none ran for this long


class Steps(Protocol):
    """A job done a slice at a time (store.gc_run.GcRun, runtime.hot_refresh.HotRefresh)."""

    changed: bool  # the last `run` changed the engine
    longest_step: float

    def run(self, seconds: float | None) -> bool: ...


@dataclass
class Job:
    kind: str  # "gc", "expiry", "hot_refresh", "gc_event"
    dry_run: bool = False
    by: str = "gc"
    steps: Steps | None = None
    started: float = 0.0
    slices: int = 0
    longest_slice: float = 0.0


class Maintenance:
    def __init__(
        self,
        engine: Engine,
        hot: HotSync,
        commit: Callable[[], None],
        finished: Callable[[Job, Any], None],
    ) -> None:
        """`commit` commits the engine's changes and brings the hot layer in step (the
        writer's); `finished` takes a job and its result (a GcReport, or the refresh's)."""
        self.engine, self.hot = engine, hot
        self.commit, self.finished = commit, finished
        self.queue: list[Job] = []
        self.last_run = time.monotonic()

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    @property
    def starved(self) -> bool:
        return bool(self.queue) and time.monotonic() - self.last_run > STARVED_SECONDS

    def start(self, kind: str, dry_run: bool = False, by: str = "gc") -> None:
        """Queue a job, unless one that does as much is queued or running."""
        for job in self.queue:
            if job.dry_run == dry_run and (
                job.kind == kind or (kind == "expiry" and job.kind in ("gc", "gc_event"))
            ):
                return
        self.queue.append(Job(kind, dry_run, by))

    def run(self, seconds: float | None) -> None:
        """About `seconds` of the job in hand (every queued job to its end with None)."""
        self.last_run = time.monotonic()
        deadline = None if seconds is None else time.perf_counter() + seconds
        while self.queue:
            job = self.queue[0]
            if job.steps is None:
                job.steps = self._steps_of(job)
                job.started = time.perf_counter()
            began = time.perf_counter()
            left = None if deadline is None else max(0.0, deadline - began)
            done = job.steps.run(left)
            job.slices += 1
            job.longest_slice = max(job.longest_slice, time.perf_counter() - began)
            if job.steps.changed:
                self.commit()  # durable slice by slice, then in the hot layer
            if not done:
                return
            self.queue.pop(0)
            self.finished(job, self._result(job.steps))
            if deadline is not None and time.perf_counter() >= deadline:
                return

    def _steps_of(self, job: Job) -> Steps:
        if job.kind == "hot_refresh":
            return HotRefresh(self.engine, self.hot)
        now = self.engine.clock.now()
        return GcRun(self.engine, now, job.dry_run, job.by, expire_only=job.kind == "expiry")

    @staticmethod
    def _result(steps: Steps) -> Any:
        if isinstance(steps, GcRun):
            return steps.report
        if isinstance(steps, HotRefresh):
            return steps.result
        return None
