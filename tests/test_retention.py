"""TTL table, access extension, the 90-day cap, and monotonicity (hypothesis)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from mnemod.config import load_config
from mnemod.domain.model import Entry
from mnemod.domain.retention import lifetime, retention_score, retention_scores

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


def test_the_score_is_the_documented_formula() -> None:
    now = T0 + timedelta(days=10)
    stability = TTL.types["context"].total_seconds() / 86400 * 1.5 * (1 + 0.5 * math.log1p(3))
    expected = 4 * math.exp(-10 / stability) * (1 + 0.1 * 3)
    assert retention_score(TTL, _entry(4, 3, T0), now) == expected


@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(TTL.types)),
            st.integers(1, 5),
            st.integers(0, 300),
            st.integers(-5 * 86400, 400 * 86400),  # accessed after `now` too: elapsed 0
        ),
        max_size=30,
    )
)
def test_scores_of_a_list_are_each_entry_s_score(kinds: list[tuple[str, int, int, int]]) -> None:
    now = T0 + timedelta(days=100)
    entries = [
        Entry(
            f"e{n}",
            type_,
            "c",
            T0,
            T0,
            now - timedelta(seconds=ago),
            None,
            importance=importance,
            access_count=accesses,
        )
        for n, (type_, importance, accesses, ago) in enumerate(kinds)
    ]
    one_by_one = [retention_score(TTL, entry, now) for entry in entries]
    assert retention_scores(TTL, entries, now) == one_by_one
