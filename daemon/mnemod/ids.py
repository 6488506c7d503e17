"""Sortable unique ids (ULID layout: 48-bit milliseconds + 80 random bits, Crockford base32)."""

from __future__ import annotations

import re
import secrets
import threading
from datetime import datetime

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")


_last = (0, 0)
_lock = threading.Lock()


def new_id(now: datetime) -> str:
    """Monotonic within a process: ids made in the same millisecond sort in creation order
    (the random part is incremented), so sorting by id keeps insertion order."""
    global _last
    ms = int(now.timestamp() * 1000)
    with _lock:
        last_ms, last_rand = _last
        rand = (
            last_rand + 1 if ms == last_ms and last_rand < (1 << 80) - 1 else secrets.randbits(79)
        )
        _last = (ms, rand)
    return _encode((ms << 80) | rand)


def next_id(previous: str) -> str:
    """The id right after `previous` in sort order (same millisecond, random part + 1)."""
    value = 0
    for char in previous:
        value = value * 32 + _ALPHABET.index(char)
    return _encode(value + 1)


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def is_valid_id(candidate: str) -> bool:
    """Client-chosen ids are allowed: short, printable, safe inside a Redis key and a file."""
    return bool(ID_PATTERN.fullmatch(candidate))
