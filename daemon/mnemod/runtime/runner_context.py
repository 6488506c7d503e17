"""What one namespace's runner shares between standing by and leading: the process that
hosts it, the namespace, its folders and keys, and the state and beat the process reads
(status, the watchdog). Only the runner's own thread writes them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config
from mnemod.redisio.connection import Backoff
from mnemod.redisio.keys import Keys
from mnemod.redisio.presence import Presence
from mnemod.runtime.commands import CommandQueue
from mnemod.runtime.leadership import Leadership
from mnemod.runtime.metrics import Metrics
from mnemod.store.engine import Engine
from mnemod.store.heap import collector_paused, freeze_started, thaw_and_collect
from mnemod.store.paths import NamespacePaths

log = structlog.get_logger("mnemod.daemon")


class Host(Protocol):
    """What the process gives each of its namespaces (runtime.daemon.Daemon)."""

    config: Config
    owner: str
    url: str
    metrics: Metrics
    stop_requested: threading.Event

    @property
    def clock(self) -> Clock: ...

    @property
    def client(self) -> redis.Redis: ...

    @property
    def leadership(self) -> Leadership: ...

    def wait_out(self, backoff: Backoff, error: str) -> None: ...

    def revive_embedded(self) -> bool: ...

    def announce(self, namespace: str, state: str, text: str) -> None: ...

    def stopping(self, text: str) -> None: ...

    def fail(self, exc: BaseException) -> None: ...


@dataclass(frozen=True)
class Folders:
    data_dir: Path
    l1_dir: Path


class RunnerContext:
    """One namespace's runner, as its halves see it: `state` is stopped, standby, running
    or stopping; `beat` is the loop's last turn (clock.monotonic)."""

    def __init__(self, host: Host, namespace: str, folders: Folders) -> None:
        self.host = host
        self.namespace = namespace
        self.folders = folders
        self.keys = Keys(host.config.redis.prefix, namespace)
        self.commands = CommandQueue()
        # the daemons ready to take this namespace over (this one, while under its share)
        self.standby = Presence(host.client, self.keys.standby, host.config.daemon.lease_ttl)
        self.state = "stopped"
        self.beat = host.clock.monotonic()  # the loop's last turn: the watchdog looks
        self._fresh_config: Config | None = None
        self._lock = threading.Lock()
        self._opened = False  # an engine was opened before (see open_engine)

    @property
    def paths(self) -> NamespacePaths:
        return NamespacePaths(self.folders.data_dir, self.namespace)

    def offer_config(self, fresh: Config) -> None:
        """A new config (from the process's thread), for the loop's next turn."""
        with self._lock:
            self._fresh_config = fresh

    def take_config(self) -> Config | None:
        """The config offered since the last look, if any."""
        with self._lock:
            fresh, self._fresh_config = self._fresh_config, None
        return fresh

    def open_engine(self, replica: bool = False) -> Engine:
        """The namespace's engine, its objects frozen (store.heap) before the collector
        comes back: the engine pauses it while it reads, so the first young pass after the
        open scanned every object read (0.12 s of CPU at 100,000 entries). Opened again,
        the frozen heap is collected first (`thaw_and_collect`)."""
        if self._opened:
            thaw_and_collect()
        self._opened = True
        with collector_paused():
            engine = Engine(
                self.paths,
                self.host.config,
                self.host.clock,
                l1_dir=self.folders.l1_dir,
                actor="agent",
                autosave=False,
                replica=replica,
            )
            freeze_started()
        return engine


def wait_after_refusal(backoff: Backoff, exc: redis.ResponseError) -> None:
    """Redis refused a command (a key of mnemod's that something else overwrote with
    another type, say): say so and wait the backoff's next delay before trying again,
    rather than exit and be restarted into the same refusal until systemd gives up."""
    delay = backoff.next_delay()
    log.error("redis.command_refused", error=str(exc)[:300], retry_in=round(delay, 2))
    backoff.sleep(delay)
