"""Time, passed in: components take a `Clock`, pure functions take `now`.

A clock tells the time (`now`, for what is stored and shown) and measures it (`monotonic`,
seconds that never go back, for intervals: lease renewal, retries, debounce, commit and
checkpoint timing). `FixedClock` moves both only when told, so tests of timing advance it
instead of waiting or patching constants.

`MNEMOD_NOW=<ISO-8601>` pins the time for the CLI and the library (tests, replays).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from mnemod.errors import InvalidInputError


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


def utcnow() -> datetime:
    """Now in UTC, truncated to milliseconds so that stored times round-trip exactly."""
    return truncate(datetime.now(UTC))


def truncate(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


class SystemClock:
    def now(self) -> datetime:
        return utcnow()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass
class FixedClock:
    """A clock that only moves when told: for tests and `MNEMOD_NOW`."""

    moment: datetime = field(default_factory=utcnow)
    ticks: float = 0.0  # what `monotonic` says: seconds, moved by `advance` alone

    def now(self) -> datetime:
        return self.moment

    def monotonic(self) -> float:
        return self.ticks

    def advance(self, delta: timedelta | float) -> None:
        """Move both times on by `delta` (a timedelta, or seconds)."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        self.moment = self.moment + step
        self.ticks += step.total_seconds()


class PinnedClock(FixedClock):
    """`MNEMOD_NOW`: the time pinned, while intervals still pass (a daemon run at a pinned
    time still renews its lease and commits on time)."""

    def monotonic(self) -> float:
        return time.monotonic() + self.ticks


def parse_time(text: str, field_name: str = "time") -> datetime:
    """ISO-8601 to an aware UTC datetime; a naive time is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError) as exc:
        raise InvalidInputError(field_name, f"not an ISO-8601 time: {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    elif moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    # what this program wrote is whole milliseconds already (three times at each entry read)
    return moment if moment.microsecond % 1000 == 0 else truncate(moment)


@functools.lru_cache(maxsize=4096)
def format_time(moment: datetime) -> str:
    """ISO-8601 in UTC to the millisecond, `Z` for UTC. Cached: an add writes its one time
    in several places (the change log, the hot layer, history) at about 2 µs each. Equal
    times (aware ones compare as instants) give the same text."""
    if moment.tzinfo is not UTC:  # what this program makes is UTC already
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock_from_env(environ: dict[str, str] | None = None) -> Clock:
    env = os.environ if environ is None else environ
    pinned = env.get("MNEMOD_NOW", "").strip()
    if pinned:
        return PinnedClock(parse_time(pinned, "MNEMOD_NOW"))
    return SystemClock()
