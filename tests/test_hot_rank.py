"""The hot layer's choice of its L3 items at a rebuild: the highest retention scores, ties by
id, exactly as a sort of every entry gives them."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain.model import Entry
from mnemod.runtime.hot_sync import _highest

MOMENT = datetime(2026, 1, 2, tzinfo=UTC)


def entry(number: int) -> Entry:
    return Entry(f"e{number:04d}", "context", "text", MOMENT, MOMENT, MOMENT, None)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]), max_size=40),  # many ties
    st.integers(min_value=0, max_value=45),
)
def test_the_highest_scores_are_those_a_whole_sort_gives(scores: list[float], count: int) -> None:
    scored = [(score, entry(n)) for n, score in reversed(list(enumerate(scores)))]
    expected = sorted(scored, key=lambda pair: (-pair[0], pair[1].id))[:count]
    assert _highest(list(scored), count) == expected
