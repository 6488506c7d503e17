"""TTL and retention score: pure functions of an entry, the config and `now`.

Lifetime = base TTL of the type × importance factor + one extension per access, where
extensions stop at `max_lifetime` (a configured base TTL longer than the cap is kept: the cap
bounds what accesses add, it never shortens what the operator asked for). Promoted entries
never expire. The retention score (Ebbinghaus) decides which L3 entries are hot in Redis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import repeat
from operator import attrgetter, itemgetter, mul, neg, sub, truediv

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
    stability_days, boost = _factors(ttl, entry.type, entry.importance, entry.access_count)
    elapsed_days = max(0.0, (now - entry.last_accessed_at).total_seconds() / 86400)
    return entry.importance * math.exp(-elapsed_days / stability_days) * boost


def retention_scores(ttl: TTLConfig, entries: Sequence[Entry], now: datetime) -> list[float]:
    """`retention_score` of each entry, the same floats, in C calls over the list: the
    stability and boost once per (type, importance, accesses) there is, then a pass of each
    step over all entries (one call per entry was most of scoring 100,000 at start-up)."""
    kinds = list(map(_KIND, entries))
    factors = {kind: _factors(ttl, *kind) for kind in set(kinds)}
    pairs = list(map(factors.__getitem__, kinds))
    stability, boost = map(itemgetter(0), pairs), map(itemgetter(1), pairs)
    seconds = map(timedelta.total_seconds, map(sub, repeat(now), map(_LAST_ACCESSED, entries)))
    elapsed_days = map(max, repeat(0.0), map(truediv, seconds, repeat(86400)))
    decay = map(math.exp, map(truediv, map(neg, elapsed_days), stability))
    return list(map(mul, map(mul, map(_IMPORTANCE, entries), decay), boost))


def _factors(ttl: TTLConfig, type_: str, importance: int, access_count: int) -> tuple[float, float]:
    """(S in days, floored above zero; the boost 1 + 0.1 × accesses) of a kind of entry."""
    # in float days, not via base_lifetime: timedelta × float took most of the hot layer's
    # rebuild at 100,000 entries
    stability_days = ttl.types[type_].total_seconds() / 86400
    stability_days *= IMPORTANCE_FACTOR[importance]
    stability_days *= 1 + 0.5 * math.log1p(access_count)
    return max(stability_days, 1e-6), 1 + 0.1 * access_count


_KIND = attrgetter("type", "importance", "access_count")
_LAST_ACCESSED = attrgetter("last_accessed_at")
_IMPORTANCE = attrgetter("importance")
