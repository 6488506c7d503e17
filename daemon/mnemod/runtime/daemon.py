"""`mnemod run`: the process around the namespaces it serves.

STOPPED → STARTING (Redis, metrics) → RUNNING (one runtime.runner.NamespaceRunner per
namespace, each standing by or leading on a thread of its own) → STOPPING (each runner
drains: stop reading, finish the batch, snapshot, XACK, release the lease) → STOPPED. The
process owns what the namespaces share: the Redis connection and the embedded server, the
metrics endpoint, sd_notify (READY once every namespace leads or stands by, the watchdog
while every runner's loop turns) and the config, which SIGHUP reloads. Every resource goes
on an ExitStack the moment it is acquired, so teardown runs in reverse order whatever
fails. Signal handlers live in the CLI and only call `request_*`.
"""

from __future__ import annotations

import enum
import math
import shlex
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config, load_config, redact_url
from mnemod.errors import ConfigError, MnemodError, RedisUnavailableError
from mnemod.processes import describe_owner, owner_id
from mnemod.redisio.connection import (
    REDIS_FAILURES,
    Backoff,
    check_version,
    connect,
)
from mnemod.redisio.embedded import DAEMON_CLIENT, EmbeddedRedis
from mnemod.redisio.keys import daemons_key
from mnemod.redisio.presence import Presence
from mnemod.runtime.discovery import EVERY, found_namespaces
from mnemod.runtime.leadership import Leadership
from mnemod.runtime.metrics import Metrics
from mnemod.runtime.runner import NamespaceRunner
from mnemod.runtime.runner_context import Folders
from mnemod.runtime.sdnotify import Notifier, watchdog_interval

