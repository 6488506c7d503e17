"""Time cues of a prompt: whether it asks "when", and the periods it names.

A "when" question ("when did …", "what date/year/month …", "how long ago …") is answered
by a memory that places its event in time ("yesterday", "last week", "in 2022", "on
Monday"), read against the date header the framing puts over each day; a memory that only
shares the question's topic words answers a different question. A prompt that names a period ("in
June", "on October 13, 2023", "in 2023") asks about what was said then, or soon after: the
memories created in that period are the likelier answers. Pure: `now` is passed in (a month
without a year is the last such month up to now).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

_WHEN = re.compile(
    r"\bwhen (?:did|does|do|is|was|were|will|has|have|had|are|can|could|should|would)\b"
    r"|\bwhat (?:date|day|year|month|time)\b|\bwhich (?:date|day|year|month)\b"
    r"|\bhow long ago\b|\bwhat (?:week|weekend)\b",
    re.IGNORECASE,
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
# words (before stemming, casefolded) that place an event in time
TIME_WORDS = frozenset(
    (
        "yesterday",
        "today",
        "tonight",
        "tomorrow",
        "ago",
        "last",
        "next",
        "week",
        "weeks",
        "weekend",
        "weekends",
        "month",
        "months",
        "year",
        "years",
        "morning",
        "evening",
        "recently",
        "since",
        *WEEKDAYS,
        *MONTHS,
    )
)
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")


def asks_when(prompt: str) -> bool:
    """A question about when: "when" asking (followed by did/is/was …), not a clause of
    time ("what did she do when she lost her job", "when I run the tests it fails")."""
    return _WHEN.search(prompt) is not None


def tells_when(content: str) -> bool:
    """Whether a memory's text places something in time (a time word or a year)."""
    if _YEAR.search(content):
        return True
    return any(word in TIME_WORDS for word in re.findall(r"[a-z]+", content.casefold()))


_MONTH = "|".join(MONTHS)
# "October 13, 2023", "13 October 2023", "1 February, 2023", "October 2023", "in June", "2023"
_DATE = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<m1>{_MONTH})"
    rf"|(?P<m2>{_MONTH})(?:\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?)?)"
    r"(?:,?\s+(?P<y1>(?:19|20)\d\d))?\b"
    r"|\b(?P<y2>(?:19|20)\d\d)-(?P<mm>\d\d)-(?P<dd>\d\d)\b"
    r"|\b(?P<y3>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


def date_spans(prompt: str, now: datetime) -> list[tuple[datetime, datetime]]:
    """The periods a prompt names, [start, end) in `now`'s time zone: a day, a month or a
    year. A month without a year is the last such month up to `now`. "May" is only taken with
    a day or a year (it is also a verb)."""
    out: list[tuple[datetime, datetime]] = []
    for found in _DATE.finditer(prompt):
        span = _span(found, now)
        if span is not None:
            out.append(span)
    return out


def _span(found: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    zone = now.tzinfo
    if found["y2"]:
        try:
            start = datetime(int(found["y2"]), int(found["mm"]), int(found["dd"]), tzinfo=zone)
        except ValueError:
            return None
        return start, start + timedelta(days=1)
    if found["y3"]:
        year = int(found["y3"])
        return datetime(year, 1, 1, tzinfo=zone), datetime(year + 1, 1, 1, tzinfo=zone)
    month_name = (found["m1"] or found["m2"]).casefold()
    day_text = found["d1"] or found["d2"]
    if month_name == "may" and not day_text and not found["y1"]:
        return None
    month = MONTHS.index(month_name) + 1
    last = now.year if month <= now.month else now.year - 1  # the last such month
    year = int(found["y1"]) if found["y1"] else last
    try:
        if day_text:
            start = datetime(year, month, int(day_text), tzinfo=zone)
            return start, start + timedelta(days=1)
        start = datetime(year, month, 1, tzinfo=zone)
    except ValueError:
        return None
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=zone)
    return start, end
