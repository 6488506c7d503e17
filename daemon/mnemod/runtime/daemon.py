"""`mnemod run`: the lifecycle around the writer.

STOPPED → STARTING (Redis, lease, engine, hot layer, scheduler, watcher) → RUNNING (the tick
loop) → STOPPING (stop reading, finish the batch, snapshot, XACK, release the lease) →
STOPPED. Every resource goes on an ExitStack the moment it is acquired, so teardown runs in
reverse order whatever fails. Signal handlers live in the CLI and only call `request_*`.
"""

from __future__ import annotations

import enum
import math
import os
import shlex
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config, load_config, redact_url
from mnemod.errors import ConfigError, LockedError, MnemodError
from mnemod.processes import describe_owner, owner_id, owner_is_gone
from mnemod.redisio.connection import Backoff, check_version, connect, describe
from mnemod.redisio.embedded import DAEMON_CLIENT, EmbeddedRedis
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import Lease
from mnemod.runtime.commands import Command, CommandQueue
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.metrics import Metrics
from mnemod.runtime.rpc_server import RpcServer
from mnemod.runtime.scheduler import Scheduler
from mnemod.runtime.sdnotify import Notifier, watchdog_interval
from mnemod.runtime.status import StatusWriter
from mnemod.runtime.watcher import Watcher
from mnemod.runtime.writer import Writer
from mnemod.store.engine import Engine
from mnemod.store.heap import freeze_heap
from mnemod.store.paths import NamespacePaths

log = structlog.get_logger("mnemod.daemon")
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)
REVIVE_CALM_SECONDS = 10.0  # an embedded server started again sooner is a crash loop


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


class LeaseLost(MnemodError):
    """Another daemon holds the namespace now: stop writing at once."""


@dataclass(frozen=True)
class Leading:
    """What a leading daemon runs with, passed around as one."""

    engine: Engine
    writer: Writer
    hot: HotSync
    lease: Lease
    status: StatusWriter
    scheduler: Scheduler


@dataclass(frozen=True)
class DaemonOptions:
    data_dir: Path
    namespace: str
    l1_dir: Path
    config_path: str | None = None


