"""Keeping Python's cyclic garbage collector away from the long-lived heap of entries.

The entries and their indexes are hundreds of thousands of objects that live as long as the
process. The collector's full passes over them cost time at the worst moments: while they
are read at start (3 of 8 s at 100,000 entries) and while requests are answered. And
keeping what the daemon's threads free in one malloc heap (`one_malloc_arena`), handed back
to the system once a start-up or a GC is over (`release_free_memory`)."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside: reading an index creates only objects that are kept
    (reference counting still frees the rest). Restores the collector as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def built_whole() -> Iterator[None]:
    """Around a structure built whole inside one call (resolve's view or the dedup postings,
    when a request needs them before `warm` built them): no cyclic collection while it is
    built, then one full pass. With the collector on, each full pass during the build scans
    the heap built so far (three at 100,000 entries, 0.6 s of CPU; one after it, 0.3 s);
    and what the build made after the last of them counted as new, so the next full pass
    fell on a later request (a resolve of 100 ms at 10,000 entries, where one takes 2).
    After the pass the collector counts the built heap as old: its next full pass waits
    until the heap grew by a quarter again. No pass when the collector is off (the
    application's choice, or a maintenance job's hold: `YoungOnly`)."""
    with collector_paused():
        yield
    if gc.isenabled():
        gc.collect()


def freeze_heap() -> None:
    """Collect, then hide every object alive now from the collector: a full collection
    scanning the entries took 60-110 ms at 10,000 entries, stalling a request every few
    seconds under load. A frozen object that dies later is still freed by reference
    counting; collecting first keeps dead cycles from being frozen forever. While a
    maintenance job holds the collector (`YoungOnly`), the young generations only: what
    its slices made is frozen already."""
    gc.collect(1 if YoungOnly.holding else 2)
    gc.freeze()


def freeze_started() -> None:
    """Hide every object alive now from the collector, without collecting first: at a
    leader's start-up nearly all of them are the engine just read with the collector
    paused, all kept (a full pass there found no garbage at 100,000 entries and cost 0.09 s
    of CPU). What a pass would have found (a follower's cycles that died since its last
    pass) stays frozen: no more than one pass's worth, once per leadership."""
    gc.freeze()


def thaw_and_collect() -> None:
    """Hand every frozen object back to the collector and make a full pass: a runner
    that opens its engine again (a lost lease, a diverged copy) frees the engine it
    replaces, frozen and held in reference cycles, which no pass would ever see."""
    gc.unfreeze()
    gc.collect()


def freeze_young() -> None:
    """`freeze_heap` after collecting the young generations only: a full collection scans
    every object not frozen yet (after a GC at 100,000 entries, its index), a stall the
    writer's maintenance slices must not have."""
    gc.collect(1)
    gc.freeze()


class YoungOnly:
    """The collector's automatic passes held off while maintenance jobs run: a GC's index
    and plan are hundreds of thousands of new objects, and each full pass over them took
    100-150 ms of CPU at 100,000 entries (the longest wait of a request during a GC).
    `collect` after each slice collects the young generations (a pass over what the slice
    made, a millisecond or two) and freezes what is left, as `freeze_young` does at a GC's
    end; `release` puts the collector back as it was."""

    holding = 0  # how many are held now

    def __init__(self, freeze: bool = True) -> None:
        """`freeze`: the daemon's (a library's caller keeps its own heap as it is: its
        young generations are collected, nothing is frozen)."""
        self.was_enabled, self.freeze = gc.isenabled(), freeze
        gc.disable()
        YoungOnly.holding += 1

    def collect(self) -> None:
        if self.freeze:
            freeze_young()
        else:
            gc.collect(1)

    def release(self) -> None:
        YoungOnly.holding -= 1
        if self.was_enabled:
            gc.enable()


M_ARENA_MAX = -8  # glibc's mallopt parameter


def one_malloc_arena() -> bool:
    """Have glibc's malloc serve every thread from one arena, for a long-running daemon.

    By default each thread that allocates gets an arena of its own, and what such a thread
    frees stays in its arena: the daemon's threads that briefly hold big buffers (the
    checkpoint published at start-up, the checkpoint writer, Redis replies) left a warmed
    100,000-memory daemon at about 370 MB resident where one arena holds it at about 250
    MB. Python threads take turns under the GIL, so they hardly contend for the one arena.
    Called before the daemon starts a thread; left alone where MALLOC_ARENA_MAX is set
    (the person's choice) or where the C library is not glibc. True when it was set."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    mallopt = _libc("mallopt", ctypes.c_int, ctypes.c_int)  # its stub elsewhere answers 0
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, 1))


def release_free_memory() -> bool:
    """Hand the pages malloc holds free back to the system (glibc's `malloc_trim`): the
    start-up's buffers (the checkpoint's bytes and its parse, at 100,000 entries a peak of
    some 420 MB) and a GC's plan are freed into the middle of the heap, where they stay
    resident until something reuses them. At 100,000 entries, once warm: 7 MB less, for
    2 ms of CPU. True when the C library has the call."""
    trim = _libc("malloc_trim", ctypes.c_size_t)
    if trim is None:  # not glibc
        return False
    trim(0)
    return True


def _libc(name: str, *argtypes: type[ctypes._SimpleCData[Any]]) -> Any:
    """The function `name` of the C library the interpreter runs on, returning an int and
    taking `argtypes`; None where that library has none."""
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function
