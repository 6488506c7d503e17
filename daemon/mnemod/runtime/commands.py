"""Commands posted to the single writer by the scheduler, the file watcher and signals.

Producers only enqueue; the writer thread executes. That keeps one writer per namespace
without locks around the engine (handlers only enqueue: one consumer owns the engine).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from pathlib import Path

KINDS = (
    "expiry",  # expire entries whose TTL ran out
    "gc",  # the full GC
    "hot_refresh",  # recompute retention scores and the hot set
    "snapshot",  # write index.json if dirty, then XACK what it covers
    "trim",  # trim acknowledged stream entries
    "heartbeat",  # status hash, lease, Redis-loss check
    "reload_l1",  # an L1 file changed (path) or all of them (path=None)
    "reload_l2",  # a person edited an L2 file
)


@dataclass(frozen=True)
class Command:
    kind: str
    path: Path | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown command {self.kind!r}")


class CommandQueue:
    """A thread-safe inbox; duplicates of a pending command are coalesced."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()

    def post(self, command: Command) -> None:
        self._queue.put(command)

    def drain(self) -> list[Command]:
        found: list[Command] = []
        while True:
            try:
                found.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return list(dict.fromkeys(found))
