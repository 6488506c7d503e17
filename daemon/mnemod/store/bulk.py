"""Operations over many entries at once: `import` (the GC run: store.gc_run).

They change the engine only through its own primitives (drop, fold, touched, promote_many),
so the change log, the hot-layer change list and resolve's view stay in step as with any
single change.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from mnemod.domain.model import Entry

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


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
