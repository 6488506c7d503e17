"""Sortable unique ids (ULID layout: 48-bit milliseconds + 80 random bits, Crockford base32)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")


def new_id(now: datetime) -> str:
    value = (int(now.timestamp() * 1000) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def is_valid_id(candidate: str) -> bool:
    """Client-chosen ids are allowed: short, printable, safe inside a Redis key and a file."""
    return bool(ID_PATTERN.fullmatch(candidate))
