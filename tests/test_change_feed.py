"""The leader's change log shipped through Redis, against the session's real server: a
follower's copy applied through recovery's code, started from the published checkpoint,
refused when its history is not the namespace's; a deposed leader cannot publish; the feed
is trimmed past what followers applied, within the bound, never past the checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from mnemod.clock import SystemClock
from mnemod.config import load_config
from mnemod.domain.validation import NewEntry
from mnemod.redisio.change_feed import ChangeFeed, FencedOut, Position
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import Lease
from mnemod.runtime.catch_up import Diverged, Standing, catch_up
from mnemod.runtime.feed_publisher import FeedPublisher
from mnemod.store.engine import Engine
from mnemod.store.paths import NamespacePaths
from mnemod.store.recovery import read_committed
from mnemod.store.replica import start_from_checkpoint

KEYS = Keys("mnemod", "default")
RedisClient = Any


@contextmanager
def engine_at(folder: Path, replica: bool = False) -> Iterator[Engine]:
    config = load_config(None, environ={})
    paths = NamespacePaths(folder, "default")
    engine = Engine(paths, config, SystemClock(), autosave=False, replica=replica)
    try:
        yield engine
    finally:
        engine.close()


@contextmanager
def leading(folder: Path, client: RedisClient, owner: str = "leader") -> Iterator[Engine]:
    """An engine that leads the namespace: the lease taken, its commits published."""
    assert Lease(client, KEYS, owner, 30).acquire()
    with engine_at(folder) as engine:
        FeedPublisher(ChangeFeed(client, KEYS, owner), engine, max_len=100).take_over()
        yield engine


def add(engine: Engine, content: str, entry_id: str, type_: str = "insight") -> None:
    engine.add(NewEntry(content=content, type=type_, id=entry_id))
    engine.save()


def as_dicts(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    state = read_committed(NamespacePaths(folder, "default"))
    l3 = {i: e.to_dict() for i, e in state.entries.items()}
    return l3, {i: e.to_dict() for i, e in state.l2.items()}


def test_a_follower_applies_the_leaders_records_to_its_own_folder(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    feed = ChangeFeed(redis_client, KEYS, "follower")
    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "The user's dog is called Biscuit", "dog")
        add(leader, "Invoices go out on the first of the month", "invoice", "preference")
        add(leader, "A memory that will be removed soon", "gone")
        leader.remove("gone")
        leader.promote("invoice")
        leader.access("dog", times=3)
        leader.save()
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.CURRENT
            assert copy.commits.log.last_crc == leader.commits.log.last_crc
            assert set(copy.entries) == {"dog"} and set(copy.l2_entries) == {"invoice"}
            assert copy.find("gone") is None and copy.entries["dog"].access_count == 3
            # the engine's lookups follow: resolve finds what the records brought
            assert [i.id for i in copy.resolve("dog", 200, record_access=False).items] == ["dog"]
    assert as_dicts(tmp_path / "b") == as_dicts(tmp_path / "a")
    copy_l2 = (tmp_path / "b/default/l2/preference.md").read_text()
    assert copy_l2 == (tmp_path / "a/default/l2/preference.md").read_text()
    history = (tmp_path / "b/default/history.jsonl").read_text()
    assert history == (tmp_path / "a/default/history.jsonl").read_text()


def test_an_empty_follower_starts_from_the_published_checkpoint(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    feed = ChangeFeed(redis_client, KEYS, "follower")
    with leading(tmp_path / "a", redis_client) as leader:
        for n in range(5):
            add(leader, f"memory number {n} about topic{n}", f"m{n}")
        leader.checkpoint()
        publisher = leader.commits.publish
        assert isinstance(publisher, FeedPublisher)
        publisher.publish_checkpoint(leader.commits.checkpoint_seq, leader.commits.log.last_line)
        publisher.feed.trim(max_len=100)  # to the checkpoint: no follower needs more
        add(leader, "one more after the checkpoint", "late")
        with engine_at(tmp_path / "b", replica=True) as copy:
            add(copy, "written here, not in the namespace", "stray")  # the folder's own
        with engine_at(tmp_path / "b", replica=True) as copy:
            with pytest.raises(Diverged):
                catch_up(copy, feed)
            paths = copy.paths
            copy.abandon()
        checkpoint = feed.checkpoint()
        assert checkpoint is not None
        aside = start_from_checkpoint(paths, checkpoint.seq, checkpoint.line, checkpoint.index)
        assert aside is not None and (aside / "log").is_dir()  # kept for a person
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.CURRENT
    assert as_dicts(tmp_path / "b") == as_dicts(tmp_path / "a")


def test_a_copy_whose_record_differs_from_the_namespaces_is_diverged(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    feed = ChangeFeed(redis_client, KEYS, "follower")
    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "the first memory", "one")
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.CURRENT
        with engine_at(tmp_path / "b") as copy:
            add(copy, "the library wrote this while no daemon ran", "local")
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.AHEAD  # may lead: its tail is published
            add(leader, "the leader's second memory", "two")
            with pytest.raises(Diverged, match="differs"):
                catch_up(copy, feed)


def test_a_deposed_leader_publishes_nothing_and_appends_nothing(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "the first memory", "one")
        before = leader.commits.log.last_seq
        redis_client.set(KEYS.lease, "someone-else", px=30_000)
        leader.add(NewEntry(content="a change after the lease went", type="insight", id="two"))
        with pytest.raises(FencedOut):
            leader.save()
        assert leader.commits.log.last_seq == before
        redis_client.set(KEYS.lease, "leader", px=30_000)  # for the close (its commit is published)
    committed = ChangeFeed(redis_client, KEYS, "x").committed()
    assert committed is not None and committed.seq == before + 1


def test_a_lease_that_lapsed_and_nobody_took_is_taken_back_by_the_publish(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "the first memory", "one")
        redis_client.delete(KEYS.lease)  # a long pause: the lease lapsed, nobody took it
        add(leader, "published all the same", "two")
        assert redis_client.get(KEYS.lease) == "leader"
        assert 0 < redis_client.pttl(KEYS.lease) <= 15_000


def test_the_feed_is_trimmed_past_what_followers_applied_within_the_bound(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading(tmp_path / "a", redis_client) as leader:
        publisher = leader.commits.publish
        assert isinstance(publisher, FeedPublisher)
        feed = publisher.feed
        for n in range(30):
            add(leader, f"memory {n} of topic{n}", f"m{n}")
        leader.checkpoint()
        publisher.publish_checkpoint(leader.commits.checkpoint_seq, leader.commits.log.last_line)
        last = leader.commits.log.last_seq
        feed.register("slow", last - 20)
        feed.register("fast", last - 2)
        feed.trim(max_len=100)
        assert feed.read_from(0, 1)[0].seq == last - 20  # what the slowest still needs
        feed.trim(max_len=10)
        assert feed.read_from(0, 1)[0].seq == last - 9  # the bound: "slow" starts again
        redis_client.hdel(KEYS.followers, "slow", "fast")
        feed.trim(max_len=10)
        assert feed.read_from(0, 1)[0].seq == last  # the checkpoint's record is kept


def test_a_publish_whose_reply_was_lost_is_not_made_twice(
    tmp_path: Path, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ChangeFeed.publish
    lost = [redis.ConnectionError("the reply went with the connection")]

    def reply_lost(self: ChangeFeed, after: Position, lines: list[bytes]) -> Position:
        done = real(self, after, lines)
        if lost:
            raise lost.pop()
        return done

    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "the first memory", "one")
        monkeypatch.setattr(ChangeFeed, "publish", reply_lost)
        with pytest.raises(redis.ConnectionError):
            add(leader, "published, its reply lost", "two")
        before = leader.commits.log.last_seq
        add(leader, "made before the retry", "three")  # both records go out again
        assert leader.commits.log.last_seq == before + 2
        feed = ChangeFeed(redis_client, KEYS, "x")
        seqs = [r.seq for r in feed.read_from(0, 100)]
        assert seqs == sorted(set(seqs)) and seqs[-1] == before + 2  # each record once
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, feed) is Standing.CURRENT
            assert set(copy.entries) == {"one", "two", "three"}


def test_a_leader_publishes_what_the_library_committed_while_no_daemon_ran(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with leading(tmp_path / "a", redis_client) as leader:
        add(leader, "the first memory", "one")
    with engine_at(tmp_path / "a") as library:  # `mnemod add` with no daemon running
        add(library, "added through the CLI", "two")
        last = library.commits.log.last_seq
    with leading(tmp_path / "a", redis_client) as leader:
        committed = ChangeFeed(redis_client, KEYS, "x").committed()
        assert committed is not None and committed.seq == last
        with engine_at(tmp_path / "b", replica=True) as copy:
            assert catch_up(copy, ChangeFeed(redis_client, KEYS, "x")) is Standing.CURRENT
            assert set(copy.entries) == {"one", "two"}
        assert set(leader.entries) == {"one", "two"}


def checkpointed_store(folder: Path) -> Path:
    """A store of one memory, its checkpoint current; returns its index.json."""
    with engine_at(folder) as engine:
        add(engine, "The user's dog is called Biscuit", "dog")
        engine.checkpoint()
    return NamespacePaths(folder, "default").index


def test_a_takeover_publishes_a_current_index_as_it_is(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    index = checkpointed_store(tmp_path)
    before = index.stat()
    with leading(tmp_path, redis_client):
        checkpoint = ChangeFeed(redis_client, KEYS, "follower").checkpoint()
        assert checkpoint is not None
        assert checkpoint.index == index.read_bytes()
        assert (index.stat().st_ino, index.stat().st_mtime_ns) == (
            before.st_ino,
            before.st_mtime_ns,
        )


def test_a_takeover_on_an_index_read_from_its_backup_publishes_a_whole_one(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    with engine_at(tmp_path) as engine:
        add(engine, "The user's dog is called Biscuit", "dog")
        engine.checkpoint(force=True)
        engine.checkpoint(force=True)  # index.json and its .bak hold the same record
    index = NamespacePaths(tmp_path, "default").index
    index.write_bytes(index.read_bytes()[:-40])  # torn
    with leading(tmp_path, redis_client):
        checkpoint = ChangeFeed(redis_client, KEYS, "follower").checkpoint()
        assert checkpoint is not None
        paths = NamespacePaths(tmp_path / "b", "default")
        start_from_checkpoint(paths, checkpoint.seq, checkpoint.line, checkpoint.index)
        assert set(read_committed(paths).entries) == {"dog"}


def test_a_deferred_checkpoint_is_the_one_read_at_the_takeover(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    index = checkpointed_store(tmp_path)
    at_takeover = index.read_bytes()
    feed = ChangeFeed(redis_client, KEYS, "follower")
    assert Lease(redis_client, KEYS, "leader", 30).acquire()
    with engine_at(tmp_path) as engine:
        publisher = FeedPublisher(ChangeFeed(redis_client, KEYS, "leader"), engine, max_len=100)
        publisher.take_over(defer=True)
        seq = engine.commits.checkpoint_seq
        assert feed.checkpoint() is None  # sent once the daemon runs
        add(engine, "written before the checkpoint was sent", "late")
        engine.checkpoint()  # index.json replaced: the one read at the takeover is sent
        assert index.read_bytes() != at_takeover
        publisher.publish_deferred()
        publisher.close()
        checkpoint = feed.checkpoint()
        assert checkpoint is not None
        assert (checkpoint.seq, checkpoint.index) == (seq, at_takeover)
        assert publisher.checkpoint_seq == seq
