"""TTL table, access extension, the 90-day cap, and monotonicity (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from mnemod.config import load_config
from mnemod.domain.model import Entry
from mnemod.domain.retention import lifetime, retention_score

TTL = load_config(None, environ={}).ttl
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_ttl_table() -> None:
    days = {
        (t, i): lifetime(TTL, t, i, 0).total_seconds() / 86400
        for t in TTL.types
        for i in (1, 2, 3, 4, 5)
    }
    assert days[("context", 3)] == 14
    assert days[("context", 1)] == 7
    assert days[("context", 2)] == 10.5
    assert days[("context", 4)] == 21
    assert days[("context", 5)] == 28
    assert days[("progress", 3)] == 7
    assert days[("preference", 5)] == 60
    assert days[("insight", 3)] == 21


def test_access_extends_by_seven_days_up_to_ninety() -> None:
    assert lifetime(TTL, "context", 3, 1) == timedelta(days=21)
    assert lifetime(TTL, "context", 3, 10) == timedelta(days=84)
    assert lifetime(TTL, "context", 3, 11) == timedelta(days=90)
    assert lifetime(TTL, "context", 3, 1000) == timedelta(days=90)


def test_a_configured_ttl_longer_than_the_cap_is_kept() -> None:
    long = load_config({"ttl": {"context": "3650d"}}, environ={}).ttl
    assert lifetime(long, "context", 3, 0) == timedelta(days=3650)
    assert lifetime(long, "context", 3, 5) == timedelta(days=3650)


@given(
    type_=st.sampled_from(sorted(TTL.types)),
    importance=st.integers(1, 4),
    accesses=st.integers(0, 50),
)
def test_lifetime_is_monotone_in_importance_and_accesses(
    type_: str, importance: int, accesses: int
) -> None:
    base = lifetime(TTL, type_, importance, accesses)
    assert lifetime(TTL, type_, importance + 1, accesses) >= base
    assert lifetime(TTL, type_, importance, accesses + 1) >= base


def _entry(importance: int, accesses: int, last: datetime) -> Entry:
    return Entry(
        "x", "context", "c", T0, T0, last, None, importance=importance, access_count=accesses
    )


@given(importance=st.integers(1, 4), accesses=st.integers(0, 50), days=st.integers(0, 200))
def test_retention_score_rises_with_importance_and_accesses(
    importance: int, accesses: int, days: int
) -> None:
    now = T0 + timedelta(days=days)
    score = retention_score(TTL, _entry(importance, accesses, T0), now)
    assert retention_score(TTL, _entry(importance + 1, accesses, T0), now) >= score
    assert retention_score(TTL, _entry(importance, accesses + 1, T0), now) >= score
    assert retention_score(TTL, _entry(importance, accesses, T0), now + timedelta(days=1)) <= score
