"""Long change-log records and checkpoints go through Redis in pieces, against the session's
real server: no feed entry or checkpoint field is longer than a piece, a follower still gets
every record byte for byte (and a checkpoint whole), a record is read whole or not at all,
and a daemon that lost the lease stages nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemod.domain.validation import NewEntry
from mnemod.redisio.change_feed import ChangeFeed, FencedOut
from mnemod.redisio.feed_pieces import Stager, split
from mnemod.redisio.lease import Lease
from mnemod.runtime.catch_up import Standing, catch_up
from mnemod.runtime.feed_publisher import FeedPublisher
from mnemod.store.engine import Engine
from mnemod.store.replica import start_from_checkpoint
from test_change_feed import KEYS, as_dicts, engine_at

PIECE = 300
RedisClient = Any


@contextmanager
def leading_in_pieces(folder: Path, client: RedisClient) -> Iterator[Engine]:
    assert Lease(client, KEYS, "leader", 30).acquire()
    with engine_at(folder) as engine:
        feed = ChangeFeed(client, KEYS, "leader", piece_bytes=PIECE)
        FeedPublisher(feed, engine, max_len=100).take_over()
        yield engine


def add_many(engine: Engine, count: int, start: int = 0) -> None:
    """`count` memories in one commit (one long record), with characters of 2-4 bytes."""
    for n in range(start, start + count):
        content = f"memory {n}: the café near 時區 {n} opens at nine 🎉 topic{n}"
        engine.add(NewEntry(content=content, type="insight", id=f"m{n}"))
    engine.save()


def feed_lines(client: RedisClient) -> list[bytes]:
    return [f["line"].encode() for _, f in client.xrange(KEYS.feed)]


@given(st.text(max_size=200), st.integers(min_value=4, max_value=40))
def test_pieces_are_whole_characters_and_join_to_the_value(text: str, size: int) -> None:
    data = text.encode()
    pieces = split(data, size)
    assert b"".join(pieces) == data
    assert all(len(p) <= size for p in pieces)
    assert all(p.decode() for p in pieces if p)  # each decodes alone


def test_a_long_record_goes_in_pieces_and_a_follower_applies_it_byte_for_byte(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading_in_pieces(tmp_path / "a", redis_client) as leader:
        add_many(leader, 12)
        leader.add(NewEntry(content="a short one", type="insight", id="short"))
        leader.save()
        add_many(leader, 5, start=20)
        assert all(len(line) <= PIECE for line in feed_lines(redis_client))
        assert redis_client.xlen(KEYS.feed) > 3  # the long records are several entries
        assert not redis_client.exists(KEYS.feed_staged)
        logged = [line for _, line in leader.commits.log.lines_after(0)]
        feed = ChangeFeed(redis_client, KEYS, "follower")
        for count in (1, 2, 3):  # counts that end inside a record's pieces: it is whole
            read = [r.line for r in feed.read_from(0, count)]
            assert read and read == logged[: len(read)]
        for seq in range(1, len(logged) + 1):
            assert feed.read_from(seq, 1)[0].line == logged[seq - 1]
        assert [r.line for r in feed.read_from(0, 500)] == logged
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.CURRENT
            assert copy.commits.log.last_crc == leader.commits.log.last_crc
    assert as_dicts(tmp_path / "b") == as_dicts(tmp_path / "a")


def test_a_record_missing_a_piece_is_not_read(tmp_path: Path, redis_client: RedisClient) -> None:
    with leading_in_pieces(tmp_path / "a", redis_client) as leader:
        leader.add(NewEntry(content="a short one", type="insight", id="short"))
        leader.save()
        add_many(leader, 12)
        last = leader.commits.log.last_seq
        redis_client.xdel(KEYS.feed, f"{last}-2")  # as a trim under the reader would
        feed = ChangeFeed(redis_client, KEYS, "follower")
        assert [r.seq for r in feed.read_from(0, 500)] == [last - 1]
        assert feed.holds(last) and not feed.holds(last + 1)


def test_a_long_checkpoint_goes_in_pieces_and_a_follower_starts_from_it(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading_in_pieces(tmp_path / "a", redis_client) as leader:
        add_many(leader, 30)
        leader.checkpoint()
        publisher = leader.commits.publish
        assert isinstance(publisher, FeedPublisher)
        seq = leader.commits.checkpoint_seq
        publisher.publish_checkpoint(seq, leader.commits.log.last_line)
        fields = redis_client.hgetall(KEYS.checkpoint)
        assert {"line:1", "index:1"} <= set(fields)
        assert all(len(value.encode()) <= PIECE for value in fields.values())
        assert not redis_client.exists(KEYS.checkpoint_staged)
        checkpoint = ChangeFeed(redis_client, KEYS, "follower").checkpoint()
        assert checkpoint is not None and checkpoint.seq == seq
        assert checkpoint.line == leader.commits.log.last_line
        assert checkpoint.index == leader.paths.index.read_bytes()
        add(leader, "after the checkpoint")
        publisher.publish_checkpoint(seq, leader.commits.log.last_line)  # older: refused
        with engine_at(tmp_path / "b", replica=True) as copy:
            paths = copy.paths
            copy.abandon()
        start_from_checkpoint(paths, checkpoint.seq, checkpoint.line, checkpoint.index)
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, ChangeFeed(redis_client, KEYS, "f")) is Standing.CURRENT
    assert as_dicts(tmp_path / "b") == as_dicts(tmp_path / "a")


def add(engine: Engine, content: str) -> None:
    engine.add(NewEntry(content=content, type="insight", id="late"))
    engine.save()


def test_a_daemon_without_the_lease_stages_nothing(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading_in_pieces(tmp_path / "a", redis_client) as leader:
        add_many(leader, 3)
        entries = redis_client.xlen(KEYS.feed)
        redis_client.set(KEYS.lease, "someone-else", px=30_000)
        for n in range(12):
            leader.add(NewEntry(content=f"after the lease went {n} 🎉", type="insight", id=f"x{n}"))
        with pytest.raises(FencedOut):
            leader.save()
        assert redis_client.xlen(KEYS.feed) == entries
        assert not redis_client.exists(KEYS.feed_staged)
        redis_client.set(KEYS.lease, "leader", px=30_000)  # for the close


def test_pieces_staged_by_a_publish_that_died_are_replaced(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading_in_pieces(tmp_path / "a", redis_client) as leader:
        add_many(leader, 3)
        # a publish that died mid-way left pieces of another record, under another tag
        redis_client.rpush(KEYS.feed_staged, "leader 99 1 3", "stale", "pieces")
        add_many(leader, 12, start=10)
        assert not redis_client.exists(KEYS.feed_staged)
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, ChangeFeed(redis_client, KEYS, "f")) is Standing.CURRENT
    assert as_dicts(tmp_path / "b") == as_dicts(tmp_path / "a")


def test_a_staging_replaced_meanwhile_is_not_added_to(redis_client: RedisClient) -> None:
    redis_client.set(KEYS.lease, "leader", px=30_000)
    stager = Stager(redis_client, KEYS.lease, "leader", call_bytes=4)
    assert stager.stage(KEYS.checkpoint_staged, "first", [b"abcd", b"efgh"]) == "ok"
    assert redis_client.lrange(KEYS.checkpoint_staged, 0, -1) == ["first", "abcd", "efgh"]
    replaced = {"n": 0}
    real = stager._stage

    def another_staging_between_calls(**kwargs: Any) -> Any:
        replaced["n"] += 1
        if replaced["n"] == 2:  # a second publish of a checkpoint starts its own
            redis_client.delete(KEYS.checkpoint_staged)
            redis_client.rpush(KEYS.checkpoint_staged, "second", "wxyz")
        return real(**kwargs)

    stager._stage = another_staging_between_calls  # type: ignore[assignment]
    assert stager.stage(KEYS.checkpoint_staged, "first", [b"abcd", b"efgh"]) == "lost"
    assert redis_client.lrange(KEYS.checkpoint_staged, 0, -1) == ["second", "wxyz"]
    redis_client.set(KEYS.lease, "someone-else", px=30_000)
    assert stager.stage(KEYS.checkpoint_staged, "third", [b"abcd"]) == "lease"
    assert redis_client.lrange(KEYS.checkpoint_staged, 0, -1) == ["second", "wxyz"]