class Daemon:
    def __init__(self, config: Config, options: DaemonOptions, clock: Clock) -> None:
        self.config = config
        self.options = options
        self.clock = clock
        self.state = State.STOPPED
        self.stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self.owner = owner_id()
        self.commands = CommandQueue()
        self.metrics = Metrics(options.namespace)
        self.notifier = Notifier.from_environ()
        self.url = ""
        self.embedded: EmbeddedRedis | None = None  # the embedded default, when in use
        self._revived_at = -math.inf  # when the embedded server was last started again

    # ---- called from signal handlers: only set flags ----------------------------------
    def request_stop(self) -> None:
        self.stop_requested.set()

    def request_reload(self) -> None:
        self.reload_requested.set()

    # ---- lifecycle -----------------------------------------------------------------------
    def run(self) -> int:
        self.state = State.STARTING
        with ExitStack() as stack:
            stack.callback(self._set_state, State.STOPPED)
            self.url = self._redis_url(stack)
            client = connect(
                self.url,
                self.config.redis.socket_timeout,
                name=f"{DAEMON_CLIENT}{self.options.namespace}:{self.owner}",
            )
            stack.callback(client.close)
            self._wait_for_redis(client)
            if self.stop_requested.is_set():
                return 0
            stack.callback(self.metrics.serve(self.config.metrics.host, self.config.metrics.port))
            keys = Keys(self.config.redis.prefix, self.options.namespace)
            lease = Lease(client, keys, self.owner, self.config.daemon.lease_ttl.total_seconds())
            while not self.stop_requested.is_set():
                if not self._wait_for_lease(lease):
                    break
                try:
                    self._lead(client, keys, lease)
                except LockedError as exc:
                    # Another process on this data folder still writes the namespace (its
                    # lease lapsed but it lives): stand by rather than fight over the files.
                    log.warning("lease.standby", reason=str(exc))
                    self.stop_requested.wait(lease.ttl)
                    continue
                except LeaseLost:
                    log.error(
                        "lease.lost", namespace=self.options.namespace, action="stopped writing"
                    )
                    self.metrics.set_leader(self.options.namespace, False)
                    continue
                break
        log.info("daemon.stopped", namespace=self.options.namespace)
        return 0

    def _set_state(self, state: State) -> None:
        self.state = state

    def _redis_url(self, stack: ExitStack) -> str:
        if self.config.redis.url:
            log.info("redis.external", url=redact_url(self.config.redis.url))
            return self.config.redis.url
        embedded = EmbeddedRedis(
            self.options.data_dir / "redis",
            self.config.redis.redis_server,
            socket_perm=self.config.redis.socket_perm,
        )
        url = embedded.start()
        stack.callback(embedded.release)
        self.embedded = embedded
        log.info("redis.embedded", url=url, reused=embedded.reused)
        socket = shlex.quote(str(embedded.socket_path))  # pasted into a shell as printed
        print(f"mnemod: agents connect to {url}  (redis-cli -s {socket})", flush=True)  # noqa: T201
        return url

    def _wait_for_redis(self, client: redis.Redis) -> None:
        backoff = Backoff(sleep=self.stop_requested.wait)
        while not self.stop_requested.is_set():
            try:
                version = check_version(client, self.url)
            except MnemodError as exc:
                self._wait_out(backoff, str(exc))
                continue
            log.info("redis.connected", version=".".join(map(str, version)))
            return

    def _wait_for_lease(self, lease: Lease) -> bool:
        """Stand by until this daemon holds the namespace's lease (or a stop is asked)."""
        announced = False
        while not self.stop_requested.is_set():
            try:
                self._clear_dead_holder(lease)
                if lease.acquire():
                    log.info("lease.acquired", namespace=self.options.namespace, owner=self.owner)
                    return True
            except REDIS_ERRORS as exc:
                log.warning("redis.unavailable", error=describe(exc))
                self._revive_embedded()
            if not announced:
                holder = lease.holder()
                leader = describe_owner(holder)
                log.info("lease.standby", namespace=self.options.namespace, holder=holder)
                print(  # noqa: T201 (beside the agents' URL: who leads, on the terminal)
                    f"mnemod: standing by: {leader} leads namespace {self.options.namespace}; "
                    "this daemon takes over when it stops",
                    flush=True,
                )
                self.notifier.ready(f"standby: {leader} leads this namespace")
                announced = True
            self.stop_requested.wait(lease.ttl / 3)
        return False

    def _clear_dead_holder(self, lease: Lease) -> None:
        """A holder on this host whose process is gone (a kill -9, a crash) cannot renew:
        take its lease at once instead of waiting for it to lapse."""
        holder = lease.holder()
        if holder is None or holder == self.owner or not owner_is_gone(holder):
            return
        if lease.clear(holder):
            log.info("lease.cleared", holder=holder, reason="its process is gone")

    def _lead(self, client: redis.Redis, keys: Keys, lease: Lease) -> None:
        ns = self.options.namespace
        with ExitStack() as stack:
            stack.callback(self._release, lease)
            engine = self._open_engine(lease)
            stack.callback(engine.close)
            hot = HotSync(client, keys, self.clock)
            rpc = RpcServer(engine, client, keys, self.clock, self.metrics)
            stack.callback(rpc.close)
            writer = Writer(engine, client, keys, self.config, self.clock, hot, self.metrics, rpc)
            stack.callback(writer.close)  # before engine.close: no snapshot still being written
            writer.snapshot_interval = _interval_seconds(self.config.schedule.snapshot, 2.0)
            status = StatusWriter(client, keys, self.owner, self.url, self.clock)
            writer.ensure_groups()
            hot.rebuild(engine)
            # Before serving, so that no snapshot waits for them: 0.1 s at 10k entries and
            # about 2 s at 100k, which the first snapshot under load took at once otherwise.
            engine.texts.warm(math.inf, engine.entries)
            freeze_heap()
            scheduler = Scheduler(self.config.schedule, self.commands.post)
            scheduler.start()
            stack.callback(scheduler.shutdown)
            watcher = Watcher(
                self.options.l1_dir,
                engine.paths.l2_dir,
                self.config.daemon.watch_debounce.total_seconds(),
                self.commands.post,
            )
            watcher.start()
            stack.callback(watcher.stop)
            self.metrics.set_leader(ns, True)
            self.state = State.RUNNING
            status.write(engine, writer, hot, scheduler, state=self.state.value)
            self.notifier.ready(f"leading namespace {ns}")
            log.info("daemon.running", namespace=ns, entries=len(engine.entries), pid=os.getpid())
            self._loop(Leading(engine, writer, hot, lease, status, scheduler))
            self.state = State.STOPPING
            self.notifier.stopping("draining")
            log.info("daemon.draining", namespace=ns)
            try:
                writer.commit(force=True, checkpoint=True)
                status.write(engine, writer, hot, scheduler, state=self.state.value)
            except REDIS_ERRORS as exc:
                log.warning("redis.unavailable", error=describe(exc), at="shutdown")
                writer.save_without_redis()

    def _open_engine(self, lease: Lease) -> Engine:
        paths = NamespacePaths(self.options.data_dir, self.options.namespace)
        return Engine(
            paths,
            self.config,
            self.clock,
            l1_dir=self.options.l1_dir,
            actor="agent",
            autosave=False,
        )

    def _release(self, lease: Lease) -> None:
        try:
            lease.release()
        except REDIS_ERRORS:
            log.warning("lease.release_failed")

    def _loop(self, parts: Leading) -> None:
        engine, writer, lease = parts.engine, parts.writer, parts.lease
        block_ms = int(self.config.daemon.block.total_seconds() * 1000)
        renew_every = lease.ttl / 3
        last_renew = time.monotonic()
        ping_every = watchdog_interval()
        last_ping = 0.0
        backoff = Backoff(sleep=self.stop_requested.wait)
        while not self.stop_requested.is_set():
            try:
                if time.monotonic() - last_renew >= renew_every:
                    # acquire, not renew: a lease that lapsed during a long step (start-up,
                    # a big rebuild) and that nobody took is still safe to take back
                    if not lease.acquire():
                        raise LeaseLost(
                            f"lease of {self.options.namespace} is held by {lease.holder()}"
                        )
                    last_renew = time.monotonic()
                if self.reload_requested.is_set():
                    self.reload_requested.clear()
                    self._reload(engine, writer)
                for command in self.commands.drain():
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
                self._wait_out(backoff, describe(exc))
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
            if ping_every is not None and time.monotonic() - last_ping >= ping_every:
                self.notifier.watchdog()
                last_ping = time.monotonic()

    def _wait_out(self, backoff: Backoff, error: str) -> None:
        """Say Redis is unavailable and wait before trying again. The embedded server, if it
        went away, is started again first and then tried at once: an outage's backoff (up
        to 30 s) would only keep a fresh server idle. A server that keeps going away
        (started again within REVIVE_CALM_SECONDS) is waited for as any outage is."""
        last = self._revived_at
        if self._revive_embedded() and self._revived_at - last > REVIVE_CALM_SECONDS:
            backoff.reset()
        delay = backoff.next_delay()
        log.warning("redis.unavailable", error=error, retry_in=round(delay, 2))
        backoff.sleep(delay)

    def _revive_embedded(self) -> bool:
        """The embedded server went away under us (the daemon of another namespace on this
        folder stopped it, or it crashed): start it again, from its append-only file. True
        when it was started again (and `_revived_at` says when)."""
        if self.embedded is None:
            return False
        try:
            if self.embedded.revive():
                self._revived_at = time.monotonic()
                log.warning("redis.embedded.revived", pid=self.embedded.pid)
                return True
        except MnemodError as exc:
            log.error("redis.embedded.revive_failed", error=str(exc))
        return False

    def _recover_lost_data(self, parts: Leading) -> None:
        """Redis lost its data (FLUSHALL, a restart without persistence): take the lease
        again, recreate the groups and rebuild the hot layer from the files."""
        if parts.hot.marker_present():
            return
        log.warning("redis.data_lost", action="rebuilding the hot layer")
        if not parts.lease.acquire():
            holder = parts.lease.holder()
            raise LeaseLost(f"lease of {self.options.namespace} is held by {holder}")
        parts.writer.ensure_groups()
        parts.writer.reread_pending()
        parts.hot.rebuild(parts.engine)

    def _heartbeat(self, parts: Leading) -> None:
        engine, writer, hot = parts.engine, parts.writer, parts.hot
        self._recover_lost_data(parts)
        pending = writer.pending_count()
        hot_items = hot.count()
        writer.record_job("heartbeat", {"pending": pending, "hot": hot_items})
        parts.status.write(engine, writer, hot, parts.scheduler, state=self.state.value)
        self.metrics.set_events_pending(self.options.namespace, pending)
        self.metrics.set_hot_items(self.options.namespace, hot_items)

    def _reload(self, engine: Engine, writer: Writer) -> None:
        """SIGHUP: read the config file again; keep the old one if the new one is bad."""
        self.notifier.reloading("reloading config")
        try:
            fresh = load_config(self.options.config_path)
        except ConfigError as exc:
            log.error("config.reload_failed", error=str(exc), action="kept the running config")
            self.notifier.ready("config reload failed")
            return
        if fresh.redis.url != self.config.redis.url:
            log.warning("config.reload_partial", reason="redis.url changes need a restart")
        self.config = fresh
        engine.config = fresh
        writer.config = fresh
        log.info("config.reloaded", source=fresh.source)
        self.notifier.ready("config reloaded")
        self.commands.post(Command("reload_l1"))


def _interval_seconds(spec: str, default: float) -> float:
    from mnemod.config import parse_schedule

    kind, value = parse_schedule(spec)
    return value.total_seconds() if kind == "interval" else default
