"""The single writer of a namespace: reads agent events and RPC requests from Redis,
applies them through the engine, keeps the hot layer in step, and acknowledges events only
once the snapshot that holds their effect is durable.

Exactly once: the snapshot records the last applied event id; after a crash the pending
events are read again and those at or below that id are acknowledged without being applied.

A snapshot is taken on the writer's thread and written (fsync included) on another, so
requests are answered and events applied while it reaches the disk; its events are
acknowledged once it is durable. Whenever no request waits, it does a slice of the
bookkeeping answers and changes leave (runtime.bookkeeping).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config
from mnemod.errors import InvalidInputError, NotFoundError
from mnemod.redisio.dead_letters import dead_letter
from mnemod.redisio.events import Event, is_applied, parse_event
from mnemod.redisio.keys import GROUP, Keys
from mnemod.runtime import bookkeeping
from mnemod.runtime.bookkeeping import Bookkeeping, Settler
from mnemod.runtime.commands import Command
from mnemod.runtime.engine import Engine
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.metrics import Metrics

log = structlog.get_logger("mnemod.writer")
CONSUMER = "writer"  # one name for every leader, so a new leader inherits the pending list
# While a snapshot is being written: how soon its events are acknowledged. Redis ends a
# BLOCK only at its timer's pace (every 100 ms at the default `hz 10`), so this wait lasts
# up to that long, and a written snapshot is acknowledged within 100 ms.
SAVE_POLL_MS = 10
# After a snapshot failed (a full disk, a read-only filesystem): the next is tried after
# this, doubled per failure in a row up to the cap. Each try serializes the whole index.
SNAPSHOT_RETRY_SECONDS = 1.0
SNAPSHOT_RETRY_CAP_SECONDS = 60.0


class RequestHandler(Settler, Protocol):
    """Answers requests from the rpc stream (runtime.rpc_server.RpcServer)."""

    def handle(self, request_id: str, raw: dict[str, str]) -> None: ...

    def collect(self) -> None: ...


@dataclass
class _Saving:
    """A snapshot being written, and the events to acknowledge once it is durable."""

    done: Future[float]  # the seconds the write took
    events: list[str]
    last_event_id: str | None
    prepared: float  # the seconds taking the snapshot took


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
    ) -> None:
        self.engine = engine
        self.client = client
        self.keys = keys
        self.config = config
        self.clock = clock
        self.hot = hot
        self.metrics = metrics
        self.rpc = rpc
        self.unacked: list[str] = []
        self.books = Bookkeeping(engine, hot, rpc, self.publish)
        self.ack_backlog = config.daemon.batch_size * 5
        # the backlog (delivered before a crash, never acknowledged) first, then new ones
        self.read_from = {keys.events: "0", keys.rpc: "0"}
        self.last_commit = time.monotonic()
        self.snapshot_interval = 2.0
        self.job_results: dict[str, dict[str, Any]] = {}
        self.groups_recreated = False
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemod-snapshot")
        self._saving: _Saving | None = None
        self.failed_snapshots = 0  # in a row; see `snapshot_retry_in`
        self._retry_at = 0.0

    def close(self) -> None:
        """Wait for a snapshot being written. Its events stay pending unless a commit
        collected it: the next leader reads them again and skips what the snapshot holds."""
        self._saver.shutdown(wait=True)

    # ---- set-up ----------------------------------------------------------------------
    def ensure_groups(self) -> None:
        """Create the consumer groups (from the stream's start: events written before the
        first daemon ran are applied too)."""
        for stream in (self.keys.events, self.keys.rpc):
            try:
                self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def reread_pending(self) -> None:
        """After a lost connection: read both streams' pending entries again from the
        start. Redis may have delivered a batch whose reply went with the connection; those
        events and requests are pending for this consumer and nobody else reads them, so
        they would wait for the next start (an agent's request until it gave up). What was
        applied is skipped by its id; an answered request is no longer pending."""
        self.read_from = dict.fromkeys(self.read_from, "0")

    # ---- the loop body -----------------------------------------------------------------
    def step(self, block_ms: int) -> BatchResult:
        """Read one batch of events and requests, apply it, sync the hot layer; with none
        waiting, a slice of the bookkeeping (runtime.bookkeeping)."""
        streams = dict(self.read_from)
        backlog = any(v != ">" for v in streams.values())
        deferred = self.books.due
        wait = None if backlog or deferred else block_ms  # None: look, don't wait
        if self._saving is not None and wait is not None:
            wait = min(SAVE_POLL_MS, wait)
        try:
            replies = self.client.xreadgroup(
                GROUP,
                CONSUMER,
                streams,  # type: ignore[arg-type]
                count=self.config.daemon.batch_size,
                block=wait,
            )
        except redis.ResponseError as exc:
            # NOGROUP: the group is gone; UNBLOCKED: the stream vanished while we waited on
            # it (FLUSHALL, DEL). Either way Redis may have lost its data.
            if not str(exc).startswith(("NOGROUP", "UNBLOCKED")):
                raise
            log.warning("events.group_missing", stream=self.keys.events, error=str(exc)[:80])
            self.ensure_groups()
            self.groups_recreated = True  # Redis may have lost its data: the daemon checks
            return BatchResult()
        result = BatchResult()
        got: dict[str, int] = {}
        batches = cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], replies or [])
        if deferred and not any(messages for _, messages in batches):
            self.books.run(bookkeeping.SLICE_SECONDS)
        for stream, messages in batches:
            got[stream] = len(messages)
            if messages and streams[stream] != ">":
                # the backlog is read by id: go on after the last one (it stays pending
                # until the snapshot covers it, so re-reading from "0" would see it again)
                self.read_from[stream] = messages[-1][0]
            for event_id, raw in messages:
                if stream == self.keys.rpc:
                    self._answer(event_id, raw or {})
                    result.rpc += 1
                else:
                    self._apply_one(event_id, raw or {}, result)
        for stream, start in streams.items():
            if start != ">" and got.get(stream, 0) == 0:
                self.read_from[stream] = ">"
        if result.applied or result.dead or result.skipped or result.rpc:
            self.publish(self.engine.drain_changes())
            self._log_batch(result)
            if self.rpc is not None:
                self.rpc.collect()  # Redis's replies to the answers, read meanwhile
            if deferred and self.books.starved:
                self.books.run(bookkeeping.CATCH_UP_SECONDS)
        return result

    def publish(self, changes: dict[str, str]) -> None:
        """Bring the hot layer in step, then tell subscribers what changed. Accesses alone
        (every resolve records some) are left to the bookkeeping."""
        changes = self.books.note(changes)
        if not changes:
            return
        self.hot.apply_changes(self.engine, changes)
        pipe = self.client.pipeline(transaction=False)
        for entry_id, op in changes.items():
            pipe.publish(self.keys.changes, dumps({"op": op, "id": entry_id}))
        pipe.execute()

    def _apply_one(self, event_id: str, raw: dict[str, str], result: BatchResult) -> None:
        self.unacked.append(event_id)
        if is_applied(event_id, self.engine.last_event_id):
            result.skipped += 1  # applied before a crash; its effect is in the snapshot
            return
        try:
            event = parse_event(event_id, raw, self.config)
            self.apply(event)
        except (InvalidInputError, NotFoundError) as exc:
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
        elif event.op == "access":
            engine.access(event.target)
        elif event.op == "update" and event.fields is not None:
            engine.update(event.target, event.fields, by=event.by)
        elif event.op == "remove":
            engine.remove(event.target, by=event.by)
        elif event.op == "promote":
            engine.promote(event.target, by=event.by)
        elif event.op == "gc":
            report = engine.gc(dry_run=event.dry_run, by=event.by)
            self.record_job("gc", report.as_dict())
            self.metrics.gc_reported(self.keys.namespace, report)

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
    def commit(self, force: bool = False) -> bool:
        """Snapshot if due, and XACK what it covers once it is durable (group commit: events
        wait at most `snapshot_interval`; accesses alone wait ACCESS_SAVE_SECONDS). One
        snapshot is written at a time, in the background; a later commit collects it, and
        `force` waits for it and writes the next at once. True when one was started. Then,
        every `snapshot_interval`, what the bookkeeping gathered is sealed."""
        started = self._snapshot(force)
        if time.monotonic() - self.books.sealed_at >= self.snapshot_interval:
            self.books.seal()
        return started

    @property
    def snapshot_retry_in(self) -> float:
        """Seconds until a failed snapshot is tried again (0 when none failed)."""
        return max(0.0, self._retry_at - time.monotonic()) if self.failed_snapshots else 0.0

    def _failed(self) -> None:
        self.failed_snapshots += 1
        delay = SNAPSHOT_RETRY_SECONDS * 2 ** min(self.failed_snapshots - 1, 16)
        self._retry_at = time.monotonic() + min(SNAPSHOT_RETRY_CAP_SECONDS, delay)

    def _snapshot(self, force: bool) -> bool:
        self._collect(wait=force)
        if self._saving is not None:
            return False
        if not force and self.snapshot_retry_in > 0:
            return False  # the last one failed: not yet
        engine = self.engine
        elapsed = time.monotonic() - self.last_commit
        hard = bool(self.unacked) or engine.saving.dirty or engine.journal.pending
        if not force:
            if hard and elapsed < self.snapshot_interval and len(self.unacked) < self.ack_backlog:
                return False
            if not hard and not engine.saving.access_save_due():
                return False
        else:
            self.books.run(None)
        started = time.perf_counter()
        try:
            write = engine.saving.prepare_save()
        except OSError:
            self._failed()
            raise
        events, self.unacked = self.unacked, []
        self.last_commit = time.monotonic()
        if write is None:
            self._ack(events)  # nothing to write (events skipped or dead-lettered)
            return False
        last = engine.last_event_id
        prepared = time.perf_counter() - started
        self._saving = _Saving(self._saver.submit(_timed, write), events, last, prepared)
        if force:
            self._collect(wait=True)
        return True

    def save_without_redis(self) -> None:
        """The last snapshot when Redis is gone at shutdown: what the engine holds goes to
        the files, the answered selections included. The hot layer and the
        acknowledgements wait for the next start, which rebuilds the one from the files and
        reads the pending events again, skipping what this snapshot holds. Without it a
        Redis that came back empty would have lost the events applied since the last
        snapshot."""
        saving, self._saving = self._saving, None
        if saving is not None:
            try:
                saving.done.result()
            except BaseException:
                self.engine.saving.dirty = True
                raise
        self.books.seal()
        if self.rpc is not None:
            self.rpc.settle(None)  # into the entries; the hot layer is rebuilt at start
        write = self.engine.saving.prepare_save()
        if write is not None:
            write()
        log.warning("snapshot.written_without_redis", entries=len(self.engine.entries))

    def _collect(self, wait: bool) -> None:
        """Acknowledge the events of the snapshot being written once it is durable. If the
        write failed they wait for the next snapshot, and the error goes up as it did when
        snapshots were written on this thread."""
        saving = self._saving
        if saving is None or not (wait or saving.done.done()):
            return
        self._saving = None
        try:
            written = saving.done.result()
        except BaseException:
            self.engine.saving.dirty = True
            self.unacked = saving.events + self.unacked
            self._failed()
            raise
        self.failed_snapshots = 0
        seconds = saving.prepared + written  # not the wait until it was collected
        self.metrics.snapshot_written(self.keys.namespace, seconds)
        log.info(
            "snapshot.written",
            entries=len(self.engine.entries),
            last_event_id=saving.last_event_id,
            events=len(saving.events),
            duration_ms=round(seconds * 1000, 1),
        )
        self.record_job("snapshot", {"entries": len(self.engine.entries)})
        self._ack(saving.events)

    def _ack(self, events: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(events), 1000):
            pipe.xack(self.keys.events, GROUP, *events[start : start + 1000])
        pipe.execute()

    # ---- commands from the scheduler and the watcher -------------------------------------
    def run_command(self, command: Command) -> None:
        engine = self.engine
        if command.kind == "snapshot":
            self.commit()
            return
        self.books.run(None)  # a job sees every access (GC must not expire what was just used)
        if command.kind in ("gc", "expiry"):
            report = engine.gc(by="gc", expire_only=command.kind == "expiry")
            self.record_job(command.kind, report.as_dict(summary=True))
            self.metrics.gc_finished(
                self.keys.namespace,
                expired=report.expired,
                merged=report.merged,
                promoted=report.promoted,
            )
        elif command.kind == "hot_refresh":
            count = self.hot.rebuild(self.engine)  # scores decay: recompute them all
            self.record_job("hot_refresh", {"hot": count})
        elif command.kind == "trim":
            self.record_job("trim", self.trim())
        elif command.kind == "reload_l1":
            problems = engine.reload_l1(command.path)
            self.record_job("reload_l1", {"problems": len(problems)})
            self.hot.sync_l1(engine)
        elif command.kind == "reload_l2":
            if command.path is not None and engine.l2.is_own_write(command.path):
                return  # our own promotion wrote it: nothing to reload
            engine.reload_l2()
            self.record_job("reload_l2", {"l2": len(engine.l2_entries)})
        self.publish(engine.drain_changes())
        self.commit(force=True)

    def record_job(self, name: str, result: dict[str, Any]) -> None:
        self.job_results[name] = {"at": self.clock.now().isoformat(), "ok": True, **result}

    def trim(self) -> dict[str, Any]:
        """Trim events that are acknowledged (below the oldest pending one, at most up to the
        last applied id); requests are acknowledged as soon as they are answered."""
        trimmed = 0
        for stream, floor in ((self.keys.events, self.engine.last_event_id), (self.keys.rpc, None)):
            summary = self.client.xpending(stream, GROUP)
            oldest = summary.get("min") if summary and summary.get("pending") else None
            minid = oldest or floor
            if stream == self.keys.rpc and oldest is None:
                info = self.client.xinfo_stream(stream)
                minid = info.get("last-generated-id")
            if minid:
                trimmed += int(self.client.xtrim(stream, minid=minid, approximate=False))
        trimmed += int(
            self.client.xtrim(
                self.keys.dead, maxlen=self.config.daemon.stream_max_len, approximate=True
            )
        )
        return {"trimmed": trimmed}

    def pending_count(self) -> int:
        summary = self.client.xpending(self.keys.events, GROUP)
        return int(summary.get("pending", 0)) if summary else 0


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _timed(write: Callable[[], bool]) -> float:
    started = time.perf_counter()
    write()
    return time.perf_counter() - started
