"""The periodic hot-layer refresh in steps: retention scores decay with time, so every L3
entry's score is computed again and the hot set chosen anew, a few thousand entries a step,
so that the writer answers requests and applies events between steps.

Scores are computed from a cursor over the entries as they were when the refresh began
(entries added since are scored at the end); the best `hot.max_entries` are kept in a
bounded heap. Then the new set is put in force in memory at once (the batches after it
admit and evict against it) and written to Redis a chunk at a time, each item re-checked
against the engine then: an entry gone since is not written, one evicted or taken back
since is left as the batch that did so left it. L1 and L2 items do not decay: the full
`HotSync.rebuild` (start-up, Redis data loss) is the one that writes them and sweeps
stray keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator

import structlog

from mnemod.domain.retention import retention_score
from mnemod.redisio.hot_layer import HotItem
from mnemod.runtime.hot_sync import HotSync
from mnemod.store.engine import Engine
from mnemod.store.stepped import Stepped

log = structlog.get_logger("mnemod.hot")

SCORE_STEP = 2000  # entries scored between two yields
WRITE_STEP = 50  # items written to (or removed from) Redis between two yields


class HotRefresh:
    """One refresh: `run(seconds)` does about that much of it; `result` is set once done."""

    def __init__(self, engine: Engine, hot: HotSync) -> None:
        self.engine, self.hot = engine, hot
        self.result: dict[str, int] | None = None
        self.changed = False  # it changes Redis only, never the engine
        self._stepped = Stepped(self._run())

    def run(self, seconds: float | None) -> bool:
        done = self._stepped.run(seconds)
        self.result = self._stepped.result
        return done

    def _run(self) -> Generator[None, None, dict[str, int]]:
        engine, hot = self.engine, self.hot
        now = hot.clock.now()
        limit = engine.config.hot.max_entries
        ttl = engine.config.ttl
        best: list[tuple[float, str]] = []  # a min-heap of the best `limit`
        ids = list(engine.entries)
        seen: set[str] = set()

        def offer(entry_id: str) -> None:
            entry = engine.entries.get(entry_id)
            if entry is None:
                return
            item = (retention_score(ttl, entry, now), entry_id)
            seen.add(entry_id)
            if len(best) < limit:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)

        for start in range(0, len(ids), SCORE_STEP):
            for entry_id in ids[start : start + SCORE_STEP]:
                offer(entry_id)
            yield
        for entry_id in list(hot.scores):  # admitted since the refresh began
            if entry_id not in seen:
                offer(entry_id)
        scores = {entry_id: score for score, entry_id in best if entry_id in engine.entries}
        before = set(hot.scores)
        leaving = [entry_id for entry_id in before if entry_id not in scores]
        hot.adopt(scores)
        for start in range(0, len(leaving), WRITE_STEP):
            gone = [i for i in leaving[start : start + WRITE_STEP] if i not in hot.scores]
            hot.layer.apply([], gone)
            yield
        # new in the hot set: the whole item; already in it: its score (and access fields)
        order = sorted(scores, key=lambda i: (i in before, -scores[i]))
        staying = 0
        for start in range(0, len(order), WRITE_STEP):
            puts: list[HotItem] = []
            touches: list[HotItem] = []
            for entry_id in order[start : start + WRITE_STEP]:
                entry = engine.entries.get(entry_id)
                score = hot.scores.get(entry_id)
                if entry is not None and score is not None:
                    item = HotItem.from_entry(entry, "l3", score)
                    (touches if entry_id in before else puts).append(item)
            hot.layer.apply(puts, [])
            hot.layer.touch(touches)
            staying += len(touches)
            yield
        log.info(
            "hot.rebuilt",
            l1=len(engine.l1_items()),
            l2=len(engine.l2_entries),
            l3=len(scores),
            left=len(leaving),
            kept=staying,
            longest_step_ms=round(self._stepped.longest_step * 1000, 1),
        )
        return {"hot": len(scores) + len(engine.l2_entries) + len(engine.l1_items())}
