"""Maintenance that never holds up an answer: GC, expiry and the hot refresh run on the
writer's thread (one writer per namespace: only it changes the engine) in slices of about
`SLICE_SECONDS` between batches, and a request or event that arrives meanwhile waits for
one slice at most.

A checkpoint lists each entry's stored JSON (files.entry_texts.EntryTexts); the writer
prepares one only once none waits to be serialized (`texts_ready` serializes them a slice
at a time first), so that taking it copies references and serializes nothing.

A job is started by a command (the scheduler's) or an `op gc` event and queued; one runs
at a time, and a job of a kind already queued or running is not queued twice (a full GC
also expires: an expiry while one waits is dropped). The writer runs a slice whenever no
event or request waits, and, under a load that never pauses, one after a batch once none
ran for `STARVED_SECONDS`. What the slices changed is committed through the change log and
brought into the hot layer every `COMMIT_SECONDS` or `COMMIT_CHANGES` changed entries and
at the job's end, as after any batch
(a batch's commit takes it too): a GC is durable a few slices at a time, and a crash in
the middle loses nothing committed (the next GC finds what this one did not do). A job
begins once the selections answered before it are recorded, in slices too. What each job
finished with is handed to `finished`. While jobs are queued the cyclic collector runs only
after each slice, over the young generations (store.heap.YoungOnly): a full pass over a
GC's index took 100-150 ms at 100,000 entries.
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
from mnemod.store.heap import YoungOnly

log = structlog.get_logger("mnemod.maintenance")

STALL_SECONDS = 0.05  # a stretch of the writer's loop longer than this is logged
SLICE_SECONDS = 0.015  # one slice while nothing waits
CATCH_UP_SECONDS = 0.01  # one slice after a batch, under a load that never pauses
STARVED_SECONDS = 0.02  # ... once none ran for this long (a third of the time, at most)
COMMIT_SECONDS = 0.25  # a job's changes are committed this often, and at its end,
COMMIT_CHANGES = 8  # or once this many entries changed (a commit brings each into Redis)
SLICE_CHANGES = 32  # a GC slice ends once this many entries changed (a commit of a 15 ms
# slice's folds took 60 ms of CPU at 20,000 entries)


class Steps(Protocol):
    """A job done a slice at a time (store.gc_run.GcRun, runtime.hot_refresh.HotRefresh)."""

    changed: bool  # the last `run` changed the engine

    def run(self, seconds: float | None) -> bool: ...


@dataclass
class Job:
    kind: str  # "gc", "expiry", "hot_refresh", "gc_event"
    dry_run: bool = False
    by: str = "gc"
    steps: Steps | None = None
    ready: bool = False  # the selections answered before it began are recorded
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
        settle: Callable[[float | None], bool],
    ) -> None:
        """`commit` commits the engine's changes and brings the hot layer in step (the
        writer's); `finished` takes a job and its result (a GcReport, or the refresh's);
        `settle` records answered selections for about that long, True once none waits
        (a job begins after them: GC must not expire what was just used)."""
        self.engine, self.hot = engine, hot
        self.commit, self.finished, self.settle = commit, finished, settle
        self.queue: list[Job] = []
        self.last_run = self.engine.clock.monotonic()
        self.committed_at = self.engine.clock.monotonic()
        self.uncommitted = False
        self.collector: YoungOnly | None = None  # held off while jobs are queued

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    @property
    def starved(self) -> bool:
        return bool(self.queue) and self.engine.clock.monotonic() - self.last_run > STARVED_SECONDS

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
        self.last_run = self.engine.clock.monotonic()
        deadline = None if seconds is None else time.perf_counter() + seconds
        while self.queue:
            job = self.queue[0]
            collector = self.collector = self.collector or YoungOnly()
            if not job.ready:
                job.ready = self.settle(None if deadline is None else SLICE_SECONDS)
                if not job.ready:
                    return
            if job.steps is None:
                job.steps = self._steps_of(job)
                job.started = time.perf_counter()
            stall = started()
            began = stall[0]
            left = None if deadline is None else max(0.0, deadline - began)
            try:
                done = job.steps.run(left)
            except BaseException:
                self._release()
                raise
            collector.collect()
            job.slices += 1
            job.longest_slice = max(job.longest_slice, time.perf_counter() - began)
            note_stall(f"{job.kind} slice", stall)
            self.uncommitted = self.uncommitted or job.steps.changed
            if self.uncommitted and (
                done
                or len(self.engine.changed) >= COMMIT_CHANGES
                or self.engine.clock.monotonic() - self.committed_at >= COMMIT_SECONDS
            ):
                committing = started()
                self.commit()  # durable a few slices at a time, then in the hot layer
                self.committed_at, self.uncommitted = self.engine.clock.monotonic(), False
                note_stall(f"{job.kind} commit", committing)
            if not done:
                return
            self.queue.pop(0)
            self.finished(job, self._result(job.steps))
            if not self.queue:
                self._release()
            if deadline is not None and time.perf_counter() >= deadline:
                return

    def _release(self) -> None:
        if self.collector is not None:
            self.collector.release()
            self.collector = None

    def _steps_of(self, job: Job) -> Steps:
        if job.kind == "hot_refresh":
            return HotRefresh(self.engine, self.hot)
        now = self.engine.clock.now()
        return GcRun(
            self.engine,
            now,
            job.dry_run,
            job.by,
            expire_only=job.kind == "expiry",
            changes_per_run=SLICE_CHANGES,
        )

    @staticmethod
    def _result(steps: Steps) -> Any:
        if isinstance(steps, GcRun):
            return steps.report
        if isinstance(steps, HotRefresh):
            return steps.result
        return None


def texts_ready(engine: Engine) -> bool:
    """Serialize a slice of the entries changed since they last were; True when none waits."""
    texts = engine.texts
    if texts.cold:
        texts.warm(SLICE_SECONDS, engine.entries)
    return not texts.cold


def started() -> tuple[float, float]:
    """The moment a stretch of the writer's work begins, for `note_stall`."""
    return time.perf_counter(), time.thread_time()


def note_stall(what: str, began: tuple[float, float]) -> None:
    """Log a stretch of the writer's work since `began` that kept every request and event
    waiting longer than `STALL_SECONDS`, with what it was and how much of it was the
    writer's own work (`cpu_ms`: on a loaded machine the rest is waiting for a core)."""
    took = time.perf_counter() - began[0]
    if took > STALL_SECONDS:
        cpu = time.thread_time() - began[1]
        log.warning(
            "writer.stalled", what=what, ms=round(took * 1000, 1), cpu_ms=round(cpu * 1000, 1)
        )
