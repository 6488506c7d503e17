"""Long values of the change feed sent to Redis, and read back, in pieces.

A bulk import's change-log record, and the checkpoint that follows it, are tens of MB.
Sent in one command, Redis holds three copies of it for the while (the query buffer, the
script's argument, the value) and a client decodes all of it at once. A value longer than
PIECE_BYTES goes in pieces instead: each piece but the last staged in a list (`feed:staged`
or `checkpoint:staged`) by scripts that only the lease's holder passes, headed by a tag
naming what it belongs to; then one script, fenced as before, checks the tag and the count
and moves the pieces to where readers find them, so a reader never sees part of a value.
A piece is cut on a UTF-8 character boundary, so each decodes alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import redis

PIECE_BYTES = 4 << 20
STAGE_MS = 600_000  # staged pieces a leader that died mid-way left are gone after this
STAGE_CALL_BYTES = 8 << 20  # the pieces staged by one script call, at most

# KEYS: lease, staged. ARGV: owner, ms to keep them, tag ('': more pieces of the staging
# under way; else a new one, the list started again), then the pieces.
_STAGE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return -1 end
if ARGV[3] ~= '' then
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[3])
end
for i = 4, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('LLEN', KEYS[2])
"""


class Stager:
    """Stages the leading pieces of long values for this daemon (the lease's holder)."""

    def __init__(self, client: redis.Redis, lease_key: str, owner: str) -> None:
        self.lease_key = lease_key
        self.owner = owner
        self._stage = client.register_script(_STAGE)

    def stage(self, staged_key: str, tag: str, pieces: list[bytes]) -> bool:
        """Put `pieces` in `staged_key` after `tag` (what replaced it before goes); False
        when another daemon holds the lease."""
        keys = [self.lease_key, staged_key]
        for n, batch in enumerate(_batches(pieces)):
            args: list[Any] = [self.owner, STAGE_MS, "" if n else tag, *batch]
            if int(cast(int, self._stage(keys=keys, args=args))) < 0:
                return False
        return True


def _batches(pieces: list[bytes]) -> Iterable[list[bytes]]:
    """`pieces` in runs of STAGE_CALL_BYTES at most (one run, empty, for none)."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        if batch and size + len(piece) > STAGE_CALL_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(piece)
        size += len(piece)
    yield batch


def split(data: bytes, size: int = PIECE_BYTES) -> list[bytes]:
    """`data` in pieces of at most `size` bytes (one, b"" itself, for b""); no piece
    starts with a UTF-8 continuation byte, so each is whole characters."""
    if len(data) <= size:
        return [data]
    pieces = []
    start = 0
    view = memoryview(data)
    while start < len(data):
        end = min(start + size, len(data))
        while end < len(data) and end > start + 1 and (data[end] & 0xC0) == 0x80:
            end -= 1  # a character is not cut in two
        pieces.append(bytes(view[start:end]))
        start = end
    return pieces


def joined(pieces: Iterable[str | bytes]) -> bytes:
    """The value of its pieces as read back (str when the client decodes replies)."""
    return b"".join(p.encode() if isinstance(p, str) else p for p in pieces)
