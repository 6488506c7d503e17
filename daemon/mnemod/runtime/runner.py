"""One namespace inside `mnemod run`: stand by until this daemon holds its lease, then lead it
(engine, writer, hot layer, requests, scheduler, file watcher) until stopped or the lease
is lost, and stand by again.

The process (runtime.daemon) owns what every namespace shares: the Redis connection (and
the embedded server), the metrics, sd_notify, the signals' flags and the config. Each
runner owns one namespace's lease, files and writer, on a thread of its own: nothing of a
namespace is touched from another thread (the scheduler and the watcher only post
commands). `stand_by` is what a runner does while it does not lead.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from contextlib import ExitStack
from dataclasses import dataclass

import redis
import structlog

from mnemod.config import Config, parse_schedule
from mnemod.errors import LockedError, MnemodError
from mnemod.processes import describe_owner, owner_is_gone
from mnemod.redisio.change_feed import ChangeFeed, FencedOut
from mnemod.redisio.connection import OUTAGE_ERRORS, REDIS_FAILURES, Backoff, describe
from mnemod.redisio.lease import Lease
from mnemod.runtime.catch_up import Diverged
from mnemod.runtime.commands import Command
from mnemod.runtime.feed_publisher import FeedPublisher
from mnemod.runtime.follower import CLAIM_IDLE_MS, Follower
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.rpc_server import RpcServer
from mnemod.runtime.runner_context import Folders, Host, RunnerContext
from mnemod.runtime.scheduler import Scheduler
from mnemod.runtime.status import StatusWriter
from mnemod.runtime.watcher import Watcher
from mnemod.runtime.writer import CONSUMER, Writer
from mnemod.store.engine import Engine
from mnemod.store.heap import freeze_heap
from mnemod.store.replica import folder_id

log = structlog.get_logger("mnemod.daemon")
REDIS_ERRORS = OUTAGE_ERRORS


class LeaseLost(MnemodError):
    """Another daemon holds the namespace now: stop writing at once."""


@dataclass(frozen=True)
class Leading:
    """What a leading runner runs with, passed around as one."""

    engine: Engine
    writer: Writer
    hot: HotSync
    lease: Lease
    status: StatusWriter
    scheduler: Scheduler


class NamespaceRunner:
    """One namespace: `run()` stands by and leads in turn until the process stops."""

    def __init__(self, host: Host, namespace: str, folders: Folders) -> None:
        self.context = RunnerContext(host, namespace, folders)
        self.host, self.namespace = host, namespace
        self.thread: threading.Thread | None = None

    @property
    def state(self) -> str:
        return self.context.state

    @property
    def beat(self) -> float:
        """The loop's last turn (clock.monotonic): the watchdog looks."""
        return self.context.beat

    # ---- from the process's thread --------------------------------------------------------
    def start_thread(self) -> None:
        self.thread = threading.Thread(
            target=self._run_on_thread, name=f"mnemod-ns-{self.namespace}", daemon=True
        )
        self.thread.start()

    def _run_on_thread(self) -> None:
        """`run`, whose failure stops the process as it would a daemon of this namespace
        alone (systemd restarts it), rather than leave the namespace unled."""
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 (any: it ends the process, reported)
            log.error("daemon.namespace_failed", namespace=self.namespace, error=repr(exc)[:300])
            self.host.fail(exc)

    def reload(self, fresh: Config) -> None:
        """A new config, taken up by the loop at its next turn."""
        self.context.offer_config(fresh)

    # ---- the runner's own thread -----------------------------------------------------------
    def run(self) -> None:
        host = self.host
        lease = Lease(host.client, self.context.keys, host.owner, host.config.daemon.lease_ttl)
        try:
            while not host.stop_requested.is_set():
                leading, engine = self._follow(lease)
                if not leading:
                    break
                try:
                    self._lead(lease, engine)
                    continue  # stopped (the loop ends) or handed over (follow again)
                except LockedError as exc:
                    # Another process on this data folder still writes the namespace (its
                    # lease lapsed but it lives): stand by rather than fight over the files.
                    log.warning("lease.standby", namespace=self.namespace, reason=str(exc))
                    host.stop_requested.wait(lease.ttl)
                    continue
                except (LeaseLost, FencedOut, Diverged) as exc:
                    log.error(
                        "lease.lost",
                        namespace=self.namespace,
                        action="stopped writing",
                        reason=str(exc)[:300],
                    )
                    continue
                finally:
                    host.leadership.let_go(self.namespace)
                    host.metrics.set_leader(self.namespace, False)
        finally:
            self.context.state = "stopped"

    def _follow(self, lease: Lease) -> tuple[bool, Engine | None]:
        """While another daemon leads: follow the namespace into this daemon's own folder
        (runtime.follower) until this one holds the lease with its copy current. Returns
        (True, the engine to lead with), or (False, None) for a stop. A folder another
        live process writes (the lock is taken) cannot follow: it stands by, and `_lead`
        opens the files once it holds the lease (True, None)."""
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
                except REDIS_ERRORS as exc:
                    host.wait_out(backoff, describe(exc))
                    continue
                except redis.ResponseError as exc:
                    delay = backoff.next_delay()
                    log.error(
                        "redis.command_refused", error=str(exc)[:300], retry_in=round(delay, 2)
                    )
                    backoff.sleep(delay)
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
                except REDIS_ERRORS as exc:
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

    def _clear_dead_holder(self, lease: Lease) -> None:
        """A holder on this host whose process is gone (a kill -9, a crash) cannot renew:
        take its lease at once instead of waiting for it to lapse."""
        holder = lease.holder()
        if holder is None or holder == self.host.owner or not owner_is_gone(holder):
            return
        if lease.clear(holder):
            log.info("lease.cleared", holder=holder, reason="its process is gone")

    def _lead(self, lease: Lease, engine: Engine | None = None) -> None:
        """Lead with `engine` (a follower's copy, current) or the files opened now."""
        host, ns, keys, client = self.host, self.namespace, self.context.keys, self.host.client
        config, clock, metrics = host.config, host.clock, host.metrics
        with ExitStack() as stack:
            stack.callback(_release, lease)
            engine = engine or self.context.open_engine()
            stack.callback(engine.close)
            feed = ChangeFeed(client, keys, host.owner, lease.ttl_ms)
            publisher = FeedPublisher(feed, engine, config.daemon.feed_max_len)
            publisher.take_over()  # the files at the committed position before anything else
            hot = HotSync(client, keys, clock, owner=host.owner)
            rpc = RpcServer(engine, client, keys, clock, metrics)
            stack.callback(rpc.close)
            writer = Writer(engine, client, keys, config, clock, hot, metrics, rpc)
            stack.callback(writer.close)  # before engine.close: no snapshot still being written
            writer.snapshot_interval = _interval_seconds(config.schedule.snapshot, 2.0)
            writer.feed = publisher
            status = StatusWriter(client, keys, host.owner, host.url, clock)
            writer.ensure_groups()
            hot.start(engine, engine.committed_seq)
            freeze_heap()  # the indexes and entries' JSON are built after, in idle slices
            scheduler = Scheduler(config.schedule, self.context.commands.post)
            scheduler.start()
            stack.callback(scheduler.shutdown)
            watcher = Watcher(
                self.context.folders.l1_dir,
                engine.paths.l2_dir,
                config.daemon.watch_debounce.total_seconds(),
                self.context.commands.post,
                clock,
            )
            watcher.start()
            stack.callback(watcher.stop)
            metrics.set_leader(ns, True)
            self.context.state = "running"
            status.write(engine, writer, hot, scheduler, state=self.context.state)
            host.announce(ns, "leading", "")
            log.info("daemon.running", namespace=ns, entries=len(engine.entries), pid=os.getpid())
            self._loop(Leading(engine, writer, hot, lease, status, scheduler))
            self.context.state = "stopping"
            host.stopping("draining")
            log.info("daemon.draining", namespace=ns)
            try:
                writer.commit(force=True, checkpoint=True)
                if not writer.hot_pending:
                    hot.mark_clean(engine.committed_seq, engine)
                status.write(engine, writer, hot, scheduler, state=self.context.state)
            except REDIS_ERRORS as exc:
                log.warning("redis.unavailable", error=describe(exc), at="shutdown")
                writer.save_without_redis()

    def _loop(self, parts: Leading) -> None:
        host, clock = self.host, self.host.clock
        engine, writer, lease = parts.engine, parts.writer, parts.lease
        block_ms = int(host.config.daemon.block.total_seconds() * 1000)
        renew_every = lease.ttl / 3
        last_renew = clock.monotonic()
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
            except REDIS_ERRORS as exc:
                host.wait_out(backoff, describe(exc))
                writer.reread_pending()  # a batch delivered as the connection went
                continue
            except redis.ResponseError as exc:
                # Redis refused a command (a key of mnemod's that something else overwrote
                # with another type, say): say so and try again, rather than exit and be
                # restarted into the same refusal until systemd gives up
                delay = backoff.next_delay()
                log.error("redis.command_refused", error=str(exc)[:300], retry_in=round(delay, 2))
                backoff.sleep(delay)
                continue

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
        parts.writer.reread_pending()
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


@dataclass
class _Seen:
    """What a following runner noticed of the lease between its looks."""

    free_since: float | None = None  # when the lease was first seen free
    announced: bool = False
    ready_at: float = -math.inf  # when it last said it stands by


def _release(lease: Lease) -> None:
    try:
        lease.release()
    except REDIS_ERRORS:
        log.warning("lease.release_failed")


def _interval_seconds(spec: str, default: float) -> float:
    kind, value = parse_schedule(spec)
    return value.total_seconds() if kind == "interval" else default
