"""How many events the writer reads at a time: more while a burst waits, back to
`daemon.batch_size` once the events come no faster than they are applied.

A read takes what is there, up to its count, so a trickle is read at once in small batches
whatever the count. While reads come back full, events are waiting: the count doubles (a
commit, its fsync and the hot layer's script are then paid once for more events) as long
as a batch takes under BUDGET_SECONDS of the writer's work (CPU time: on a machine other
work shares, the clock's time would shrink the batches as the writer waits for a core), up
to MAX_GROWTH times the setting; a batch that takes over twice that halves it again. What
is read with the events (requests) waits for the writer's step (runtime.writer), not for
the whole read.
"""

from __future__ import annotations

BUDGET_SECONDS = 0.1
MAX_GROWTH = 8
MOST = 10_000  # the setting's own bound


class BatchSize:
    def __init__(self, base: int) -> None:
        self.count = base

    def taken(self, got: int, seconds: float, base: int) -> int:
        """After a batch of `got` events (read with the last count) that took `seconds`
        of work to apply and commit: the count of the next read, `base` the setting."""
        if got < self.count:
            self.count = base
        elif seconds < BUDGET_SECONDS:
            self.count = min(self.count * 2, base * MAX_GROWTH, MOST)
        elif seconds > 2 * BUDGET_SECONDS:
            self.count = self.count // 2
        self.count = max(self.count, base)
        return self.count
