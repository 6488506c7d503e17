"""Bringing a daemon's copy of a namespace to the namespace's committed position.

Both a follower (all the time) and a daemon about to lead (under the lease, before it
touches the hot layer) run it: no daemon leads with files behind what the namespace
committed. The copy's last record is checked against the namespace's history (the feed's
record of that seq, or the published checkpoint's) by its CRC; the records after it are
applied from the feed. A copy that cannot be told to be on the namespace's history (its
last record differs, was trimmed from the feed, or it holds records the namespace does not
while another daemon leads) raises Diverged: it starts again from the published checkpoint.
"""

from __future__ import annotations

import enum

from mnemod.errors import MnemodError
from mnemod.files.change_log import line_crc
from mnemod.redisio.change_feed import ChangeFeed, Position
from mnemod.store.engine import Engine
from mnemod.store.replica import apply_records, decode_lines

BATCH_RECORDS = 500  # records read from the feed and applied at once


class Diverged(MnemodError):
    """This copy is not on the namespace's history (or cannot be told to be)."""


class Standing(enum.Enum):
    CURRENT = "current"  # at the committed position
    AHEAD = "ahead"  # the committed position, then records only this copy holds
    UNPUBLISHED = "unpublished"  # nothing committed in Redis yet (a new namespace, data lost)


def position(engine: Engine) -> Position | None:
    """This copy's last record (None: its log was pruned past it, it cannot be told)."""
    log = engine.commits.log
    crc = log.last_crc
    return None if crc is None else Position(log.last_seq, crc)


def catch_up(engine: Engine, feed: ChangeFeed, trusted: Position | None = None) -> Standing:
    """Apply the feed's records up to the committed position. `trusted`: a position this
    copy was already found on the namespace's history at (a follower's last step)."""
    log = engine.commits.log
    while True:
        committed = feed.committed()
        if committed is None:
            return Standing.UNPUBLISHED
        mine = position(engine)
        if mine is None:
            raise Diverged(f"record {log.last_seq} is not in the log: cannot be checked")
        if mine.seq >= committed.seq:
            return _standing(engine, mine, committed)
        records = feed.read_from(mine.seq, BATCH_RECORDS)
        if records and records[0].seq == mine.seq:
            if records[0].crc != mine.crc:
                raise Diverged(f"record {mine.seq} differs from the namespace's")
            records = records[1:]
        elif not _known(feed, mine, trusted):
            raise Diverged(f"record {mine.seq} is no longer in the feed")
        if not records or records[0].seq != mine.seq + 1:
            raise Diverged(f"the feed no longer holds record {mine.seq + 1}")
        apply_records(engine, decode_lines((r.seq, r.line) for r in records))
        trusted = position(engine)


def _standing(engine: Engine, mine: Position, committed: Position) -> Standing:
    if mine == committed:
        return Standing.CURRENT
    if mine.seq == committed.seq:
        raise Diverged(f"record {mine.seq} differs from the namespace's")
    # ahead: on the namespace's history if its record at the committed seq is the same
    if committed.seq == 0:
        return Standing.AHEAD
    for record, line in engine.commits.log.lines_after(committed.seq - 1):
        if record["seq"] == committed.seq and line_crc(line) == committed.crc:
            return Standing.AHEAD
        break
    raise Diverged(f"holds records after {committed.seq} that differ from the namespace's")


def _known(feed: ChangeFeed, mine: Position, trusted: Position | None) -> bool:
    """The copy's last record, no longer in the feed, is still known to be the
    namespace's: the start, the one a follower applied last, or the published checkpoint's."""
    if mine.seq == 0 or mine == trusted:
        return True
    checkpoint = feed.checkpoint_position()
    return checkpoint == mine
