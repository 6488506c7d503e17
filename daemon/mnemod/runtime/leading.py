"""A namespace's runner while this daemon holds its lease: the engine, the writer, the hot
layer, requests, the scheduler and the file watcher set up on an ExitStack (torn down in
reverse order); the loop that renews the lease, takes up a reloaded config, runs the posted
commands (the heartbeat among them), steps and commits the writer and rebuilds what Redis
lost; then the drain, on a stop or when the namespace is handed over to a daemon standing
by (this one leads more than its share: runtime.leadership)."""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass

import redis
import structlog

from mnemod.config import parse_schedule
from mnemod.redisio.change_feed import ChangeFeed
from mnemod.redisio.connection import OUTAGE_ERRORS, REDIS_FAILURES, Backoff, describe
from mnemod.redisio.lease import Lease
from mnemod.runtime.commands import Command
from mnemod.runtime.feed_publisher import FeedPublisher
from mnemod.runtime.follower import CLAIM_IDLE_MS
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.rpc_server import RpcServer
from mnemod.runtime.runner_context import RunnerContext, wait_after_refusal
from mnemod.runtime.scheduler import Scheduler
from mnemod.runtime.startup_lease import LeaseLost, StartupLease
from mnemod.runtime.status import StatusWriter
from mnemod.runtime.watcher import Watcher
from mnemod.runtime.writer import CONSUMER, Writer
from mnemod.store.engine import Engine
from mnemod.store.heap import freeze_started

log = structlog.get_logger("mnemod.daemon")


@dataclass(frozen=True)
class Leading:
    """What a leading runner runs with, passed around as one."""

    engine: Engine
    writer: Writer
    hot: HotSync
    lease: Lease
    status: StatusWriter
    scheduler: Scheduler


