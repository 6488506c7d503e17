"""TTL and retention score: pure functions of an entry, the config and `now`.

Lifetime = base TTL of the type × importance factor + one extension per access, where
extensions stop at `max_lifetime` (a configured base TTL longer than the cap is kept: the cap
bounds what accesses add, it never shortens what the operator asked for). Promoted entries
never expire. The retention score (Ebbinghaus) decides which L3 entries are hot in Redis.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from mnemod.config import TTLConfig
from mnemod.domain.model import Entry

IMPORTANCE_FACTOR: dict[int, float] = {1: 0.5, 2: 0.75, 3: 1.0, 4: 1.5, 5: 2.0}


def base_lifetime(ttl: TTLConfig, type_: str, importance: int) -> timedelta:
    return ttl.types[type_] * IMPORTANCE_FACTOR[importance]


def lifetime(ttl: TTLConfig, type_: str, importance: int, access_count: int) -> timedelta:
    base = base_lifetime(ttl, type_, importance)
    cap = max(ttl.max_lifetime, base)
    return min(base + ttl.access_extension * access_count, cap)


def expires_at(ttl: TTLConfig, entry: Entry) -> datetime:
    return entry.created_at + lifetime(ttl, entry.type, entry.importance, entry.access_count)


def is_expired(entry: Entry, now: datetime) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now


def retention_score(ttl: TTLConfig, entry: Entry, now: datetime) -> float:
    """importance × e^(−t/S) × (1 + 0.1 × accesses); S grows with the base TTL and accesses."""
    elapsed_days = max(0.0, (now - entry.last_accessed_at).total_seconds() / 86400)
    # in float days, not via base_lifetime: timedelta × float took most of the hot layer's
    # rebuild at 100,000 entries
    stability_days = ttl.types[entry.type].total_seconds() / 86400
    stability_days *= IMPORTANCE_FACTOR[entry.importance]
    stability_days *= 1 + 0.5 * math.log1p(entry.access_count)
    decay = math.exp(-elapsed_days / max(stability_days, 1e-6))
    return entry.importance * decay * (1 + 0.1 * entry.access_count)