log = structlog.get_logger("mnemod.daemon")
DISCOVERY_ERRORS: tuple[type[BaseException], ...] = (*REDIS_FAILURES, OSError)  # a refused SCAN too
REVIVE_CALM_SECONDS = 10.0  # an embedded server started again sooner is a crash loop
IDLE_TICK_SECONDS = 1.0  # how often the process looks after its namespaces, at most


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass(frozen=True)
class DaemonOptions:
    data_dir: Path
    namespaces: tuple[str, ...]
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
        self._wake = threading.Event()  # a stop or a reload for the process's own thread
        self.owner = owner_id()
        self.metrics = Metrics(process_label=",".join(options.namespaces))
        self.discovering = EVERY in options.namespaces
        self.notifier = Notifier.from_environ()
        self.url = ""
        self._client: redis.Redis | None = None  # from `run` on
        self._leadership: Leadership | None = None
        self.embedded: EmbeddedRedis | None = None  # the embedded default, when in use
        self.runners: dict[str, NamespaceRunner] = {}
        self._announced: dict[str, str] = {}
        self._lock = threading.Lock()
        self._revive_lock = threading.Lock()
        self._revived_at = -math.inf  # when the embedded server was last started again
        self._failure: BaseException | None = None  # what ended a runner's thread

    # ---- called from signal handlers: only set flags ----------------------------------
    def request_stop(self) -> None:
        self.stop_requested.set()
        self._wake.set()

    def request_reload(self) -> None:
        self.reload_requested.set()
        self._wake.set()

    # ---- lifecycle -----------------------------------------------------------------------
    def run(self) -> int:
        self.state = State.STARTING
        with ExitStack() as stack:
            stack.callback(self._set_state, State.STOPPED)
            self.url = self._redis_url(stack)
            client = self._connect()
            if client is None:
                return 0
            self._client = client
            stack.callback(client.close)
            self._wait_for_redis(client)
            if self.stop_requested.is_set():
                return 0
            stack.callback(self.metrics.serve(self.config.metrics.host, self.config.metrics.port))
            self._leadership = Leadership(
                Presence(client, daemons_key(self.config.redis.prefix), self._lease_ttl),
                self.owner,
                self.clock,
                self._lease_ttl,
            )
            stack.callback(self._leadership.leave)
            self.state = State.RUNNING
            self._serve_all()
        log.info("daemon.stopped", namespace=",".join(self.options.namespaces))
        return 0

    @property
    def client(self) -> redis.Redis:
        """The process's Redis client, which every namespace uses (thread-safe: a pool)."""
        assert self._client is not None, "the daemon is not running"
        return self._client

    @property
    def leadership(self) -> Leadership:
        assert self._leadership is not None, "the daemon is not running"
        return self._leadership

    @property
    def _lease_ttl(self) -> float:
        return self.config.daemon.lease_ttl.total_seconds()

    def _serve_all(self) -> None:
        """A runner per namespace, the first on this (the main) thread, so that a profiler
        of the process sees a writer; the process's own chores on a thread of their own."""
        static = [ns for ns in self.options.namespaces if ns != EVERY]
        found = self._discover() if self.discovering else []
        for namespace in found:
            if namespace not in static:
                log.info("namespace.found", namespace=namespace)
        namespaces = list(dict.fromkeys([*static, *found]))
        for namespace in namespaces:
            self._add_runner(namespace)
        self.leadership.beat()
        runners = list(self.runners.values())
        for runner in runners[1:]:
            runner.start_thread()
        tending = threading.Thread(target=self._tend_or_fail, name="mnemod-process", daemon=True)
        tending.start()
        try:
            if runners:
                runners[0].run()
            else:  # "*" found none yet: ready all the same, the first found says more
                self.notifier.ready("serving no namespace yet")
                self.stop_requested.wait()
        finally:
            self.request_stop()
            self.state = State.STOPPING
            tending.join()
            for runner in list(self.runners.values()):
                if runner.thread is not None:
                    runner.thread.join()
        if self._failure is not None:
            raise self._failure

    def _add_runner(self, namespace: str) -> NamespaceRunner:
        runner = NamespaceRunner(
            self, namespace, Folders(self.options.data_dir, self.options.l1_dir)
        )
        self.runners[namespace] = runner
        self.metrics.add_namespace(namespace)
        self.leadership.served = len(self.runners)
        return runner

    def _discover(self) -> list[str]:
        """The namespaces found (runtime.discovery) that no runner serves yet."""
        try:
            found = found_namespaces(self.client, self.config.redis.prefix, self.options.data_dir)
        except DISCOVERY_ERRORS as exc:
            log.warning("namespaces.discovery_failed", error=str(exc)[:300])
            return []
        return [ns for ns in found if ns not in self.runners]

    def _take_up_new(self) -> None:
        for namespace in self._discover():
            log.info("namespace.found", namespace=namespace)
            self._add_runner(namespace).start_thread()

    def _client_name(self) -> str:
        namespaces = self.options.namespaces
        served = namespaces[0] if len(namespaces) == 1 else f"{len(namespaces)}-namespaces"
        return f"{DAEMON_CLIENT}{served}:{self.owner}"

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

    def _connect(self) -> redis.Redis | None:
        """The process's client (None: a stop came first). A cluster client asks for the
        cluster's layout at once: while no node named answers, that is waited out as any
        outage."""
        backoff = Backoff(sleep=self.stop_requested.wait)
        while not self.stop_requested.is_set():
            try:
                return connect(self.url, self.config.redis.socket_timeout, name=self._client_name())
            except RedisUnavailableError as exc:
                self.wait_out(backoff, str(exc))
        return None

    def _wait_for_redis(self, client: redis.Redis) -> None:
        backoff = Backoff(sleep=self.stop_requested.wait)
        while not self.stop_requested.is_set():
            try:
                version = check_version(client, self.url)
            except MnemodError as exc:
                self.wait_out(backoff, str(exc))
                continue
            log.info("redis.connected", version=".".join(map(str, version)))
            return

    # ---- the process's own thread: reloads, the watchdog, leadership, new namespaces -----
    def _tend_or_fail(self) -> None:
        try:
            self._tend()
        except BaseException as exc:  # noqa: BLE001 (any: it ends the process, reported)
            log.error("daemon.namespace_failed", namespace="", error=repr(exc)[:300])
            self.fail(exc)

    def _tend(self) -> None:
        ping_every = watchdog_interval()
        last_ping = -math.inf
        beat_every = self._lease_ttl / 3
        last_beat = last_look = self.clock.monotonic()
        tick = min(IDLE_TICK_SECONDS, beat_every, ping_every or math.inf)
        while not self.stop_requested.is_set():
            self._wake.wait(tick)
            self._wake.clear()
            if self.stop_requested.is_set():
                break
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload()
            now = self.clock.monotonic()
            if now - last_beat >= beat_every:
                self.leadership.beat()
                last_beat = now
            discover_every = self.config.daemon.discover_interval.total_seconds()
            if self.discovering and now - last_look >= discover_every:
                self._take_up_new()
                last_look = now
            if ping_every is not None and now - last_ping >= ping_every and self._turning(now):
                self.notifier.watchdog()
                last_ping = now

    def _turning(self, now: float) -> bool:
        """Every runner's loop turned within the watchdog's time (twice its ping interval)."""
        ping_every = watchdog_interval() or math.inf
        return all(now - runner.beat < 2 * ping_every for runner in list(self.runners.values()))

    def _reload(self) -> None:
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
        if fresh.daemon.namespaces != self.config.daemon.namespaces:
            log.warning("config.reload_partial", reason="daemon.namespaces changes need a restart")
        self.config = fresh
        for runner in list(self.runners.values()):
            runner.reload(fresh)
        log.info("config.reloaded", source=fresh.source)
        self.notifier.ready("config reloaded")

    # ---- what the runners call -----------------------------------------------------------
    def announce(self, namespace: str, state: str, text: str) -> None:
        """A runner leads (`leading`) or stands by (`standby`, `text` the leader): READY,
        once every namespace said one or the other, with what this daemon does."""
        if state == "standby":
            said = (
                f"{text} leads namespace {namespace}; this daemon takes over when it stops"
                if text != describe_owner(None)
                else f"namespace {namespace} is left to another daemon (this one leads its share)"
            )
            print(f"mnemod: standing by: {said}", flush=True)  # noqa: T201 (who leads)
        with self._lock:
            self._announced[namespace] = state if state == "leading" else f"standby: {text}"
            if len(self._announced) < len(self.runners):
                return
            states = dict(self._announced)
        if len(states) == 1:
            leads = state == "leading"
            alone = f"standby: {text} leads this namespace"
            alone = f"leading namespace {namespace}" if leads else alone
            self.notifier.ready(alone)
            return
        leading = sorted(ns for ns, said in states.items() if said == "leading")
        self.notifier.ready(f"leading {len(leading)} of {len(states)} namespaces")

    def fail(self, exc: BaseException) -> None:
        """A runner's thread ended with an error: the process stops, and says why."""
        with self._lock:
            self._failure = self._failure or exc
        self.request_stop()

    def stopping(self, text: str) -> None:
        if self.stop_requested.is_set():  # not when a runner only gave its lease up
            self.notifier.stopping(text)

    def wait_out(self, backoff: Backoff, error: str) -> None:
        """Say Redis is unavailable and wait before trying again. The embedded server, if it
        went away, is started again first and then tried at once: an outage's backoff (up
        to 30 s) would only keep a fresh server idle. A server that keeps going away
        (started again within REVIVE_CALM_SECONDS) is waited for as any outage is."""
        last = self._revived_at
        if self.revive_embedded() and self._revived_at - last > REVIVE_CALM_SECONDS:
            backoff.reset()
        delay = backoff.next_delay()
        log.warning("redis.unavailable", error=error, retry_in=round(delay, 2))
        backoff.sleep(delay)

    def revive_embedded(self) -> bool:
        """The embedded server went away under us (the daemon of another namespace on this
        folder stopped it, or it crashed): start it again, from its append-only file. True
        when it was started again (and `_revived_at` says when). One runner at a time: the
        others find it running."""
        if self.embedded is None:
            return False
        with self._revive_lock:
            try:
                if self.embedded.revive():
                    self._revived_at = self.clock.monotonic()
                    log.warning("redis.embedded.revived", pid=self.embedded.pid)
                    return True
            except MnemodError as exc:
                log.error("redis.embedded.revive_failed", error=str(exc))
            return False