class Leader:
    """`lead` until a stop, a hand-over or a lost lease (LeaseLost, FencedOut, Diverged)."""

    def __init__(self, context: RunnerContext) -> None:
        self.context = context
        self.host, self.namespace = context.host, context.namespace

    def lead(self, lease: Lease, engine: Engine | None = None) -> None:
        """Lead with `engine` (a follower's copy, current) or the files opened now."""
        context, host, ns = self.context, self.host, self.namespace
        keys, client = context.keys, host.client
        config, clock, metrics = host.config, host.clock, host.metrics
        with ExitStack() as stack:
            stack.callback(_release, lease)
            # renewed on a thread until the loop turns; checked between the steps
            kept = stack.enter_context(StartupLease(lease, clock))
            engine = engine or context.open_engine()
            stack.callback(engine.close)
            # before the hot layer's rebuild: its 100,000 scores and 5,000 items made the
            # collector pass over the whole engine three times (0.35-0.45 s of CPU)
            freeze_started()  # the indexes and entries' JSON are built after, in idle slices
            kept.check()
            feed = ChangeFeed(client, keys, host.owner, lease.ttl_ms)
            publisher = FeedPublisher(feed, engine, config.daemon.feed_max_len)
            # the files at the committed position before anything else; a checkpoint to
            # publish is sent once the daemon runs
            publisher.take_over(defer=True)
            stack.callback(publisher.close)
            kept.check()
            hot = HotSync(client, keys, clock, owner=host.owner)
            rpc = RpcServer(engine, client, keys, clock, metrics)
            stack.callback(rpc.close)
            writer = Writer(engine, client, keys, config, clock, hot, metrics, rpc)
            stack.callback(writer.close)  # before engine.close: no snapshot still being written
            writer.snapshot_interval = _interval_seconds(config.schedule.snapshot, 2.0)
            writer.feed = publisher
            status = StatusWriter(client, keys, host.owner, host.url, clock)
            writer.ensure_groups()
            kept.check()
            hot.start(engine, engine.committed_seq)
            scheduler = Scheduler(config.schedule, context.commands.post)
            scheduler.start()
            stack.callback(scheduler.shutdown)
            watcher = Watcher(
                context.folders.l1_dir,
                engine.paths.l2_dir,
                config.daemon.watch_debounce.total_seconds(),
                context.commands.post,
                clock,
            )
            watcher.start()
            stack.callback(watcher.stop)
            kept.stop()  # the loop renews from here on, counting from this last renewal
            kept.check()
            metrics.set_leader(ns, True)
            context.state = "running"
            status.write(engine, writer, hot, scheduler, state=context.state)
            host.announce(ns, "leading", "")
            log.info("daemon.running", namespace=ns, entries=len(engine.entries), pid=os.getpid())
            publisher.publish_deferred()
            self._loop(Leading(engine, writer, hot, lease, status, scheduler), kept.renewed_at)
            context.state = "stopping"
            host.stopping("draining")
            log.info("daemon.draining", namespace=ns)
            try:
                writer.commit(force=True, checkpoint=True)
                if not writer.hot_pending:
                    hot.mark_clean(engine.committed_seq, engine)
                status.write(engine, writer, hot, scheduler, state=context.state)
            except OUTAGE_ERRORS as exc:
                log.warning("redis.unavailable", error=describe(exc), at="shutdown")
                writer.save_without_redis()

    def _loop(self, parts: Leading, last_renew: float) -> None:
        """`last_renew`: when the lease was last renewed (clock.monotonic)."""
        host, clock = self.host, self.host.clock
        engine, writer, lease = parts.engine, parts.writer, parts.lease
        block_ms = int(host.config.daemon.block.total_seconds() * 1000)
        renew_every = lease.ttl / 3
        backoff = Backoff(sleep=host.stop_requested.wait)
        while not host.stop_requested.is_set():
            self.context.beat = clock.monotonic()
            try:
                if clock.monotonic() - last_renew >= renew_every:
                    # acquire, not renew: a lease that lapsed during a long step (start-up,
                    # a big rebuild) and that nobody took is still safe to take back
                    if not lease.acquire():
                        raise LeaseLost(f"lease of {self.namespace} is held by {lease.holder()}")
                    last_renew = clock.monotonic()
                    if self._hand_over():
                        return
                self._take_fresh_config(engine, writer)
                for command in self.context.commands.drain():
                    if command.kind == "heartbeat":
                        self._heartbeat(parts)
                        continue
                    writer.run_command(command)
                writer.step(block_ms)
                if writer.groups_recreated:
                    writer.groups_recreated = False
                    self._recover_lost_data(parts)
                writer.commit()
                backoff.reset()
            except OSError as exc:
                # The files cannot be written (a full disk, a read-only filesystem): the
                # events stay unacknowledged in Redis, requests are still answered, and the
                # snapshot is tried again later. Exiting would only restart into the same
                # error until systemd gave up.
                log.error(
                    "files.write_failed",
                    error=str(exc)[:300],
                    failures=writer.failed_snapshots,
                    retry_in=round(writer.snapshot_retry_in, 1),
                )
            except OUTAGE_ERRORS as exc:
                host.wait_out(backoff, describe(exc))
                writer.reread_pending()  # a batch delivered as the connection went
                continue
            except redis.ResponseError as exc:
                wait_after_refusal(backoff, exc)
                continue

    def _hand_over(self) -> bool:
        """Whether to hand the namespace to a daemon standing by for it: this one leads
        more than its share (runtime.leadership)."""
        leadership, owner = self.host.leadership, self.host.owner
        if not leadership.over_share:
            return False
        try:
            others = [member for member in self.context.standby.present() if member != owner]
        except REDIS_FAILURES:
            return False
        if not others or not leadership.hand_off(self.namespace):
            return False
        log.info("lease.handing_over", namespace=self.namespace, standing_by=len(others))
        return True

    def _take_fresh_config(self, engine: Engine, writer: Writer) -> None:
        fresh = self.context.take_config()
        if fresh is None:
            return
        engine.config = fresh
        writer.config = fresh
        self.context.commands.post(Command("reload_l1"))

    def _recover_lost_data(self, parts: Leading) -> None:
        """Redis lost its data (FLUSHALL, a restart without persistence): take the lease
        again, recreate the groups and rebuild the hot layer from the files."""
        if parts.hot.marker_present():
            return
        log.warning("redis.data_lost", action="rebuilding the hot layer")
        if not parts.lease.acquire():
            holder = parts.lease.holder()
            raise LeaseLost(f"lease of {self.namespace} is held by {holder}")
        parts.writer.ensure_groups()
        parts.writer.reread_pending(data_lost=True)
        parts.hot.rebuild(parts.engine)
        if parts.writer.feed is not None:
            parts.writer.feed.republish()  # followers start from it (runtime.feed_publisher)

    def _heartbeat(self, parts: Leading) -> None:
        engine, writer, hot = parts.engine, parts.writer, parts.hot
        self._recover_lost_data(parts)
        claimed = writer.stream.claim_stale_requests(CONSUMER, CLAIM_IDLE_MS)
        if claimed:  # a follower died holding requests: answered here
            log.info("rpc.claimed", namespace=self.namespace, requests=len(claimed))
            writer.reread_pending()
        pending = writer.pending_count()
        hot_items = hot.count()
        writer.record_job("heartbeat", {"pending": pending, "hot": hot_items})
        parts.status.write(engine, writer, hot, parts.scheduler, state=self.context.state)
        self.host.metrics.set_events_pending(self.namespace, pending)
        self.host.metrics.set_hot_items(self.namespace, hot_items)


def _release(lease: Lease) -> None:
    try:
        lease.release()
    except OUTAGE_ERRORS:
        log.warning("lease.release_failed")


def _interval_seconds(spec: str, default: float) -> float:
    kind, value = parse_schedule(spec)
    return value.total_seconds() if kind == "interval" else default
