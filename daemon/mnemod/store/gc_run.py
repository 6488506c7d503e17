"""One GC run as a sequence of short steps, so that the daemon's writer can answer requests
and apply events between them.

The plan is made in steps over the engine's entries as they change (domain.gc.planning),
then applied in steps, each re-checked against the entries as they are then: an entry
that expires is still there and still expired; a merge group whose members all remain and
none of which changed since the plan's view was taken (the GC index's stamps) is folded,
any other is left whole for the next run (its members stay marked in the index); an
entry to mark promotable or to promote is still there. Last, the GC index is settled and
what the run changed itself (the merges' survivors) is looked from at once
(domain.gc.examining), so that the next run looks only from what changes after this one.
Each step changes the engine only
through its own primitives, so the change log, the hot layer and resolve stay in step as
with any single change; the daemon commits after every step that changed something.

The library and the CLI run it in one go (`run_gc`), the cyclic collector held to young
collections every `YOUNG_EVERY` s meanwhile (store.heap.YoungOnly, nothing frozen): its
full passes over the index being built took a quarter of a from-scratch GC's CPU at
100,000 entries.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from mnemod.domain.gc import GcPlan, GcReport, examining, planning
from mnemod.domain.retention import is_expired
from mnemod.domain.similar_pairs import KeywordIndex, Settlement
from mnemod.store.heap import YoungOnly
from mnemod.store.stepped import Stepped

if TYPE_CHECKING:
    from mnemod.store.engine import Engine

log = structlog.get_logger("mnemod.gc")

APPLY_STEP = 8  # entries expired, folded, marked or promoted between two yields
COUNT_STEP = 5000  # entries counted, likewise
YOUNG_EVERY = 1.0  # seconds of a GC run in one go between two young collections


class GcRun:
    """A GC of `engine` at `now`: `run(seconds)` does about that much of it; `report` is
    set once it is done."""

    def __init__(
        self,
        engine: Engine,
        now: datetime,
        dry_run: bool,
        by: str,
        expire_only: bool,
        changes_per_run: int | None = None,
    ) -> None:
        """`changes_per_run`: a `run` ends early once the engine holds that many changed
        entries (the daemon commits after each: a commit costs what it holds)."""
        self.engine, self.now, self.dry_run, self.by = engine, now, dry_run, by
        self.expire_only = expire_only
        self.changes_per_run = changes_per_run
        self.plan: GcPlan | None = None  # once made (then it is applied)
        self.report: GcReport | None = None
        self.changed = False  # the last `run` changed the engine (to commit)
        self.started = time.perf_counter()
        self._index: KeywordIndex | None = None
        self._stepped = Stepped(self._run())

    def run(self, seconds: float | None) -> bool:
        """About `seconds` of the run (all of it with None); True once it is done."""
        self.changed = False
        limit, engine = self.changes_per_run, self.engine
        done = self._stepped.run(
            seconds, None if limit is None else lambda: len(engine.changed) >= limit
        )
        self.report = self._stepped.result
        return done

    def _run(self) -> Generator[None, None, GcReport]:
        engine = self.engine
        index = self._index = None if self.expire_only else engine.gc_index()
        plan = self.plan = yield from planning(
            engine.entries, engine.config, self.now, expire_only=self.expire_only, index=index
        )
        yield
        if self.dry_run:
            report = plan.report(list(engine.entries.values()), dry_run=True)
        else:
            report = yield from self._apply(plan)
        log.info(
            "gc.finished",
            namespace=engine.paths.namespace,
            expire_only=self.expire_only,
            duration_ms=round((time.perf_counter() - self.started) * 1000, 1),
            busy_ms=round(self._stepped.busy_seconds * 1000, 1),
            longest_step_ms=round(self._stepped.longest_step * 1000, 1),
            **report.as_dict(summary=True),
        )
        return report

    def _apply(self, plan: GcPlan) -> Generator[None, None, GcReport]:
        engine, now, by = self.engine, self.now, self.by
        before = len(engine.entries)
        promotable = 0  # counted a slice at a time (the report's)
        ids = list(engine.entries)
        for start in range(0, len(ids), COUNT_STEP):
            for entry_id in ids[start : start + COUNT_STEP]:
                found = engine.entries.get(entry_id)
                if found is not None and found.promotable:
                    promotable += 1
            yield
        expired: list[str] = []
        for step, entry_id in enumerate(plan.expired):
            if step % APPLY_STEP == APPLY_STEP - 1:
                yield
            entry = engine.entries.get(entry_id)
            if entry is None or not is_expired(entry, now):
                continue  # removed, or used, since the plan
            expired_at = entry.expires_at.isoformat() if entry.expires_at else "?"
            engine.archive(entry, f"expired at {expired_at}", now, by)
            engine.record(now, "expire", entry_id, by)
            engine.drop(entry)
            engine.touched(entry_id, "remove")
            expired.append(entry_id)
            self.changed = True
        merges: list[tuple[str, list[str]]] = []
        left: set[str] = set()  # members of groups left for the next run
        index, upto = self._index, self._upto(plan)
        folds = 0
        for survivor_id, folded_ids in plan.merges:
            if folds >= APPLY_STEP:
                folds = 0
                yield
            members = (survivor_id, *folded_ids)
            if any(
                i not in engine.entries or (index is not None and index.changed_after(i, upto))
                for i in members
            ):
                left.update(members)
                continue
            survivor = engine.entries[survivor_id]
            taken = []
            drift = index.drift if index is not None else 0
            for folded_id in folded_ids:
                if engine.fold(survivor, engine.entries[folded_id], now, by):
                    taken.append(folded_id)
            if index is not None:
                index.discount(index.drift - drift)
            folds += len(members)
            merges.append((survivor_id, taken))
            self.changed = True
        marked = 0
        for step, entry_id in enumerate(plan.newly_promotable):
            if step % (APPLY_STEP * 4) == APPLY_STEP * 4 - 1:
                yield
            found = engine.entries.get(entry_id)
            if found is not None and not found.promotable:
                found.promotable = True
                engine.touched(entry_id, "update")
                marked += 1
                self.changed = True
        promoted: list[str] = []
        for start in range(0, len(plan.promote), APPLY_STEP):
            chunk = [engine.entries.get(i) for i in plan.promote[start : start + APPLY_STEP]]
            present = [e for e in chunk if e is not None]
            if present:
                engine.promote_many(present, now, by)
                promoted.extend(e.id for e in present)
                self.changed = True
            yield
        if index is not None and plan.settlement is not None:
            settlement = plan.settlement
            yield from index.settling(  # the next plan starts from here
                Settlement(
                    settlement.upto,
                    settlement.rule,
                    settlement.keep | frozenset(i for i in left if i in engine.entries),
                    settlement.pending,
                )
            )
            # what this run changed (the survivors) is looked from now, not by the next run
            examined = yield from examining(engine.entries, engine.config, now, index)
            yield from index.settling(examined)
        merged = sum(len(taken) for _, taken in merges)
        return GcReport(
            expired=len(expired),
            merged=merged,
            kept=before - len(expired) - merged - len(promoted),
            promotable=promotable + marked,
            promoted=len(promoted),
            dry_run=False,
            details={"expired": expired, "merges": merges, "promoted": promoted},
        )

    @staticmethod
    def _upto(plan: GcPlan) -> int:
        return plan.settlement.upto if plan.settlement is not None else 0


def run_gc(engine: Engine, now: datetime, dry_run: bool, by: str, expire_only: bool) -> GcReport:
    """A whole GC run at once (the library, the CLI)."""
    gc_run = GcRun(engine, now, dry_run, by, expire_only)
    collector = YoungOnly(freeze=False)  # no full pass over the index it builds
    try:
        with engine.deferred():
            while not gc_run.run(YOUNG_EVERY):
                collector.collect()
    finally:
        collector.release()
    assert gc_run.report is not None
    return gc_run.report
