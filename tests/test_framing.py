"""The injected text's token count is the sum of its lines' counts: resolve relies on it
to count the whole text exactly without tokenizing it again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain.candidates import Candidate
from mnemod.domain.framing import (
    HEADING,
    FrameCosts,
    Tally,
    date_line,
    item_line,
    note_line,
    render,
    total_tokens,
)
from mnemod.tokens import token_counter

COUNTER = token_counter("cl100k_base")
LINES = st.one_of(
    st.text(min_size=1, max_size=120).map(item_line),
    st.builds(lambda d, year: date_line(d.isoformat(), year), st.dates(), st.booleans()),
    st.just(HEADING),
    st.integers(1, 10_000).map(note_line),
)
T0 = datetime(2023, 12, 20, 9, 0, tzinfo=UTC)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, min_size=1, max_size=12))
def test_token_count_is_additive_over_lines(lines: list[str]) -> None:
    whole = COUNTER.count("\n".join(lines))
    parts = sum(COUNTER.count(line + "\n") for line in lines[:-1]) + COUNTER.count(lines[-1])
    assert whole == parts


def item(n: int, hours: int, layer: str = "l3") -> Candidate:
    at = T0 + timedelta(hours=hours)
    return Candidate(
        id=f"m{n}",
        layer=layer,  # type: ignore[arg-type]
        type="context",
        content=f"memory number {n}",
        created_at=at,
        last_accessed_at=at,
    )


def test_the_memories_of_one_moment_keep_the_order_they_were_added_in() -> None:
    # a session's turns share its time; taken in rank order, they still read as said
    said = [replace(item(n, 0), seq=n) for n in range(3)]
    lines = render([said[2], said[0], said[1]], 0).splitlines()
    assert lines[2:] == ["- memory number 0", "- memory number 1", "- memory number 2"]


def test_a_day_shows_its_year_where_the_year_changes() -> None:
    items = [item(1, 0), item(2, 1), item(3, 24), item(4, 24 * 13), item(5, 24 * 14)]
    assert render(items, 0).splitlines()[1:] == [
        "[20 Dec 2023]",
        "- memory number 1",
        "- memory number 2",
        "[21 Dec]",
        "- memory number 3",
        "[2 Jan 2024]",
        "- memory number 4",
        "[3 Jan]",
        "- memory number 5",
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 24 * 800), st.sampled_from(["l1", "l3", "l3", "l3"]), st.integers(0, 2)
        ),
        min_size=1,
        max_size=15,
    ),
    st.integers(0, 3),
)
def test_packing_tally_and_total_match_the_rendered_text(
    picks: list[tuple[int, str, int]], dropped: int
) -> None:
    # taken in any order (of time, and of place within a moment), each day's header costed
    # as it ends up (a day before its year's first takes the year from it): the tally, the
    # total and the text agree exactly
    costs = FrameCosts(COUNTER)
    tally = Tally(costs, budget=1_000_000, reserve=0)
    items = [replace(item(n, hours, layer), seq=seq) for n, (hours, layer, seq) in enumerate(picks)]
    for candidate in items:
        tally.take(candidate)
    text = render(items, dropped)
    assert total_tokens(costs, items, dropped) == COUNTER.count(text)
    if dropped:
        assert tally.used + costs.note(dropped) == COUNTER.count(text)
    else:
        assert tally.used == COUNTER.count(text + "\n")
