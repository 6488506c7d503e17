"""The injected text's token count is the sum of its lines' counts: resolve relies on it
to count the whole text exactly without tokenizing it again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain.framing import HEADING, date_line, item_line, note_line
from mnemod.tokens import token_counter

COUNTER = token_counter("cl100k_base")
LINES = st.one_of(
    st.text(min_size=1, max_size=120).map(item_line),
    st.dates().map(lambda d: date_line(d.isoformat())),
    st.just(HEADING),
    st.integers(1, 10_000).map(note_line),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, min_size=1, max_size=12))
def test_token_count_is_additive_over_lines(lines: list[str]) -> None:
    whole = COUNTER.count("\n".join(lines))
    parts = sum(COUNTER.count(line + "\n") for line in lines[:-1]) + COUNTER.count(lines[-1])
    assert whole == parts
