"""Durations written the way people write them: `14d`, `12h`, `10m`, `30s`, `500ms`, `1w`."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}


def parse_duration(text: str) -> timedelta:
    """`1d12h` → 36 h. Raises ValueError with the offending text."""
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned:
        raise ValueError("empty duration")
    total = timedelta()
    position = 0
    for match in _PART.finditer(cleaned):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(cleaned):
        raise ValueError(f"not a duration: {text!r} (use e.g. 14d, 12h, 10m, 30s)")
    return total


def format_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if delta.microseconds and seconds < 1:
        return f"{int(delta.total_seconds() * 1000)}ms"
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
