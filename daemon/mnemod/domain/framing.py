"""The injected text: a short heading, one line per memory, dates as group headers, a note.

    Memory:
    - Always-on fact from L1
    [8 May 2023]
    - Caroline: I went to a LGBTQ support group yesterday.
    - Melanie: That's great!
    [25 May]
    - Melanie: We ran a charity race last Saturday.
    (12 more matching memories left out)

Permanent items (L1, L2) come first and undated; L3 items follow oldest first (those of one
moment, as the turns of a session that share its time, in the order they were added, so a
reply follows what it answers whatever their ranks), under one line per day (UTC),
`[8 May 2023]`, the year left out while it is the previous line's (`[25 May]`): a date
costs a few tokens once per day rather than on every line, and lets a model answer "when"
questions. A header with its year costs 7 tokens, one without 4 (an ISO `[2023-05-08]`
costs 8): on LoCoMo a resolve of 1,000 tokens holds some seven days, so the shorter headers
leave room for about one more memory. Every piece is counted with the real tokenizer;
`FrameCosts` caches the counts so packing can add up marginal costs, and the resolver
checks the assembled text once more at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING

from mnemod.tokens import TokenCounter

if TYPE_CHECKING:
    from mnemod.domain.candidates import Candidate

HEADING = "Memory:"


def item_line(content: str) -> str:
    """One memory on one line: whitespace (newlines too) collapsed, so content cannot add lines."""
    return "- " + " ".join(content.split())


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@lru_cache(maxsize=65536)  # packing asks for the day of every candidate; strftime is slow
def day_of(moment: datetime) -> str:
    """The day (UTC) as `YYYY-MM-DD`: the key days are grouped and sorted by."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def date_line(day: str, year: bool = True) -> str:
    """The header of a day (`YYYY-MM-DD`): `[8 May 2023]`, or `[8 May]` without the year."""
    month = _MONTHS[int(day[5:7]) - 1]
    if year:
        return f"[{int(day[8:10])} {month} {day[:4]}]"
    return f"[{int(day[8:10])} {month}]"


def note_line(dropped: int) -> str:
    noun = "memory" if dropped == 1 else "memories"
    return f"({dropped} more matching {noun} left out)"


def is_dated(candidate: Candidate) -> bool:
    return candidate.layer == "l3"


# where a dated line goes: by time, then by its place among those of the same moment
time_order: Callable[[Candidate], tuple[datetime, int]] = attrgetter("created_at", "seq")


def render(items: Sequence[Candidate], dropped: int) -> str:
    """The text for `items` (any order) and the left-out note; empty when there is nothing."""
    if not items and not dropped:
        return ""
    lines = [HEADING]
    lines.extend(item_line(c.content) for c in items if not is_dated(c))
    dated = sorted((c for c in items if is_dated(c)), key=time_order)
    current = ""
    for candidate in dated:
        day = day_of(candidate.created_at)
        if day != current:
            lines.append(date_line(day, day[:4] != current[:4]))
            current = day
        lines.append(item_line(candidate.content))
    if dropped:
        lines.append(note_line(dropped))
    return "\n".join(lines)


class FrameCosts:
    """Token costs of the pieces of the text, each counted with its newline and cached."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.heading = counter.count(HEADING + "\n")
        self._lines: dict[str, tuple[str, int]] = {}
        self._days: dict[tuple[str, bool], int] = {}
        self._notes: dict[int, int] = {}

    def line(self, candidate: Candidate) -> int:
        """Cost of the candidate's line; recounted only when its content changed."""
        cached = self._lines.get(candidate.id)
        if cached is not None and cached[0] == candidate.content:
            return cached[1]
        cost = self.counter.count(item_line(candidate.content) + "\n")
        self._lines[candidate.id] = (candidate.content, cost)
        return cost

    def forget(self, candidate_id: str) -> None:
        self._lines.pop(candidate_id, None)

    def day(self, day: str, year: bool = True) -> int:
        cost = self._days.get((day, year))
        if cost is None:
            cost = self._days[day, year] = self.counter.count(date_line(day, year) + "\n")
        return cost

    def days(self, days: Iterable[str]) -> int:
        """The headers of these days, each year's first with its year (see `render`)."""
        used = 0
        current = ""
        for day in sorted(days):
            used += self.day(day, day[:4] != current[:4])
            current = day
        return used

    def note(self, dropped: int) -> int:
        if not dropped:
            return 0
        cost = self._notes.get(dropped)
        if cost is None:
            cost = self._notes[dropped] = self.counter.count(note_line(dropped))
        return cost


def total_tokens(costs: FrameCosts, items: Sequence[Candidate], dropped: int) -> int:
    """Exact token count of `render(items, dropped)` from the cached piece costs.

    Exact because the text is lines joined by single newlines and no line starts with
    whitespace: cl100k's pre-tokenizer never lets a piece cross a line break, so the count
    of the whole is the sum over lines (each with its newline, the last without).
    tests/test_framing.py checks that against the real tokenizer.
    """
    if not items and not dropped:
        return 0
    used = costs.heading + sum(costs.line(c) for c in items)
    dated = [c for c in items if is_dated(c)]
    used += costs.days({day_of(c.created_at) for c in dated})
    if dropped:
        return used + costs.note(dropped)
    # no note: the last line has no newline after it
    if dated:
        # render's stable sort puts the last of equal places last; max keeps the first
        last = max(reversed(dated), key=time_order)
    elif items:
        last = [c for c in items if not is_dated(c)][-1]
    else:
        return used - costs.heading + costs.counter.count(HEADING)
    return used - costs.line(last) + costs.counter.count(item_line(last.content))


class Tally:
    """Running token total of a text being packed: the heading once, each day header once."""

    def __init__(self, costs: FrameCosts, budget: int, reserve: int) -> None:
        self.costs = costs
        self.budget = budget
        self.reserve = reserve
        self.used = 0
        self._firsts: dict[str, str] = {}  # by year, its first day taken
        self._days: set[str] = set()

    def marginal(self, candidate: Candidate) -> int:
        """What adding `candidate` would cost now (its line, plus heading/day when new; a
        day before its year's first takes the year from it)."""
        cost = self.costs.line(candidate)
        if self.used == 0:
            cost += self.costs.heading
        if is_dated(candidate):
            day = day_of(candidate.created_at)
            if day not in self._days:
                cost += self._header(day)
        return cost

    def _header(self, day: str) -> int:
        """What a new day's header adds to the headers taken."""
        costs = self.costs
        first = self._firsts.get(day[:4])
        if first is None:
            return costs.day(day)
        if first < day:
            return costs.day(day, False)
        return costs.day(day) + costs.day(first, False) - costs.day(first)

    def fits(self, candidate: Candidate) -> bool:
        if self.used + self.costs.line(candidate) + self.reserve > self.budget:
            return False  # the line alone does not fit (the marginal cost is never less)
        return self.used + self.marginal(candidate) + self.reserve <= self.budget

    def take(self, candidate: Candidate, cost: int | None = None) -> int:
        """Add `candidate`; `cost` is its `marginal` now, when the caller has it."""
        if cost is None:
            cost = self.marginal(candidate)
        self.used += cost
        if is_dated(candidate):
            day = day_of(candidate.created_at)
            self._days.add(day)
            first = self._firsts.get(day[:4])
            if first is None or day < first:
                self._firsts[day[:4]] = day
        return cost
