"""Merging two entries that say the same thing (DESIGN §1 merge rules).

The older entry survives; the newest content wins; importance is the max; keywords, tags and
triggers are unions; access counts add up; `merged_from` records every folded id.
"""

from __future__ import annotations

from datetime import datetime

from mnemod.domain.model import Entry

_TIER_RANK = {"cold": 0, "warm": 1, "hot": 2}


def older_first(a: Entry, b: Entry) -> tuple[Entry, Entry]:
    return (a, b) if (a.created_at, a.id) <= (b.created_at, b.id) else (b, a)


def merge_into(survivor: Entry, folded: Entry, now: datetime) -> Entry:
    """Fold `folded` into `survivor` in place and return it. Pure of I/O."""
    newer = folded if folded.updated_at >= survivor.updated_at else survivor
    survivor.content = newer.content
    survivor.tokens = newer.tokens
    survivor.key = survivor.key or folded.key
    survivor.importance = max(survivor.importance, folded.importance)
    survivor.keywords = _union(survivor.keywords, folded.keywords)
    survivor.tags = _union(survivor.tags, folded.tags)
    survivor.triggers = _union(survivor.triggers, folded.triggers)
    if _TIER_RANK.get(folded.tier, 0) > _TIER_RANK.get(survivor.tier, 0):
        survivor.tier = folded.tier
    survivor.once = survivor.once or folded.once
    survivor.access_count += folded.access_count
    survivor.selected_count += folded.selected_count
    survivor.last_accessed_at = max(survivor.last_accessed_at, folded.last_accessed_at)
    survivor.promotable = survivor.promotable or folded.promotable
    survivor.merged_from = _union(survivor.merged_from, [folded.id, *folded.merged_from])
    survivor.updated_at = max(now, survivor.updated_at)
    return survivor


def _union(first: list[str], second: list[str]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))
