"""The single writer of a namespace: reads agent events and RPC requests from Redis,
applies them through the engine, commits each batch to the change log, acknowledges its
events once that record is durable, then brings the hot layer in step.

Exactly once: each record carries the last applied event id; after a crash the pending
events are read again and those at or below that id are acknowledged without being applied.
That needs events applied in id order: a batch another process read under the leaders'
consumer name meanwhile (a deposed leader) is read from the pending list before later ones.

While the log cannot be written (a full or read-only disk) no more events are read: the
batch's record is tried again, with a backoff, and requests are still answered. A hot-layer
update that Redis did not take is kept and sent again. Checkpoints are written on another
thread. Whenever no request waits, it does a slice of the bookkeeping answers and changes
leave (runtime.bookkeeping) and of the maintenance jobs in hand (runtime.maintenance: GC,
expiry, the hot refresh).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config
from mnemod.errors import InvalidInputError, NotFoundError
from mnemod.redisio.changes import BatchEnd
from mnemod.redisio.connection import REDIS_FAILURES
from mnemod.redisio.dead_letters import dead_letter
from mnemod.redisio.events import Event, is_applied, located, parse_event, stream_id_key
from mnemod.redisio.keys import Keys
from mnemod.redisio.streams import Batches, EventStream, GroupMissingError
from mnemod.runtime import bookkeeping, maintenance
from mnemod.runtime.batching import BatchSize
from mnemod.runtime.bookkeeping import Bookkeeping, Settler
from mnemod.runtime.commands import Command
from mnemod.runtime.feed_publisher import FeedPublisher
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.maintenance import Job, Maintenance
from mnemod.runtime.metrics import Metrics
from mnemod.store.engine import Engine
from mnemod.store.heap import freeze_young, release_free_memory

log = structlog.get_logger("mnemod.writer")
CONSUMER = "writer"  # one name for every leader, so a new leader inherits the pending list
# While a checkpoint is being written: how soon the writer looks whether it is done.
SAVE_POLL_MS = 10
# Events are applied in one step for STEP_SECONDS of the writer thread's CPU time at most,
# then it commits, answers and reads on: on a machine other work shares, a bound on the
# clock's time would cut the batches short (and pay their commit, fsync and hot-layer
# script for fewer events) while the writer waits for a core. STEP_WALL_SECONDS on the
# clock bounds how long a request read meanwhile waits even so.
STEP_SECONDS = 0.05
STEP_WALL_SECONDS = 0.25


class RequestHandler(Settler, Protocol):
    """Answers requests from the rpc stream (runtime.rpc_server.RpcServer)."""

    def handle(self, request_id: str, raw: dict[str, str]) -> None: ...

    def collect(self) -> None: ...


@dataclass
class _Checkpoint:
    """A checkpoint being written on the saver thread."""

    done: Future[tuple[int, float]]  # its seq, and the seconds the write took
    prepared: float  # the seconds taking it took


@dataclass
class BatchResult:
    applied: int = 0
    skipped: int = 0
    dead: int = 0
    rpc: int = 0
    ops: dict[str, int] = field(default_factory=dict)


class Writer:
    def __init__(
        self,
        engine: Engine,
        client: redis.Redis,
        keys: Keys,
        config: Config,
        clock: Clock,
        hot: HotSync,
        metrics: Metrics,
        rpc: RequestHandler | None = None,
        work_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        """`work_clock`: seconds of the writer thread's own work (CPU time), which bound
        a step (STEP_SECONDS)."""
        self.engine = engine
        self.commits = engine.commits  # when changes are durable, and what follows them
        self.client = client
        self.keys = keys
        self.stream = EventStream(client, keys)
        self.config = config
        self.clock = clock
        self.work_clock = work_clock
        self.hot = hot
        self.metrics = metrics
        self.rpc = rpc
        self.batch = BatchSize(config.daemon.batch_size)  # events a read takes
        self.unacked: list[str] = []  # applied (or skipped), not yet acknowledged
        self.hot_pending: dict[str, str] = {}  # changes Redis has not taken yet
        self.books = Bookkeeping(engine, hot, rpc, self.publish)
        self.maintenance = Maintenance(
            engine, hot, self._commit_batch, self._job_finished, self._settle
        )
        # the backlog (delivered before a crash, never acknowledged) first, then new ones
        self.read_from = {keys.events: "0", keys.rpc: "0"}
        # events read and not yet applied: a step applies events for STEP_SECONDS of work
        # at most, the rest wait here for the next (they stay pending in Redis meanwhile)
        self.held: list[tuple[str, dict[str, str]]] = []
        self.last_read = engine.last_event_id or "0-0"  # the last event this writer read
        self.last_commit = self.clock.monotonic()
        self.snapshot_interval = 2.0
        self.job_results: dict[str, dict[str, Any]] = {}
        self.groups_recreated = False
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemod-checkpoint")
        self._checkpoint: _Checkpoint | None = None
        self.feed: FeedPublisher | None = None  # publishes records and checkpoints (leading)

    def close(self) -> None:
        """Wait for a checkpoint being written (the log holds everything without it)."""
        self._saver.shutdown(wait=True)
        if self._checkpoint is not None:
            self._collect(wait=True)

    # ---- set-up ----------------------------------------------------------------------
    def ensure_groups(self) -> None:
        """Create the consumer groups (from the stream's start: events written before the
        first daemon ran are applied too)."""
        self.stream.ensure_groups()

    def reread_pending(self, *, data_lost: bool = False) -> None:
        """After a lost connection: read both streams' pending entries again from the
        start. Redis may have delivered a batch whose reply went with the connection; those
        events and requests are pending for this consumer and nobody else reads them, so
        they would wait for the next start (an agent's request until it gave up). What was
        applied is skipped by its id; an answered request is no longer pending. Events held
        from the last read are pending too: they are read again with the rest, unless Redis
        lost its data (`data_lost`): then they are nowhere but here, and are applied as
        held before anything read anew."""
        self.read_from = dict.fromkeys(self.read_from, "0")
        if not data_lost:
            self.held = []

    # ---- the loop body -----------------------------------------------------------------
    def step(self, block_ms: int) -> BatchResult:
        """Read one batch of events and requests (as many as `batch` says: more while a
        burst waits), apply it, sync the hot layer; with none waiting, a slice of the
        bookkeeping (runtime.bookkeeping). Events are applied for STEP_SECONDS of the
        writer's work at most (STEP_WALL_SECONDS on the clock): the rest of a read is held
        for the next step, so a request read meanwhile waits for a commit of what was
        applied, not for the whole read (a read of 200 adds at 100,000 memories is about
        half a second of work). The next read's count follows the work a step took."""
        streams = dict(self.read_from)
        held, self.held = self.held, []
        if self.commits.failing:
            del streams[self.keys.events]  # no more events until the log takes the last
            self.held, held = held, []
        elif held:
            del streams[self.keys.events]  # those read before first
        backlog = bool(held) or any(v != ">" for v in streams.values())
        deferred = self.books.due
        busy = self.maintenance.busy
        wait = None if backlog or deferred or busy else block_ms  # None: look, don't wait
        if (self._checkpoint is not None or self.commits.failing) and wait is not None:
            wait = min(SAVE_POLL_MS if self._checkpoint is not None else 100, wait)
        try:
            after = self.last_read if streams.get(self.keys.events) == ">" else None
            batches, taken = self.stream.read_after(
                CONSUMER, streams, self.batch.count, wait, after
            )
        except GroupMissingError as exc:
            log.warning("events.group_missing", stream=self.keys.events, error=str(exc))
            self.ensure_groups()
            self.groups_recreated = True  # Redis may have lost its data: the daemon checks
            return BatchResult()
        batches = self._in_order(streams, batches, taken)
        if held:
            batches = [(self.keys.events, held), *batches]
        began = maintenance.started()
        read_at = (self.clock.monotonic(), self.work_clock())
        result = BatchResult()
        got: dict[str, int] = {}
        if not any(messages for _, messages in batches):
            if deferred:
                self.books.run(bookkeeping.SLICE_SECONDS)
            if busy:
                self.maintenance.run(maintenance.SLICE_SECONDS)
        for stream, messages in batches:
            if stream not in streams:  # held from the last read
                self._apply_within_step(messages, read_at, result)
                continue
            got[stream] = len(messages)
            if messages and stream == self.keys.events:
                self.last_read = messages[-1][0]
            if messages and streams[stream] != ">":
                # the backlog is read by id: go on after the last one (it stays pending
                # until the snapshot covers it, so re-reading from "0" would see it again)
                self.read_from[stream] = messages[-1][0]
            if stream == self.keys.events:
                self._apply_within_step(messages, read_at, result)
                continue
            for event_id, raw in messages:
                self._answer(event_id, raw or {})
                result.rpc += 1
        for stream, start in streams.items():
            if start != ">" and got.get(stream, 0) == 0:
                self.read_from[stream] = ">"
        if result.applied or result.dead or result.skipped or result.rpc:
            try:
                if result.applied or result.dead or result.skipped:
                    self._commit_batch()
                else:
                    self.publish(self.engine.drain_changes())
            finally:
                if self.rpc is not None:
                    self.rpc.collect()  # Redis's replies to the answers, read meanwhile
            self._log_batch(result)
            if deferred and self.books.starved:
                self.books.run(bookkeeping.CATCH_UP_SECONDS)
            if busy and self.maintenance.starved:
                self.maintenance.run(maintenance.CATCH_UP_SECONDS)
        if self.keys.events in streams:
            took = self.work_clock() - read_at[1]
            self.batch.taken(got.get(self.keys.events, 0), took, self.config.daemon.batch_size)
        maintenance.note_stall("step", began)
        return result

    def _apply_within_step(
        self,
        messages: list[tuple[str, dict[str, str]]],
        since: tuple[float, float],
        result: BatchResult,
    ) -> None:
        """Apply `messages` in order until STEP_SECONDS of work (or STEP_WALL_SECONDS on
        the clock) have passed `since` (the clock's time, the work clock's); hold the rest."""
        monotonic, work = self.clock.monotonic, self.work_clock
        wall_end, work_end = since[0] + STEP_WALL_SECONDS, since[1] + STEP_SECONDS
        for n, (event_id, raw) in enumerate(messages):
            if n and (work() >= work_end or monotonic() >= wall_end):
                self.held = messages[n:]
                return
            self._apply_one(event_id, raw or {}, result)

    def _in_order(self, streams: dict[str, str], batches: Batches, taken: str | None) -> Batches:
        """New events read after some that another process took under this consumer name
        since this writer's last read (a leader whose lease lapsed while it ran, reading on
        as the next one took over; `taken`: the first event after the last read pending for
        this name, read with the batch): this read's events are left to the next step,
        which reads the pending list from the last one read, the taken ones first, in
        order. Applied after later ones, they would be skipped as applied: lost."""
        events = self.keys.events
        if streams.get(events) != ">" or taken is None:
            return batches
        for stream, messages in batches:
            if stream != events or not messages:
                continue
            first = messages[0][0]
            if stream_id_key(taken) >= stream_id_key(first):
                return batches
            log.warning("events.taken_meanwhile", after=self.last_read, before=first)
            self.read_from[events] = self.last_read
            return [(s, m) for s, m in batches if s != events]
        return batches

    def publish(self, changes: dict[str, str], ack: bool = False) -> None:
        """Bring the hot layer in step, tell subscribers what changed and, with `ack` (the
        caller made them durable), acknowledge the events applied: in one script with the
        last hot-layer write (redisio.changes). Accesses alone (every resolve records some)
        are left to the bookkeeping. What Redis did not take (a dropped connection) is kept
        and sent with the next changes, the acknowledgements with the next `ack`."""
        fresh = self.books.note(changes)
        pending = self.hot_pending
        for entry_id, op in fresh.items():
            pending.pop(entry_id, None)
            pending[entry_id] = op
        events = self.unacked if ack else []
        if not pending and not events:
            return
        self.hot_pending = {}
        if ack:
            self.unacked = []
        try:
            self.hot.apply_changes(self.engine, pending, BatchEnd.of(pending, events))
        except BaseException as exc:
            self.unacked = events + self.unacked  # durable: acknowledged (or skipped) later
            if isinstance(exc, REDIS_FAILURES):
                for entry_id, op in pending.items():  # newer changes win
                    self.hot_pending.setdefault(entry_id, op)
            raise

    def _apply_one(self, event_id: str, raw: dict[str, str], result: BatchResult) -> None:
        self.unacked.append(event_id)
        if is_applied(event_id, self.engine.last_event_id):
            result.skipped += 1  # applied before a crash; its effect is in the log
            return
        try:
            event = parse_event(event_id, raw, self.config)
            self.apply(event)
        except InvalidInputError as exc:
            self.dead_letter(event_id, raw, str(located(exc, event_id)))
            result.dead += 1
        except NotFoundError as exc:
            self.dead_letter(event_id, raw, str(exc))
            result.dead += 1
        else:
            result.applied += 1
            result.ops[event.op] = result.ops.get(event.op, 0) + 1
        self.engine.mark_applied(event_id)

    def apply(self, event: Event) -> None:
        engine = self.engine
        if event.op == "add" and event.new is not None:
            engine.add(event.new, by=event.by)
        elif event.op == "access" and event.selected:
            if engine.find(event.target) is not None:  # a follower's answer: gone since is fine
                engine.access(event.target, selected=True, times=event.times)
        elif event.op == "access":
            engine.access(event.target, times=event.times)
        elif event.op == "update" and event.fields is not None:
            engine.update(event.target, event.fields, by=event.by)
        elif event.op == "remove":
            engine.remove(event.target, by=event.by)
        elif event.op == "promote":
            engine.promote(event.target, by=event.by)
        elif event.op == "gc":  # started: its report when it is done (_job_finished)
            self.books.seal()
            self.maintenance.start("gc_event", dry_run=event.dry_run, by=event.by)

    def dead_letter(
        self, event_id: str, raw: dict[str, str], error: str, request: bool = False
    ) -> None:
        max_len = self.config.daemon.stream_max_len
        dead_letter(self.client, self.keys, event_id, raw, error, max_len, request=request)
        self.metrics.event_dead_lettered(self.keys.namespace)
        log.warning(
            "events.dead_lettered", event_id=event_id, op=raw.get("op", "")[:20], error=error[:300]
        )

    def _answer(self, request_id: str, raw: dict[str, str]) -> None:
        """The handler answers and acknowledges the request itself."""
        if self.rpc is None:
            self.dead_letter(request_id, raw, "rpc: this daemon serves no requests", request=True)
        else:
            self.rpc.handle(request_id, raw)

    def _log_batch(self, result: BatchResult) -> None:
        self.metrics.event_applied(self.keys.namespace, result.applied)
        only_requests = not (result.applied or result.skipped or result.dead)
        (log.debug if only_requests else log.info)(
            "events.batch",
            applied=result.applied,
            skipped=result.skipped,
            dead=result.dead,
            rpc=result.rpc,
            ops=result.ops,
            last_event_id=self.engine.last_event_id,
        )

    # ---- durability ----------------------------------------------------------------------
    def _commit_batch(self) -> None:
        """Commit the batch's changes, then bring them into the hot layer and acknowledge
        its events in one script: an agent that saw its event acknowledged finds the item
        in Redis. A failed append leaves them unacknowledged (retried by `commit`); a hot
        layer Redis did not take delays the acknowledgement until it does."""
        self.engine.save()
        self.publish(self.engine.drain_changes(), ack=True)

    def commit(self, force: bool = False, checkpoint: bool = False) -> bool:
        """What the loop does between batches: commit accesses every `snapshot_interval`
        (and a record a failed append left, once its retry is due), bring derived files up
        to date, and start a checkpoint when one is due. `force` commits at once (after a
        command); `checkpoint` also writes a checkpoint and waits for it (shutdown). True
        when a checkpoint was started. Then, every `snapshot_interval`, what the
        bookkeeping gathered is sealed."""
        began = maintenance.started()
        try:
            return self._commit(force, checkpoint)
        finally:
            maintenance.note_stall("commit", began)

    def _commit(self, force: bool, checkpoint: bool) -> bool:
        self._collect(wait=force)
        if force:
            self.books.run(None)
        failing = self.commits.failing
        elapsed = self.clock.monotonic() - self.last_commit
        if failing:
            due = force or self.commits.retry_in == 0
        else:
            due = force or (self.commits.dirty and elapsed >= self.snapshot_interval)
        if due:
            self.last_commit = self.clock.monotonic()
            self._commit_batch()
        elif self.unacked and not failing and not self.commits.unappended:
            # committed; the hot layer and the acknowledgement went with a dropped connection
            self.publish({}, ack=True)
        if self.hot_pending:
            self.publish({})
        self.commits.derive(everything=checkpoint)
        started = self._start_checkpoint(checkpoint)
        if self.clock.monotonic() - self.books.sealed_at >= self.snapshot_interval:
            self.books.seal()
        return started

    @property
    def snapshot_retry_in(self) -> float:
        """Seconds until a failed commit is tried again (0 when none failed)."""
        return self.commits.retry_in

    @property
    def failed_snapshots(self) -> int:
        return self.commits.failures

    def _start_checkpoint(self, force: bool) -> bool:
        if self._checkpoint is not None or not (force or self.commits.checkpoint_due()):
            return False
        if not force and not maintenance.texts_ready(self.engine):
            return False  # a slice of the entries serialized first; the next loop tries again
        started = time.perf_counter()
        job = self.engine.checkpoint_job()
        if job is None:
            return False
        if self.feed is not None:
            job = self.feed.wrap(job)
        prepared = time.perf_counter() - started
        self._checkpoint = _Checkpoint(self._saver.submit(_timed, job), prepared)
        if force:
            self._collect(wait=True)
        return True

    def save_without_redis(self) -> None:
        """The last commit when Redis is gone at shutdown: what the engine holds goes to
        the log, the answered selections included. The hot layer and the
        acknowledgements wait for the next start, which rebuilds the one from the files and
        reads the pending events again, skipping what the log holds."""
        self._collect(wait=True)
        self.commits.publish = None  # published at the next lead (runtime.feed_publisher)
        self.books.seal()
        if self.rpc is not None:
            self.rpc.settle(None)  # into the entries; the hot layer is rebuilt at start
        self.engine.save()
        self.commits.derive(everything=True)
        self.engine.checkpoint()
        log.warning("snapshot.written_without_redis", entries=len(self.engine.entries))

    def _collect(self, wait: bool) -> None:
        """Take a finished checkpoint: the log before it can go. A failed one is logged
        and tried again when the next is due (the log holds all it would have)."""
        checkpoint = self._checkpoint
        if checkpoint is None or not (wait or checkpoint.done.done()):
            return
        self._checkpoint = None
        try:
            seq, written = checkpoint.done.result()
        except OSError as exc:
            log.error("checkpoint.failed", error=str(exc)[:300])
            return
        seconds = checkpoint.prepared + written
        self.commits.checkpoint_written(seq)
        self.metrics.snapshot_written(self.keys.namespace, seconds)
        log.info(
            "snapshot.written",
            entries=len(self.engine.entries),
            seq=seq,
            duration_ms=round(seconds * 1000, 1),
        )
        self.record_job("snapshot", {"entries": len(self.engine.entries), "seq": seq})

    # ---- commands from the scheduler and the watcher -------------------------------------
    def run_command(self, command: Command) -> None:
        began = maintenance.started()
        try:
            self._run_command(command)
        finally:
            maintenance.note_stall(command.kind, began)

    def _run_command(self, command: Command) -> None:
        engine = self.engine
        if command.kind == "snapshot":
            self.commit()
            return
        if command.kind in ("gc", "expiry", "hot_refresh"):
            self.books.seal()  # recorded before the job begins, in slices (_settle)
            self.maintenance.start(command.kind)  # in slices, between batches
            return
        self.books.run(None)
        if command.kind == "trim":
            self.record_job("trim", self.trim())
        elif command.kind == "reload_l1":
            problems = engine.reload_l1(command.path)
            self.record_job("reload_l1", {"problems": len(problems)})
            self.hot.sync_l1(engine)
        elif command.kind == "reload_l2":
            if command.path is not None and engine.is_own_l2_write(command.path):
                return  # our own write: nothing to reload
            engine.reload_l2(command.path)
            self.record_job("reload_l2", {"l2": len(engine.l2_entries)})
        self.commit(force=True)  # durable first, then visible
        self.publish(engine.drain_changes())

    def _settle(self, seconds: float | None) -> bool:
        """Bookkeeping for a maintenance job about to begin; True once no answered
        selection waits to be recorded."""
        self.books.run(seconds)
        return self.rpc is None or not self.rpc.unsettled

    def _job_finished(self, job: Job, result: Any) -> None:
        """What a maintenance job finished with, recorded as the job ran before slices."""
        stall = {"slices": job.slices, "longest_slice_ms": round(job.longest_slice * 1000, 1)}
        if job.kind == "hot_refresh":
            self.record_job("hot_refresh", {**result, **stall})
            return
        if job.kind == "gc_event":
            self.record_job("gc", {**result.as_dict(), **stall})
            self.metrics.gc_reported(self.keys.namespace, result)
        else:
            self.record_job(job.kind, {**result.as_dict(summary=True), **stall})
            self.metrics.gc_finished(
                self.keys.namespace,
                expired=result.expired,
                merged=result.merged,
                promoted=result.promoted,
            )
        if job.kind != "expiry" and not job.dry_run:
            freeze_young()  # what GC left is long-lived again
            release_free_memory()  # and its plan is freed

    def record_job(self, name: str, result: dict[str, Any]) -> None:
        self.job_results[name] = {"at": self.clock.now().isoformat(), "ok": True, **result}

    def trim(self) -> dict[str, Any]:
        max_len = self.config.daemon.stream_max_len
        trimmed = self.stream.trim(self.engine.last_event_id, max_len)
        return {"trimmed": trimmed, "feed": self.feed.trim() if self.feed is not None else 0}

    def pending_count(self) -> int:
        return self.stream.pending()


def _timed(write: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    seq = write()
    return seq, time.perf_counter() - started
