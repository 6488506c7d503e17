"""Keeping Python's cyclic garbage collector away from the long-lived heap of entries.

The entries and their indexes are hundreds of thousands of objects that live as long as the
process. The collector's full passes over them cost time at the worst moments: while they
are read at start (3 of 8 s at 100,000 entries) and while requests are answered."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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


def freeze_heap() -> None:
    """Collect, then hide every object alive now from the collector: a full collection
    scanning the entries took 60-110 ms at 10,000 entries, stalling a request every few
    seconds under load. A frozen object that dies later is still freed by reference
    counting; collecting first keeps dead cycles from being frozen forever."""
    gc.collect()
    gc.freeze()


def freeze_young() -> None:
    """`freeze_heap` after collecting the young generations only: a full collection scans
    every object not frozen yet (after a GC at 100,000 entries, its index), a stall the
    writer's maintenance slices must not have."""
    gc.collect(1)
    gc.freeze()
