"""`mnemod run`: the daemon in the foreground, with signal handlers that only set flags.

SIGTERM/SIGINT: drain and exit 0 (a second one forces an immediate exit, and so does the
drain deadline passing; either still stops the embedded redis-server, which runs in a
session of its own and would otherwise be left behind); SIGHUP: reload the config file.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

from mnemod.cli.context import Context
from mnemod.cli.progress import AroundBars, Spinner
from mnemod.cli.terminal import is_terminal
from mnemod.errors import InvalidInputError, MnemodError
from mnemod.runtime.sdnotify import Notifier
from mnemod.store.paths import check_namespace

if TYPE_CHECKING:
    from mnemod.runtime.daemon import Daemon

log = structlog.get_logger("mnemod.cli")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    run = sub.add_parser("run", parents=[common], help="run the daemon (foreground)")
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port, 1-65535; 0: off (default: metrics.port, 0)",
    )
    run.set_defaults(handler=cmd_run, several_namespaces=True, namespaces=None)


def cmd_run(ctx: Context) -> int:
    from mnemod.runtime.daemon import Daemon, DaemonOptions  # the one command that needs it
    from mnemod.store.heap import one_malloc_arena

    one_malloc_arena()  # before any thread: what threads free goes back to one heap
    namespaces = served_namespaces(ctx)
    ctx.make_data_dir()
    daemon = Daemon(
        ctx.config,
        DaemonOptions(ctx.data_dir, namespaces, ctx.l1_dir, ctx.args.config),
        ctx.clock,
    )
    # on a terminal, the start-up (reading the index, rebuilding the hot layer: seconds at
    # 100k entries) shows its time until the daemon says it is ready, leading or standing by
    starting = Spinner("starting: reading the index, rebuilding the hot layer")
    daemon.notifier = ReadyStops(daemon.notifier, starting.stop)
    deadline = ctx.config.daemon.drain_deadline.total_seconds()
    signals_seen = 0

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            os.write(2, b"mnemod: second signal, exiting now (unacknowledged events stay queued)\n")
            _exit_now(daemon)
        daemon.request_stop()
        timer = threading.Timer(deadline, _deadline_passed, args=(daemon, deadline))
        timer.daemon = True
        timer.start()

    def on_reload(_signum: int, _frame: FrameType | None) -> None:
        daemon.request_reload()

    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_stop),
        signal.SIGINT: signal.signal(signal.SIGINT, on_stop),
        signal.SIGHUP: signal.signal(signal.SIGHUP, on_reload),
    }
    stdout = sys.stdout
    if is_terminal(stdout):  # the agents' URL and the standby line go around the bar too
        sys.stdout = AroundBars(stdout)
    starting.start()
    try:
        return daemon.run()
    finally:
        starting.stop()
        sys.stdout = stdout
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def served_namespaces(ctx: Context) -> tuple[str, ...]:
    """The namespaces `run` serves: `--namespace` (repeated, or a,b), else
    `daemon.namespaces`; `*` stands for every namespace found (runtime.discovery)."""
    from mnemod.runtime.discovery import EVERY

    given: list[str] | None = ctx.args.namespaces
    names = [n.strip() for n in given] if given else list(ctx.config.daemon.namespaces)
    where = "--namespace" if given else "daemon.namespaces"
    for name in names:
        if name != EVERY:
            try:
                check_namespace(name)
            except InvalidInputError as exc:
                raise InvalidInputError(where, exc.reason) from exc
    served = tuple(dict.fromkeys(n for n in names if n))
    if not served:
        raise InvalidInputError(where, "names no namespace")
    return served


class ReadyStops(Notifier):
    """The daemon's sd_notify messages, passed on; the first READY or STOPPING also calls
    `on_ready` (which ends the start-up progress line)."""

    def __init__(self, inner: Notifier, on_ready: Callable[[], None]) -> None:
        super().__init__(None)
        self.inner = inner
        self.on_ready = on_ready

    @property
    def enabled(self) -> bool:
        return self.inner.enabled

    def notify(self, **fields: str | int) -> bool:
        if "ready" in fields or "stopping" in fields:
            self.on_ready()
        return self.inner.notify(**fields)

    def close(self) -> None:
        self.inner.close()


def _deadline_passed(daemon: Daemon, seconds: float) -> None:
    sys.stderr.write(f"mnemod: drain took longer than {seconds:g} s, exiting now\n")
    sys.stderr.flush()
    _exit_now(daemon)


def _exit_now(daemon: Daemon) -> NoReturn:
    """Exit without the drain, but not leaving the embedded redis-server behind (unless the
    daemon of another namespace uses it): its SHUTDOWN flushes the queued events to its
    append-only file, where the next start finds them."""
    import redis  # loaded by the daemon long before: not for every command's parser

    embedded = daemon.embedded
    if embedded is not None:
        try:
            embedded.release(leaving=daemon.owner)
        except (MnemodError, redis.RedisError, OSError) as exc:
            os.write(2, f"mnemod: the embedded redis-server may still run: {exc}\n".encode())
    os._exit(1)
