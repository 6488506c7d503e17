"""One namespace inside `mnemod run`: stand by until this daemon holds its lease, then lead it
(engine, writer, hot layer, requests, scheduler, file watcher) until stopped or the lease
is lost, and stand by again.

The process (runtime.daemon) owns what every namespace shares: the Redis connection (and
the embedded server), the metrics, sd_notify, the signals' flags and the config. Each
runner owns one namespace's lease, files and writer, on a thread of its own: nothing of a
namespace is touched from another thread (the scheduler and the watcher only post
commands). What it does while it does not lead is runtime.standby; while it leads,
runtime.leading; what the two share, runtime.runner_context.
"""

from __future__ import annotations

import threading

import structlog

from mnemod.config import Config
from mnemod.errors import LockedError
from mnemod.redisio.change_feed import FencedOut
from mnemod.redisio.lease import Lease
from mnemod.runtime.catch_up import Diverged
from mnemod.runtime.leading import Leader
from mnemod.runtime.runner_context import Folders, Host, RunnerContext
from mnemod.runtime.standby import Standby
from mnemod.runtime.startup_lease import LeaseLost

log = structlog.get_logger("mnemod.daemon")


class NamespaceRunner:
    """One namespace: `run()` stands by and leads in turn until the process stops."""

    def __init__(self, host: Host, namespace: str, folders: Folders) -> None:
        self.context = RunnerContext(host, namespace, folders)
        self.host, self.namespace = host, namespace
        self._standby = Standby(self.context)
        self._leader = Leader(self.context)
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
                leading, engine = self._standby.follow(lease)
                if not leading:
                    break
                try:
                    self._leader.lead(lease, engine)
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
