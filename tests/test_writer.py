"""The writer's snapshots: taken on its thread, written on another, and the events they
cover acknowledged only once they are durable. An in-process writer on the session's
redis-server, with the index write held or failed on purpose."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

import mnemod
from daemon_proc import Client as RedisClient
from mnemod.client import Client
from mnemod.clock import Clock, FixedClock
from mnemod.config import load_config
from mnemod.files import entry_texts, l3_store
from mnemod.files.change_log import ChangeLog
from mnemod.files.entry_texts import Stored
from mnemod.files.l3_store import IndexWriter, L3Snapshot, load_index
from mnemod.redisio.keys import GROUP, Keys
from mnemod.runtime import bookkeeping
from mnemod.runtime.commands import Command
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.metrics import Metrics
from mnemod.runtime.rpc_server import RpcServer
from mnemod.runtime.writer import STEP_SECONDS, STEP_WALL_SECONDS, Writer
from mnemod.store import commits as commits_module
from mnemod.store.engine import Engine
from mnemod.store.paths import NamespacePaths
from mnemod.store.recovery import read_committed

KEYS = Keys("mnemod", "default")


@contextmanager
def running_writer(
    folder: Path,
    client: RedisClient,
    clock: Clock | None = None,
    work_clock: Callable[[], float] | None = None,
) -> Iterator[Writer]:
    """A writer as the daemon builds one (without the daemon's loop around it); its time
    moves only when the test advances `clock` (a FixedClock unless given), and so does
    the time its work takes, unless `work_clock` says otherwise."""
    clock = FixedClock() if clock is None else clock
    config = load_config(None, environ={})
    engine = Engine(NamespacePaths(folder, "default"), config, clock, autosave=False)
    metrics = Metrics()
    rpc = RpcServer(engine, client, KEYS, clock, metrics)
    hot = HotSync(client, KEYS, clock)
    work = clock.monotonic if work_clock is None else work_clock
    made = Writer(engine, client, KEYS, config, clock, hot, metrics, rpc, work)
    made.ensure_groups()
    made.snapshot_interval = 0.0  # every commit snapshots what changed
    try:
        yield made
    finally:
        made.close()
        engine.close()


@pytest.fixture
def writer(tmp_path: Path, redis_client: RedisClient) -> Iterator[Writer]:
    with running_writer(tmp_path, redis_client) as made:
        yield made


def take_events(writer: Writer) -> None:
    """Step until the events sent so far are applied (the first step reads the backlog)."""
    for _ in range(3):
        if writer.step(100).applied:
            return
    raise AssertionError("the writer applied nothing")


def pending(client: RedisClient) -> int:
    return int(client.xpending(KEYS.events, GROUP)["pending"])


def on_disk(writer: Writer) -> list[str]:
    """The committed entries' texts (checkpoint + change log)."""
    return [e.content for e in read_committed(writer.engine.paths).entries.values()]


def test_requests_are_answered_while_a_checkpoint_is_written(
    writer: Writer, redis_server: str, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, gate = threading.Event(), threading.Event()
    real = l3_store.save_index

    def held(*args: Any, **kwargs: Any) -> list[int]:
        entered.set()
        assert gate.wait(10), "the test never released the write"
        return real(*args, **kwargs)

    monkeypatch.setattr(l3_store, "save_index", held)
    monkeypatch.setattr(commits_module, "CHECKPOINT_BYTES", 1)
    with Client(redis_server) as agent:
        agent.add("User prefers Asia/Taipei", type="preference")
    take_events(writer)
    assert pending(redis_client) == 0  # acknowledged: its record is durable
    try:
        assert writer.commit()  # a checkpoint is due: started on the saver thread
        assert entered.wait(5)
        redis_client.xadd(
            KEYS.rpc, {"op": "resolve", "prompt": "what about Taipei?", "reply_to": "t:reply"}
        )
        writer.step(100)
        answer = redis_client.blpop(["t:reply"], timeout=5)
        assert answer is not None and "Asia/Taipei" in answer[1]
        assert not writer.commit()  # one checkpoint at a time
    finally:
        gate.set()
    writer.commit(force=True)  # collects the first, then commits the accesses at once
    assert on_disk(writer) == ["User prefers Asia/Taipei"]
    assert load_index(writer.engine.paths.index).log_seq >= 1


def test_a_failed_commit_leaves_its_events_for_the_next(
    writer: Writer, redis_server: str, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ChangeLog.append_lines
    failures = [OSError(28, "No space left on device")]

    def flaky(self: ChangeLog, lines: list[bytes], seqs: list[int] | None = None) -> None:
        if failures:
            raise failures.pop()
        real(self, lines, seqs)

    monkeypatch.setattr(ChangeLog, "append_lines", flaky)
    with Client(redis_server) as agent:
        agent.add("A fact worth keeping", type="context")
        with pytest.raises(OSError, match="No space left"):
            take_events(writer)
        assert pending(redis_client) == 1
        assert writer.commits.dirty and writer.unacked
        assert writer.failed_snapshots == 1 and 0 < writer.snapshot_retry_in <= 1.0
        agent.add("Another fact, sent meanwhile", type="context")
        writer.step(1)
        assert pending(redis_client) == 1  # no more events read while the log fails
        writer.commit(force=True)  # a stop does try at once
        assert writer.failed_snapshots == 0
        assert pending(redis_client) == 0
        take_events(writer)
    assert on_disk(writer) == ["A fact worth keeping", "Another fact, sent meanwhile"]


def test_a_backlog_is_read_in_larger_batches_and_a_trickle_in_small_ones(
    writer: Writer, redis_client: RedisClient
) -> None:
    """The clock stands still, so every batch is quick: the count doubles while reads
    come back full, and falls back to `daemon.batch_size` (200) after one that does not."""
    pipe = redis_client.pipeline(transaction=False)
    for n in range(1000):
        pipe.xadd(KEYS.events, {"op": "add", "data": json.dumps({"content": f"fact {n} kept"})})
    pipe.execute()
    applied = [writer.step(1).applied for _ in range(6)]
    assert [n for n in applied if n] == [200, 400, 400]
    assert writer.batch.count == 200
    assert pending(redis_client) == 0


def test_failed_commits_are_tried_again_less_and_less_often(
    writer: Writer, redis_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    real = ChangeLog.append_lines
    monkeypatch.setattr(ChangeLog, "append_lines", full)
    clock = writer.clock
    assert isinstance(clock, FixedClock)
    waits: list[float] = []
    with Client(redis_server) as agent:
        agent.add("A fact worth keeping", type="context")
    for _ in range(8):
        with pytest.raises(OSError):
            take_events(writer) if not waits else writer.commit(force=True)
        waits.append(writer.snapshot_retry_in)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60]  # doubled, up to the cap
    monkeypatch.setattr(ChangeLog, "append_lines", real)  # space again
    clock.advance(59.9)
    writer.commit()  # not yet due: nothing tried
    assert writer.failed_snapshots == 8 and round(writer.snapshot_retry_in, 1) == 0.1
    clock.advance(0.1)
    writer.commit()  # due: tried, and written
    assert writer.failed_snapshots == 0
    assert on_disk(writer) == ["A fact worth keeping"]


def test_an_older_snapshot_never_replaces_a_newer(tmp_path: Path) -> None:
    index = IndexWriter(tmp_path / "index.json")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    older_texts, newer_texts = Stored([], [], None, 0), Stored([], [], None, 1)
    older = index.job(L3Snapshot([], "1-0", {}), now, older_texts)
    newer = index.job(L3Snapshot([], "2-0", {}), now, newer_texts)
    assert newer() is True
    assert older() is False  # taken first, reached the lock last: dropped
    assert older_texts.written is None and newer_texts.written is not None
    newer_texts.discard()
    assert load_index(tmp_path / "index.json").last_event_id == "2-0"


def serialized_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the entries serialized from now on."""
    serialized: list[str] = []
    real = entry_texts.entry_json

    def counted(entry: Any) -> str:
        serialized.append(entry.id)
        return real(entry)

    monkeypatch.setattr(entry_texts, "entry_json", counted)
    return serialized


@pytest.mark.parametrize("layout", ["as written", "reformatted"])
def test_a_checkpoint_serializes_only_what_changed_since_start(
    tmp_path: Path, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Entries read from a checkpoint as mnemod writes it are copied from that file; read
    from any other layout, a quiet writer serializes them in slices ahead of the save."""
    store = mnemod.open(tmp_path)
    with store.engine.batch():
        for number in range(300):
            store.add(f"fact {number}: word{number} other{number}", type="context")
    store.close()
    index = NamespacePaths(tmp_path, "default").index
    if layout == "reformatted":
        index.write_text(json.dumps(json.loads(index.read_text()), indent=1))
    with running_writer(tmp_path, redis_client) as writer:
        engine = writer.engine
        assert engine.texts.cold is (layout == "reformatted")
        for _ in range(300):  # quiet steps: a few ms of serializing each
            writer.step(1)
            if not engine.texts.cold:
                break
        assert not engine.texts.cold
        serialized = serialized_by(monkeypatch)
        accessed = engine.access(next(iter(engine.entries))).id
        assert writer.commit(force=True, checkpoint=True)
        assert serialized == [accessed]  # the first checkpoint found every other text ready
        assert len(on_disk(writer)) == 300
        assert engine.texts.referenced == 300  # all of them now point into the new file


def agent_adds_a_fact(writer: Writer, redis_server: str) -> str:
    """An agent adds a preference; the writer applies it. Returns its id."""
    with Client(redis_server) as agent:
        fact = agent.add("User prefers Asia/Taipei", type="preference")
    take_events(writer)
    return fact


def ask(client: RedisClient, prompt: str, reply_to: str) -> None:
    client.xadd(KEYS.rpc, {"op": "resolve", "prompt": prompt, "reply_to": reply_to})


def answer(writer: Writer, client: RedisClient, reply_to: str, **fields: str) -> str:
    """The text of one request's answer."""
    client.xadd(KEYS.rpc, {"op": "resolve", "reply_to": reply_to, **fields})
    writer.step(100)
    return str(json.loads(client.lpop(reply_to) or "{}")["text"])


def test_bytes_that_are_not_utf8_are_dead_lettered_as_sent(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    """An agent's invalid UTF-8 failed the whole read and took the daemon down (at every
    restart: the event stayed in the stream). Such events and requests now go to the dead
    letters with the bytes as sent; a lone surrogate escaped in the JSON is refused too."""
    raw: RedisClient = redis.Redis.from_url(redis_server)  # bytes in, bytes out, as sent
    try:
        bad = [
            {b"op": b"add", b"data": b'{"content": "caf\xe9 \xff"}'},
            {b"op\xfe": b"add", b"data": b'{"content": "a field name"}'},
            {b"op": b"add", b"data": b'{"content": "lone \\ud800 surrogate"}'},
        ]
        sent = [raw.xadd(KEYS.events, fields) for fields in bad]
        raw.xadd(KEYS.rpc, {b"op": b"resolve", b"prompt": b"\xff\xfe", b"reply_to": b"t:bytes"})
        raw.xadd(KEYS.events, {b"op": b"add", b"data": b'{"content": "a good one after"}'})
        for _ in range(3):
            writer.step(100)
        writer.commit(force=True)
        dead = raw.xrange(KEYS.dead)
        assert [fields[b"event_id"] for _, fields in dead[:3]] == sent
        for (_, fields), original in zip(dead, bad, strict=False):
            assert {k: v for k, v in fields.items() if k in original} == original
        assert b"not valid UTF-8" in dead[0][1][b"error"]
        assert b"lone surrogate" in dead[2][1][b"error"]
        answer = json.loads(redis_client.lpop("t:bytes") or "{}")
        assert answer["ok"] is False and "not valid UTF-8" in answer["error"]
        assert on_disk(writer) == ["a good one after"]
        assert pending(redis_client) == 0
    finally:
        raw.close()


def test_a_request_redis_refuses_to_serve_never_stops_the_writer(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    """A `reply_to` that holds another type of key made RPUSH fail and took the daemon
    down (and again at each restart: the request stayed pending). Now the request is kept
    in the dead letters and acknowledged, the agent's key is left as it was (no expiry set
    on it), and a session ledger of the wrong type gets an error answer (it is read only
    when some item is `once`)."""
    agent_adds_a_fact(writer, redis_server)
    redis_client.set(f"{KEYS.sessions('s0')}", "not a set")
    assert "Taipei" in answer(writer, redis_client, "t:s0", prompt="Taipei?", session="s0")
    with Client(redis_server) as agent:
        agent.add("Greet the user by name first", tier="hot", once=True)
    take_events(writer)
    redis_client.hset("agent:state", "step", "3")
    ask(redis_client, "what about Taipei?", "agent:state")
    redis_client.set(f"{KEYS.sessions('s1')}", "not a set")
    redis_client.xadd(
        KEYS.rpc, {"op": "resolve", "prompt": "Taipei?", "session": "s1", "reply_to": "t:s1"}
    )
    ask(redis_client, "Taipei, once more?", "t:fine")
    for _ in range(3):
        writer.step(100)
    assert redis_client.hgetall("agent:state") == {"step": "3"}
    assert redis_client.ttl("agent:state") == -1
    ((_, dead),) = redis_client.xrange(KEYS.dead)
    assert dead["reply_to"] == "agent:state" and "WRONGTYPE" in dead["error"]
    refused = json.loads(redis_client.lpop("t:s1") or "{}")
    assert refused["ok"] is False and "WRONGTYPE" in refused["error"]
    assert "Taipei" in json.loads(redis_client.lpop("t:fine") or "{}")["text"]
    assert int(redis_client.xpending(KEYS.rpc, GROUP)["pending"]) == 0
    # the agent's own key and the ledgers this test spoilt, which never expire
    redis_client.delete("agent:state", KEYS.sessions("s0"), KEYS.sessions("s1"))


def test_answers_go_on_after_redis_drops_the_connection_or_its_scripts(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    """Answers go out on a connection the rpc server keeps (not one from the pool per
    answer), and by a script's digest: a server that closed that connection (an idle
    `timeout`, CLIENT KILL, a restart) or forgot its scripts still gets the next answer."""
    agent_adds_a_fact(writer, redis_server)
    ask(redis_client, "what about Taipei?", "t:first")
    writer.step(100)
    assert redis_client.llen("t:first") == 1
    redis_client.script_flush()
    redis_client.client_kill_filter(_type="normal", skipme=True)  # the writer's connections
    ask(redis_client, "Taipei again?", "t:second")
    writer.step(100)
    assert "Taipei" in json.loads(redis_client.lpop("t:second") or "{}")["text"]
    assert redis_client.ttl("t:second") == -2  # popped; the answer had its expiry
    assert int(redis_client.xpending(KEYS.rpc, GROUP)["pending"]) == 0


def test_a_batch_of_requests_gets_each_answer_or_error_in_its_own_place(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    """Answers are sent as each request is resolved, and Redis's replies to them read after
    the batch; an error found then (a `reply_to` holding a hash), and a malformed request in
    between, are answered where they belong and nothing is left pending."""
    agent_adds_a_fact(writer, redis_server)
    redis_client.hset("agent:state", "step", "3")
    ask(redis_client, "what about Taipei?", "t:first")
    ask(redis_client, "Taipei for the hash?", "agent:state")
    ask(redis_client, "Taipei, last?", "t:last")
    redis_client.xadd(KEYS.rpc, {"op": "resolve", "reply_to": "t:no-prompt"})
    ask(redis_client, "what about Taipei, again?", "t:again")
    ask(redis_client, "Taipei for the hash, again?", "agent:state")
    ask(redis_client, "Taipei, once more?", "t:more")
    assert writer.step(100).rpc == 7  # one batch
    assert "Taipei" in json.loads(redis_client.lpop("t:first") or "{}")["text"]
    refused = json.loads(redis_client.lpop("t:no-prompt") or "{}")
    assert refused["ok"] is False and "prompt" in refused["error"]
    for answered in ("t:last", "t:again", "t:more"):
        assert redis_client.llen(answered) == 1
        assert "Taipei" in json.loads(redis_client.lpop(answered) or "{}")["text"]
    assert redis_client.hgetall("agent:state") == {"step": "3"}
    dead = redis_client.xrange(KEYS.dead)
    hashes = ["Taipei for the hash?", "Taipei for the hash, again?"]
    assert [fields["prompt"] for _, fields in dead] == hashes
    assert all("WRONGTYPE" in fields["error"] for _, fields in dead)
    assert int(redis_client.xpending(KEYS.rpc, GROUP)["pending"]) == 0
    redis_client.delete("agent:state")  # the agent's own key, which never expires


def test_once_items_once_per_session_in_a_ledger_that_expires(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    """Under the daemon, which `once` items a session has seen lives in Redis, expiring a
    day after the session's last request; a request without a session sees them always."""
    with Client(redis_server) as agent:
        agent.add("Greet the user by name first", tier="hot", once=True)
        agent.add("The user writes in British English", tier="hot")
    take_events(writer)
    first = answer(writer, redis_client, "t:1", prompt="hello", session="s1")
    assert "Greet the user" in first and "British English" in first
    again = answer(writer, redis_client, "t:2", prompt="hello again", session="s1")
    assert "Greet the user" not in again and "British English" in again
    assert "Greet the user" in answer(writer, redis_client, "t:3", prompt="hi", session="s2")
    assert "Greet the user" in answer(writer, redis_client, "t:4", prompt="hi")
    assert 0 < redis_client.ttl(KEYS.sessions("s1")) <= 24 * 3600
    redis_client.delete(KEYS.sessions("s1"))  # a session reset by hand starts over
    assert "Greet the user" in answer(writer, redis_client, "t:5", prompt="hey", session="s1")


def test_a_request_is_answered_before_the_bookkeeping_of_earlier_ones(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    fact = agent_adds_a_fact(writer, redis_server)
    writer.commit(force=True)
    assert writer.rpc is not None
    for n in range(2):
        ask(redis_client, "what about Taipei?", f"t:{n}")
        writer.step(100)
    assert writer.engine.get(fact).access_count == 0  # answered; gathered, not recorded
    writer.books.seal()
    assert writer.rpc.unsettled == 1  # one entry, selected twice
    ask(redis_client, "Taipei again?", "t:later")
    writer.step(100)  # a request waits: it is answered, the bookkeeping waits
    assert redis_client.llen("t:later") == 1
    assert writer.rpc.unsettled == 1
    while writer.books.due:
        writer.step(100)  # nothing waits: the bookkeeping goes on
    stored = writer.engine.get(fact)
    assert (stored.access_count, stored.selected_count) == (2, 2)  # the later one: next seal
    assert redis_client.hget(KEYS.item(fact), "access_count") == "2"


def test_under_a_load_that_never_pauses_the_bookkeeping_still_goes_on(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    fact = agent_adds_a_fact(writer, redis_server)
    assert writer.rpc is not None
    ask(redis_client, "what about Taipei?", "t:first")
    writer.step(100)
    writer.books.seal()
    assert isinstance(writer.clock, FixedClock)
    writer.clock.advance(bookkeeping.STARVED_SECONDS + 0.01)  # none done for too long
    ask(redis_client, "Taipei again?", "t:second")
    writer.step(100)
    assert redis_client.llen("t:second") == 1
    assert writer.rpc.unsettled == 0  # a slice after the batch, though a request waited
    assert writer.engine.get(fact).access_count == 1


def test_a_job_and_a_snapshot_at_shutdown_see_every_selection(
    writer: Writer, redis_server: str, redis_client: RedisClient
) -> None:
    fact = agent_adds_a_fact(writer, redis_server)
    for n in range(3):
        ask(redis_client, "what about Taipei?", f"t:{n}")
        writer.step(100)
    writer.run_command(Command("expiry"))  # GC must not expire what was just used
    while writer.maintenance.busy:  # the job begins once the selections are recorded
        writer.step(100)
    assert writer.job_results["expiry"]["expired"] == 0
    assert writer.engine.get(fact).access_count == 3
    for n in range(2):
        ask(redis_client, "Taipei again?", f"t:again:{n}")
        writer.step(100)
    writer.commit(force=True, checkpoint=True)  # as at shutdown
    assert [e.access_count for e in load_index(writer.engine.paths.index).entries] == [5]
    assert redis_client.hget(KEYS.item(fact), "access_count") == "5"


def test_an_index_written_in_pieces_reads_back_whole(tmp_path: Path) -> None:
    store = mnemod.open(tmp_path)
    with store.engine.batch():
        for number in range(600):  # more than two pieces
            store.add(f"fact {number}: ünïcode word{number}", type="context")
    written = [e.to_dict() for e in store.engine.entries.values()]
    store.close()
    entries = load_index(NamespacePaths(tmp_path, "default").index).entries
    assert [e.to_dict() for e in entries] == written


def test_an_entry_or_update_the_engine_refuses_is_dead_lettered_naming_its_event(
    writer: Writer, redis_client: RedisClient
) -> None:
    """The writer reads an add's entry and an update's fields, the engine checks them as it
    applies them (once, where both did): the dead letter names the event as before."""
    good = redis_client.xadd(KEYS.events, {"op": "add", "data": '{"content": "kept", "key": "k"}'})
    bad_add = redis_client.xadd(
        KEYS.events, {"op": "add", "data": '{"content": "x", "type": "nope"}'}
    )
    bad_update = redis_client.xadd(
        KEYS.events, {"op": "update", "data": '{"id": "k", "importance": 9}'}
    )
    take_events(writer)
    writer.commit(force=True)
    dead = {f["event_id"]: f["error"] for _, f in redis_client.xrange(KEYS.dead)}
    assert dead[bad_add].startswith(f"event {bad_add}: type: unknown type 'nope'")
    assert dead[bad_update] == f"event {bad_update}: importance: must be an integer from 1 to 5"
    assert good not in dead
    assert on_disk(writer) == ["kept"]
    assert writer.engine.get("k").importance == 3
    assert pending(redis_client) == 0


def test_a_read_after_redis_lost_its_data_makes_the_groups_again(
    writer: Writer, redis_client: RedisClient
) -> None:
    """The read and its pending check go in one pipeline, whose errors redis-py prefixes:
    NOGROUP is still told from other errors, and the groups are made again."""
    redis_client.flushall()
    assert writer.step(0).applied == 0
    assert writer.groups_recreated
    redis_client.xadd(KEYS.events, {"op": "add", "data": '{"content": "after the loss"}'})
    take_events(writer)
    writer.commit(force=True)
    assert on_disk(writer) == ["after the loss"]
    assert pending(redis_client) == 0


class TickingClock(FixedClock):
    """Each look at the monotonic clock finds it 10 ms on: every step spends time."""

    def monotonic(self) -> float:
        self.ticks += 0.01
        return self.ticks


def test_a_long_read_is_applied_a_step_at_a_time_and_a_request_waits_for_one(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    """A step applies events for STEP_SECONDS at most: a request read with a long read of
    events is answered after the part applied by then, the rest follow, in order, each
    once, every event acknowledged once applied and durable."""
    facts = [f"note{n} about topic{n} and place{n}" for n in range(20)]
    pipe = redis_client.pipeline(transaction=False)
    for fact in facts:
        pipe.xadd(KEYS.events, {"op": "add", "data": json.dumps({"content": fact})})
    pipe.execute()
    ask(redis_client, "topic3?", "t:cut")
    with running_writer(tmp_path, redis_client, TickingClock()) as writer:
        first = writer.step(1)  # the backlog (none)
        if not first.applied:
            first = writer.step(1)
        assert 0 < first.applied < len(facts) and first.rpc == 1
        assert redis_client.lpop("t:cut") is not None  # answered with that part applied
        assert len(writer.held) == len(facts) - first.applied
        assert pending(redis_client) == len(facts) - first.applied
        applied = first.applied
        for _ in range(len(facts)):
            applied += writer.step(1).applied
        assert applied == len(facts) and not writer.held
        assert pending(redis_client) == 0
        assert on_disk(writer) == facts


class Ticker:
    """A clock of the writer's work: each look finds it `tick` seconds on."""

    def __init__(self, tick: float) -> None:
        self.tick, self.seconds = tick, 0.0

    def __call__(self) -> float:
        self.seconds += self.tick
        return self.seconds


class WaitingClock(FixedClock):
    """Each look at the monotonic clock finds it 20 ms on: the writer waits for a core."""

    tick = 0.02

    def monotonic(self) -> float:
        self.ticks += self.tick
        return self.ticks


def test_a_step_is_bounded_by_the_writers_work_not_by_the_time_it_waits_for_a_core(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    """On a loaded machine the clock runs on while the writer waits for a core (here 20 ms
    a look, its own work 2 ms): a step applies events until STEP_SECONDS of its work, or
    STEP_WALL_SECONDS on the clock, not until STEP_SECONDS on the clock (two or three
    events), so its commit, fsync and hot-layer script are paid for many events."""
    facts = [f"note{n} about topic{n} and place{n}" for n in range(40)]
    pipe = redis_client.pipeline(transaction=False)
    for fact in facts:
        pipe.xadd(KEYS.events, {"op": "add", "data": json.dumps({"content": fact})})
    pipe.execute()
    clock = WaitingClock()
    with running_writer(tmp_path, redis_client, clock, Ticker(0.002)) as writer:
        first = writer.step(1)  # the backlog (none)
        if not first.applied:
            first = writer.step(1)
        assert first.applied > STEP_SECONDS / clock.tick + 1  # past the clock's bound
        assert first.applied <= STEP_WALL_SECONDS / clock.tick + 1
        assert len(writer.held) == len(facts) - first.applied
        applied = first.applied
        for _ in range(len(facts)):
            applied += writer.step(1).applied
        assert applied == len(facts) and not writer.held
        assert pending(redis_client) == 0
        assert on_disk(writer) == facts


@contextmanager
def some_held(
    tmp_path: Path, redis_client: RedisClient, facts: list[str]
) -> Iterator[tuple[Writer, int]]:
    """A writer that has read `facts` as add events, applied some and holds the rest:
    (it, how many it applied)."""
    for fact in facts:
        redis_client.xadd(KEYS.events, {"op": "add", "data": json.dumps({"content": fact})})
    with running_writer(tmp_path, redis_client, TickingClock()) as writer:
        applied = writer.step(1).applied + writer.step(1).applied  # the backlog, then new
        assert writer.held
        yield writer, applied


def test_events_held_from_a_read_are_read_again_after_a_lost_connection(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    facts = [f"note{n} about topic{n} and place{n}" for n in range(20)]
    with some_held(tmp_path, redis_client, facts) as (writer, applied):
        writer.reread_pending()
        assert not writer.held
        for _ in range(len(facts)):
            applied += writer.step(1).applied
        assert applied == len(facts)
        assert pending(redis_client) == 0
        assert on_disk(writer) == facts


def test_events_held_from_a_read_are_applied_after_redis_lost_its_data(
    tmp_path: Path, redis_client: RedisClient
) -> None:
    """Held events were handed to the daemon: when Redis loses its data (a restart without
    persistence) they are in no stream any more, and are applied all the same."""
    facts = [f"note{n} about topic{n} and place{n}" for n in range(20)]
    with some_held(tmp_path, redis_client, facts) as (writer, applied):
        redis_client.flushall()
        writer.ensure_groups()
        writer.reread_pending(data_lost=True)
        for _ in range(len(facts)):
            applied += writer.step(1).applied
        assert applied == len(facts) and not writer.held
        assert on_disk(writer) == facts
