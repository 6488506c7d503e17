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

# KEYS: lease, staged. ARGV: owner, ms to keep them, tag, '1' for a new staging (the list
# started again) or '0' for more pieces of the one the list holds, then the pieces.
_STAGE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return -1 end
if ARGV[4] == '1' then
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[3])
elseif redis.call('LINDEX', KEYS[2], 0) ~= ARGV[3] then
  return -2
end
for i = 5, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('LLEN', KEYS[2])
"""


class Stager:
    """Stages the leading pieces of long values for this daemon (the lease's holder)."""

    def __init__(
        self, client: redis.Redis, lease_key: str, owner: str, call_bytes: int = STAGE_CALL_BYTES
    ) -> None:
        """`call_bytes`: the pieces one script call stages, at most."""
        self.lease_key = lease_key
        self.owner = owner
        self.call_bytes = call_bytes
        self._stage = client.register_script(_STAGE)

    def stage(self, staged_key: str, tag: str, pieces: list[bytes]) -> str:
        """Put `pieces` in `staged_key` after `tag` (what it held before goes): "ok";
        "lease" when another daemon holds the lease; "lost" when another staging replaced
        this one meanwhile (two checkpoints published at once: a start-up's, and one
        written while it was sent)."""
        keys = [self.lease_key, staged_key]
        for n, batch in enumerate(_batches(pieces, self.call_bytes)):
            args: list[Any] = [self.owner, STAGE_MS, tag, "0" if n else "1", *batch]
            done = int(cast(int, self._stage(keys=keys, args=args)))
            if done < 0:
                return "lease" if done == -1 else "lost"
        return "ok"


def _batches(pieces: list[bytes], most: int) -> Iterable[list[bytes]]:
    """`pieces` in runs of `most` bytes at most (one run, empty, for none)."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        if batch and size + len(piece) > most:
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
