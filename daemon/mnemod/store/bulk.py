"""Operations over many entries at once: the GC run and `import`.

They change the engine only through its own primitives (drop, fold, touched, promote_many),
so the change log, the hot-layer change list and resolve's view stay in step as with any
single change.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from mnemod.domain.gc import GcReport, plan_gc
from mnemod.domain.model import Entry

if TYPE_CHECKING:
    from mnemod.store.engine import Engine

log = structlog.get_logger("mnemod.gc")


def run_gc(engine: Engine, now: datetime, dry_run: bool, by: str, expire_only: bool) -> GcReport:
    started = time.perf_counter()
    entries = list(engine.entries.values())
    index = None if expire_only else engine.gc_index()
    plan = plan_gc(entries, engine.config, now, expire_only=expire_only, index=index)  # pure
    report = plan.report(entries, dry_run)
    if dry_run:
        return report
    with engine.deferred():
        for entry_id in plan.expired:
            entry = engine.entries[entry_id]
            expired_at = entry.expires_at.isoformat() if entry.expires_at else "?"
            engine.archive(entry, f"expired at {expired_at}", now, by)
            engine.record(now, "expire", entry_id, by)
            engine.drop(entry)
            engine.touched(entry_id, "remove")
        for survivor_id, folded_ids in plan.merges:
            survivor = engine.entries[survivor_id]
            for folded_id in folded_ids:
                engine.fold(survivor, engine.entries[folded_id], now, by)
        for entry_id in plan.newly_promotable:
            engine.entries[entry_id].promotable = True
            engine.touched(entry_id, "update")
        if plan.promote:
            engine.promote_many([engine.entries[i] for i in plan.promote], now, by)
    if index is not None and plan.settlement is not None:
        index.settle(plan.settlement)  # applied whole: the next plan starts from here
    log.info(
        "gc.finished",
        namespace=engine.paths.namespace,
        expire_only=expire_only,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
        **report.as_dict(summary=True),
    )
    return report


def restore_entries(engine: Engine, entries: list[tuple[str, Entry]], now: datetime) -> int:
    """Exported entries back as they were (no dedup, no TTL recomputation); ids already
    present are skipped."""
    restored = 0
    for layer, entry in entries:
        if engine.find(entry.id) is not None:
            continue
        if layer == "l2":
            engine.l2_entries[entry.id] = entry
        else:
            engine.insert(entry)
        engine.record(now, "import", entry.id, engine.actor, layer=layer)
        engine.touched(entry.id, "add")
        restored += 1
    engine.save()
    return restored
