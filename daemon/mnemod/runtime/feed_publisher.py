"""The leader's side of followers: each record into the namespace before it is appended to
the log, each checkpoint published once written, the feed trimmed.

Publishing first means a daemon's log is never ahead of the namespace by a record another
daemon could have missed: a leader killed between the two has its record in the feed and
takes it from there when it comes back; one killed before has published nothing, and its
events, never acknowledged, are applied by the next leader. What Redis does not take (an
outage) stays with the commit and is sent again; a publish this daemon may no longer make
(FencedOut: the lease or the history moved on) stops it leading.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis
import structlog

from mnemod.files.change_log import ChangeLog, line_crc
from mnemod.redisio.change_feed import ChangeFeed, FencedOut, Position
from mnemod.runtime.catch_up import Standing, catch_up
from mnemod.store.engine import Engine
from mnemod.store.replica import folder_id

log = structlog.get_logger("mnemod.feed")
TAIL_CHUNK = 500  # records per publish of a new leader's tail


class FeedPublisher:
    def __init__(self, feed: ChangeFeed, engine: Engine, max_len: int) -> None:
        self.feed = feed
        self.engine = engine
        self.log: ChangeLog = engine.commits.log
        self.max_len = max_len
        self.position = Position(0, 0)  # the namespace's, as this leader made it
        self.checkpoint_seq = -1  # the last checkpoint published
        self._deferred: tuple[int, bytes | None, bytes] | None = None  # (seq, line, index)
        self._publishing: threading.Thread | None = None

    def take_over(self, defer: bool = False) -> None:
        """Under a freshly taken lease, before anything is committed or the hot layer is
        touched: catch up to the committed position (Diverged if this copy is not on the
        namespace's history), publish the records this copy holds beyond it (a commit the
        CLI made while no daemon ran, a stop without Redis), a checkpoint when none a
        follower could start from is published, then publish every commit. `defer`: the
        checkpoint is only read now and published by `publish_deferred`."""
        standing = catch_up(self.engine, self.feed)
        last = Position(self.log.last_seq, self.log.last_crc or 0)
        committed = self.feed.committed()
        if standing is Standing.UNPUBLISHED or committed is None:
            self.feed.start(last)
            self.position = last
        elif standing is Standing.AHEAD:
            self.position, count = committed, 0
            tail: list[bytes] = []
            for _, line in self.log.lines_after(committed.seq):
                tail.append(line)
                if len(tail) == TAIL_CHUNK:  # a bounded script, however long the tail
                    self.position, count = self.feed.publish(self.position, tail), count + len(tail)
                    tail = []
            self.position = self.feed.publish(self.position, tail)
            log.info("feed.tail_published", records=count + len(tail), to_seq=self.position.seq)
        else:
            self.position = committed
        self.engine.commits.publish = self
        self.feed.mark_folder(folder_id(self.engine.paths))
        published = self.feed.checkpoint_position()
        self.checkpoint_seq = published.seq if published is not None else -1
        if not self._checkpoint_usable():
            self.republish(defer)

    def republish(self, defer: bool = False) -> None:
        """Write a checkpoint of what is committed now and publish it (at a takeover with
        none usable published, after Redis lost its data); `defer`: see `take_over`."""
        # A commit that waited for Redis is published first. index.json is written again
        # only when it is not the checkpoint of the log's last record already (most starts
        # on a Redis without the namespace: rewriting it took 0.5 s at 100,000 entries).
        engine = self.engine
        engine.checkpoint(force=engine.index_recovered or not engine.paths.index.exists())
        engine.index_recovered = False
        if self.feed.committed() is None:
            self.feed.start(self.position)  # Redis lost it: this leader's files are the truth
        seq = self.engine.commits.checkpoint_seq
        written = self._written(seq, self._line_of(seq))  # read now: a later one replaces it
        if written is not None and defer:
            self._deferred = written
        elif written is not None:
            self._publish(*written)

    def publish_deferred(self) -> None:
        """Publish the checkpoint `take_over(defer=True)` read (compressing and sending a
        68 MB index took 0.4 s of a daemon's start-up at 100,000 entries): once the daemon
        runs, on a thread of its own, while requests are answered. A Redis error is logged:
        the next checkpoint is published instead."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return

        def run() -> None:
            try:
                self._publish(*deferred)
            except redis.RedisError as exc:
                log.warning("feed.checkpoint_not_published", seq=deferred[0], error=str(exc)[:200])

        self._publishing = threading.Thread(target=run, name="mnemod-publish", daemon=True)
        self._publishing.start()

    def close(self) -> None:
        """Wait for a deferred checkpoint being published."""
        if self._publishing is not None:
            self._publishing.join()
            self._publishing = None

    def __call__(self, lines: list[bytes]) -> None:
        """Commits' hook: `lines` are the next records after the log's last; those this
        leader already published (a publish whose append then failed) are not sent again."""
        todo = lines[max(self.position.seq - self.log.last_seq, 0) :]
        try:
            self.position = self.feed.publish(self.position, todo)
        except FencedOut:
            # A publish whose reply a dropped connection took, retried with a record made
            # since: the namespace is at one of ours. Go on from there.
            committed = self.feed.committed()
            ours = [
                Position(self.position.seq + n, line_crc(line)) for n, line in enumerate(todo, 1)
            ]
            if committed is None or committed not in ours[:-1]:
                raise
            self.position = committed
            self(lines)

    def _checkpoint_usable(self) -> bool:
        """A follower can start from the published checkpoint: the feed holds what
        follows it."""
        if self.checkpoint_seq < 0 or self.checkpoint_seq > self.position.seq:
            return False
        if self.checkpoint_seq == self.position.seq:
            return True
        return self.feed.holds(self.checkpoint_seq + 1)

    def wrap(self, job: Callable[[], int]) -> Callable[[], int]:
        """A checkpoint job (store.commits) that publishes the checkpoint once written, on
        the same thread, then trims the feed. A Redis error there is logged: the next
        checkpoint is published instead."""

        # the record the checkpoint ends at: the log's last as it is prepared
        expected, line = self.log.last_seq, self.log.last_line

        def run() -> int:
            seq = job()
            try:
                self.publish_checkpoint(seq, line if seq == expected else None)
                self.feed.trim(self.max_len)
            except redis.RedisError as exc:
                log.warning("feed.checkpoint_not_published", seq=seq, error=str(exc)[:200])
            return seq

        return run

    def _line_of(self, seq: int) -> bytes | None:
        if seq == self.log.last_seq:
            return self.log.last_line
        for record, found in self.log.lines_after(seq - 1):
            return found if record["seq"] == seq else None
        return None

    def publish_checkpoint(self, seq: int, line: bytes | None) -> None:
        """Publish index.json as written for `seq`, with that record's line."""
        written = self._written(seq, line)
        if written is not None:
            self._publish(*written)

    def _written(self, seq: int, line: bytes | None) -> tuple[int, bytes | None, bytes] | None:
        """(seq, line, index.json's bytes) of the checkpoint written for `seq`; None, logged,
        without the record's line (a follower could not tell its copy's history)."""
        if seq > 0 and line is None:
            log.warning("feed.checkpoint_not_published", seq=seq, error="its record is gone")
            return None
        return seq, line, self.engine.paths.index.read_bytes()

    def _publish(self, seq: int, line: bytes | None, index: bytes) -> None:
        if self.feed.publish_checkpoint(seq, line, index):
            self.checkpoint_seq = max(self.checkpoint_seq, seq)

    def trim(self) -> int:
        return self.feed.trim(self.max_len)
