"""What the suite's tiers and leak guards check (tests/conftest.py applies them).

Tiers: `process` for a test that starts processes of its own (`mnemod run`, the CLI, a
redis-server, node), `redis` for one that uses the session's private server, `unit` for the
rest. A test's tier comes from the fixtures it uses or a `process` mark on it or its
module; one outside `process` that starts a process fails (an audit hook refuses it), so the
fast tiers stay fast.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection
from typing import Any

import pytest
import redis

PROCESS_FIXTURES = {"daemons", "external"}
REDIS_FIXTURES = {"redis_server"}
PROCESS_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.fork"}
"""Audit events (sys.addaudithook) that start a process."""
OWN_KEY = re.compile(r"[^:{}]+:\{[^:{}]+\}:(.*)")
"""mnemod's own key space: `<prefix>:{<namespace>}:…` (redisio/keys.py)."""
OWN_EXPIRING = ("reply:", "session:", "lease", "standby")
"""mnemod's keys that must expire: answers (60 s), `once` ledgers (a day), the lease, the
daemons standing by."""


def tier(item: pytest.Item) -> str:
    # with the fixtures its fixtures use (doctests and other items have none)
    fixtures = set(item.fixturenames if isinstance(item, pytest.Function) else ())
    if item.get_closest_marker("process") or fixtures & PROCESS_FIXTURES:
        return "process"
    if item.get_closest_marker("redis") or fixtures & REDIS_FIXTURES:
        return "redis"
    return "unit"


class Processes:
    """Whether the running test may start processes (outside a test: yes)."""

    allowed = True
    test = ""


def refuse_stray_processes(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: a test outside the `process` tier may not start a process."""
    if event in PROCESS_EVENTS and not Processes.allowed:
        what = args[1] if event in ("subprocess.Popen", "os.posix_spawn") else args
        raise RuntimeError(
            f"{Processes.test} starts a process ({str(what)[:100]}) outside the `process` "
            "tier: use the `daemons` fixture or mark it `process` (see tests/guards.py)"
        )


class starting_processes:
    """For the session's fixtures: a server they start serves every tier."""

    def __enter__(self) -> None:
        self.was = Processes.allowed
        Processes.allowed = True

    def __exit__(self, *exc: object) -> None:
        Processes.allowed = self.was


def keys_without_ttl(client: redis.Redis) -> set[str]:
    """Keys that never expire but should: an agent's Redis would keep them forever. That is
    any key outside mnemod's own key space (an agent's reply list, say), and of mnemod's
    own its answers, session ledgers and lease."""
    found = set()
    for key in client.scan_iter(count=1000):
        own = OWN_KEY.match(key)
        if (own is None or own.group(1).startswith(OWN_EXPIRING)) and client.ttl(key) == -1:
            found.add(key)
    return found


PROCESS_WIDE_THREADS = {"tqdm_monitor"}
"""Library threads that live as long as the process by design, not a test's to stop: tqdm
starts its monitor with the first progress bar and keeps it."""


def threads_started(before: Collection[threading.Thread]) -> list[threading.Thread]:
    """Threads running now that were not in `before` (less PROCESS_WIDE_THREADS)."""
    return [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and t.name not in PROCESS_WIDE_THREADS
    ]
