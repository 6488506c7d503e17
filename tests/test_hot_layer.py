"""The hot layer against a real redis-server: items never without their index entries."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
import redis
from structlog.testing import capture_logs

from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.redisio.change_feed import FencedOut
from mnemod.redisio.hot_layer import HotItem, HotLayer
from mnemod.redisio.keys import Keys

KEYS = Keys("mnemod", "ns")


def item(item_id: str = "A1", **changes: object) -> HotItem:
    fields: dict[str, object] = {
        "id": item_id,
        "layer": "l3",
        "type": "preference",
        "key": None,
        "content": "User prefers Asia/Taipei",
        "importance": 4,
        "tokens": 6,
        "created_at": "2026-01-01T00:00:00.000Z",
        "last_accessed_at": "2026-01-02T00:00:00.000Z",
        "access_count": 2,
        "expires_at": None,
        "keywords": ("timezone", "taipei"),
        "score": 1.5,
    }
    fields.update(changes)
    return HotItem(**fields)  # type: ignore[arg-type]


def snapshot(client: redis.Redis) -> dict[str, object]:
    """Every key of the namespace with its value, read in one MULTI (a consistent view)."""
    names: list[str] = sorted(map(str, client.keys("mnemod:{ns}:*")))
    pipe = client.pipeline(transaction=True)
    for name in names:
        pipe.type(name)
    types = pipe.execute()
    pipe = client.pipeline(transaction=True)
    for name, kind in zip(names, types, strict=True):
        {
            "hash": pipe.hgetall,
            "zset": lambda n: pipe.zrange(n, 0, -1, withscores=True),
            "set": pipe.smembers,
            "string": pipe.get,
            "stream": pipe.xlen,
        }[kind](name)
    values = pipe.execute()
    return dict(zip(names, values, strict=True))


@pytest.fixture
def hot(redis_client: redis.Redis) -> HotLayer:
    return HotLayer(redis_client, KEYS, batch_size=3)


def test_put_writes_hash_and_every_index(hot: HotLayer, redis_client: redis.Redis) -> None:
    hot.put(item(key="user.tz"))
    state = snapshot(redis_client)
    assert set(state) == {
        "mnemod:{ns}:m:A1",
        "mnemod:{ns}:hot",
        "mnemod:{ns}:key:user.tz",
    }
    stored = state["mnemod:{ns}:m:A1"]
    assert isinstance(stored, dict)
    for field in (
        "content",
        "layer",
        "type",
        "key",
        "importance",
        "tokens",
        "created_at",
        "last_accessed_at",
        "access_count",
        "expires_at",
        "keywords",
    ):
        assert field in stored
    assert stored["keywords"] == '["timezone","taipei"]'
    assert stored["layer"] == "l3" and stored["importance"] == "4" and stored["expires_at"] == ""
    assert state["mnemod:{ns}:hot"] == [("A1", 1.5)]
    assert state["mnemod:{ns}:key:user.tz"] == "A1"
    assert hot.get("A1") == item(key="user.tz")
    assert hot.id_for_key("user.tz") == "A1"
    assert hot.ids("l3") == ["A1"]


def test_replace_removes_stale_key_and_layer(hot: HotLayer, redis_client: redis.Redis) -> None:
    hot.put(item(key="user.tz"))
    hot.put(item(key="tz", layer="l2", keywords=("timezone", "zone"), score=0.0))
    state = snapshot(redis_client)
    assert set(state) == {"mnemod:{ns}:m:A1", "mnemod:{ns}:l2", "mnemod:{ns}:key:tz"}
    assert state["mnemod:{ns}:l2"] == [("A1", 0.0)]
    assert state["mnemod:{ns}:key:tz"] == "A1"
    assert hot.get("A1") == item(key="tz", layer="l2", keywords=("timezone", "zone"), score=0.0)


def test_replace_keeps_a_label_another_item_took_over(hot: HotLayer) -> None:
    hot.put(item("A1", key="shared"))
    hot.put(item("B2", key="shared"))
    hot.put(item("A1", key=None))
    assert hot.id_for_key("shared") == "B2"


def test_a_label_handed_over_in_one_batch_ends_with_its_new_item(hot: HotLayer) -> None:
    """B takes A's label while A takes another, B first in the batch: the label ends
    with B, not deleted as A's old one."""
    hot.put(item("A1", key="shared"))
    hot.apply([item("B2", key="shared"), item("A1", key="other")], [])
    assert hot.id_for_key("shared") == "B2"
    assert hot.id_for_key("other") == "A1"


def test_a_batch_writes_no_keyword_sets(hot: HotLayer, redis_client: redis.Redis) -> None:
    """The words are the hash's `keywords` field: no set per word (a SADD per word of
    every item was most of a batch's Redis work), one ZADD for the batch's layer."""

    def calls(name: str) -> int:
        stats = redis_client.info("commandstats")
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    before = calls("sadd"), calls("zadd")
    hot.apply([item(f"A{n}", keywords=("timezone", "taipei")) for n in range(3)], [])
    assert (calls("sadd"), calls("zadd")) == (before[0], before[1] + 1)
    assert redis_client.keys("mnemod:{ns}:kw:*") == []
    assert [hot.get(f"A{n}") for n in range(3)] == [
        item(f"A{n}", keywords=("timezone", "taipei")) for n in range(3)
    ]


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_batch_of_items_this_layer_wrote_is_one_script_call(
    hot: HotLayer, redis_client: redis.Redis
) -> None:
    """Planned from what the layer wrote last: nothing is read before the write."""
    hot.apply([item("A1"), item("B2", key="b")], [])
    before = evalsha_calls(redis_client)
    hot.apply([item("A1", keywords=("zone",)), item("C3", keywords=("gamma",))], ["B2"])
    assert evalsha_calls(redis_client) - before == 1
    state = snapshot(redis_client)
    assert "mnemod:{ns}:key:b" not in state
    assert redis_client.hget(KEYS.item("A1"), "keywords") == '["zone"]'
    assert redis_client.zrange(KEYS.layer("l3"), 0, -1) == ["A1", "C3"]


def test_items_another_writer_left_are_replaced_and_removed_whole(
    hot: HotLayer, redis_client: redis.Redis
) -> None:
    """A layer that never wrote an item (a restart that kept Redis's) takes it as absent;
    the script finds it there, writes nothing, and the batch is planned again from what
    it holds."""
    hot.apply([item("A1", key="user.tz"), item("B2", keywords=("beta",), key="b")], [])
    fresh = HotLayer(redis_client, KEYS)
    before = evalsha_calls(redis_client)
    assert fresh.apply([item("A1", keywords=("zone",))], ["B2"]) == 1
    assert evalsha_calls(redis_client) - before == 2
    state = snapshot(redis_client)
    assert set(state) == {"mnemod:{ns}:m:A1", "mnemod:{ns}:hot"}
    assert fresh.remove("B2") is False


def test_remove_drops_everything(hot: HotLayer, redis_client: redis.Redis) -> None:
    hot.put(item("A1", key="user.tz"))
    hot.put(item("B2", keywords=("timezone",)))
    assert hot.remove("A1") is True
    assert snapshot(redis_client) == {
        "mnemod:{ns}:m:B2": redis_client.hgetall("mnemod:{ns}:m:B2"),
        "mnemod:{ns}:hot": [("B2", 1.5)],
    }
    assert hot.remove("A1") is False
    assert hot.get("A1") is None


def test_unicode_and_overlong_terms(hot: HotLayer, redis_client: redis.Redis) -> None:
    long_term = "長" * 100
    hot.put(item(keywords=("時區", long_term)))
    got = hot.get("A1")
    assert got is not None and got.keywords == ("時區", long_term)
    hot.remove("A1")
    assert redis_client.keys("mnemod:{ns}:*") == []


def test_sync_removes_extras_and_repairs_indexes(hot: HotLayer, redis_client: redis.Redis) -> None:
    for n in range(5):
        hot.put(item(f"I{n}", key=f"k{n}", keywords=("common", f"t{n}")))
    redis_client.set("mnemod:{ns}:key:orphan", "ghost")  # a dangling index entry
    redis_client.hset("mnemod:{ns}:m:loose", mapping={"content": "no index"})
    # the keyword sets of the earlier layout, any type
    redis_client.sadd("mnemod:{ns}:kw:common", "I1", "ghost")
    redis_client.set("mnemod:{ns}:kw:stray", "left by someone")
    wanted = [item("I1", key="k1", keywords=("common",)), item("N9", layer="l1", score=3.0)]
    result = hot.sync(wanted)
    assert (result.written, result.removed) == (2, 5)
    assert result.repaired == 3
    state = snapshot(redis_client)
    assert set(state) == {
        "mnemod:{ns}:m:I1",
        "mnemod:{ns}:m:N9",
        "mnemod:{ns}:hot",
        "mnemod:{ns}:l1",
        "mnemod:{ns}:key:k1",
    }
    assert hot.all_ids() == {"I1", "N9"}
    assert hot.ids("l1") == ["N9"]


def test_touch_writes_what_an_access_changes_and_nothing_else(
    hot: HotLayer, redis_client: redis.Redis
) -> None:
    hot.put(item())
    hot.put(item("B2", keywords=("tea",)))
    before = snapshot(redis_client)
    accessed = item(
        access_count=3,
        last_accessed_at="2026-02-01T00:00:00.000Z",
        expires_at="2026-03-01T00:00:00.000Z",
        score=9.5,
        content="an access never rewrites the content",
    )
    assert hot.touch([accessed, item("GONE")]) == 1  # 4 touches in batches of 3 below
    assert hot.touch([accessed] * 4) == 4
    stored = hot.get("A1")
    assert stored is not None
    assert stored == item(
        access_count=3,
        last_accessed_at="2026-02-01T00:00:00.000Z",
        expires_at="2026-03-01T00:00:00.000Z",
        score=9.5,
    )
    after = snapshot(redis_client)
    assert after[KEYS.layer("l3")] == [("B2", 1.5), ("A1", 9.5)]
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert changed == {KEYS.item("A1"), KEYS.layer("l3")}  # labels untouched
    assert not redis_client.exists(KEYS.item("GONE"))  # never brought back half-written


def test_keys_something_else_overwrote_are_replaced(
    hot: HotLayer, redis_client: redis.Redis
) -> None:
    """Hot-layer keys turned into another type (the layer set, an item hash, a label
    the item held) made every write fail with WRONGTYPE, at each restart too: they are
    replaced and the write goes through, for puts, removals, touches and sync."""
    hot.put(item("A1", key="old"))
    redis_client.delete("mnemod:{ns}:key:old")
    redis_client.hset("mnemod:{ns}:key:old", "not", "a string")  # the label A1 leaves
    redis_client.set("mnemod:{ns}:hot", "not a sorted set")
    redis_client.set("mnemod:{ns}:m:B2", "not a hash")
    with capture_logs() as logs:
        hot.put(item("A1", key="new"))
        hot.put(item("B2", keywords=("lisbon",)))
    assert "hot.foreign_keys_replaced" in [e["event"] for e in logs]
    assert redis_client.exists("mnemod:{ns}:key:old") == 0
    assert hot.id_for_key("new") == "A1"
    assert redis_client.zrange("mnemod:{ns}:hot", 0, -1) == ["A1", "B2"]
    assert redis_client.hget("mnemod:{ns}:m:B2", "layer") == "l3"

    redis_client.set("mnemod:{ns}:hot", "again")
    assert hot.touch([item("A1", access_count=3)]) == 1
    assert redis_client.zrange("mnemod:{ns}:hot", 0, -1) == ["A1"]  # B2 comes back at sync
    redis_client.set("mnemod:{ns}:m:A1", "again")
    assert hot.remove("A1") is False  # the foreign value was no item
    redis_client.set("mnemod:{ns}:key:stray", "left by someone")
    result = hot.sync([item("C3", keywords=("tea",))])
    assert result.repaired >= 1
    assert redis_client.exists("mnemod:{ns}:key:stray") == 0
    assert hot.all_ids() == {"C3"}


def test_put_many_batches_and_dedupes(hot: HotLayer) -> None:
    items = [item(f"I{n}") for n in range(7)] + [item("I0", content="newer")]
    assert hot.put_many(items) == 7
    assert len(hot.ids("l3")) == 7
    got = hot.get("I0")
    assert got is not None and got.content == "newer"


def test_apply_batches_puts_and_removals(hot: HotLayer) -> None:
    hot.put_many([item(f"I{n}") for n in range(5)])
    existed = hot.apply([item("N1"), item("N2")], ["I0", "I1", "I2", "I3", "gone", "N1"])
    assert existed == 4
    assert sorted(hot.ids("l3")) == ["I4", "N1", "N2"]


def test_marker(hot: HotLayer, redis_client: redis.Redis) -> None:
    assert hot.marker() is None
    hot.mark("2026-01-01T00:00:00.000Z")
    assert redis_client.get("mnemod:{ns}:epoch") == "2026-01-01T00:00:00.000Z"
    redis_client.flushall()
    assert hot.marker() is None


def test_from_entry_round_trip(hot: HotLayer) -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    entry = Entry(
        id="E1",
        type="context",
        content="c",
        created_at=moment,
        updated_at=moment,
        last_accessed_at=moment,
        expires_at=None,
        key="k",
        keywords=("alpha",),
        tokens=3,
    )
    hot.put(HotItem.from_entry(entry, "l3", score=0.7))
    got = hot.get("E1")
    assert got is not None
    assert (got.key, got.keywords, got.tokens, got.created_at, got.expires_at) == (
        "k",
        ("alpha",),
        3,
        "2026-01-01T00:00:00.000Z",
        None,
    )


def test_bad_layer_rejected() -> None:
    with pytest.raises(InvalidInputError):
        item(layer="l9")


def test_reader_never_sees_an_item_without_its_index(
    hot: HotLayer, redis_client: redis.Redis, redis_server: str
) -> None:
    """A concurrent reader takes consistent snapshots while the writer churns."""
    done = threading.Event()
    problems: list[str] = []
    reader = redis.Redis.from_url(redis_server, decode_responses=True)

    def check() -> None:
        while not done.is_set():
            pipe = reader.pipeline(transaction=True)
            pipe.keys("mnemod:{ns}:m:*")
            pipe.zrange("mnemod:{ns}:hot", 0, -1)
            pipe.get("mnemod:{ns}:key:label")
            names, zset, owner = pipe.execute()
            hashes = {KEYS.item_id(n) for n in names}
            if set(zset) != hashes:
                problems.append(f"hashes={hashes} zset={zset}")
            if owner is not None and owner not in hashes:
                problems.append(f"label points at missing {owner}")

    thread = threading.Thread(target=check)
    thread.start()
    try:
        for n in range(300):
            target = f"X{n % 4}"
            if n % 3 == 2:
                hot.remove(target)
            else:
                terms = ("alpha",) if n % 2 else ("beta",)
                hot.put(item(target, keywords=terms, key="label" if n % 5 == 0 else None))
    finally:
        done.set()
        thread.join()
        reader.close()
    assert problems == []


def test_a_fenced_layer_writes_only_while_no_other_owner_holds_the_lease(
    redis_client: redis.Redis,
) -> None:
    fenced = HotLayer(redis_client, KEYS, owner="leader")
    fenced.put(item("A1"))  # the lease free: nobody else leads
    redis_client.set(KEYS.lease, "leader", px=30_000)
    fenced.put(item("A2"))
    redis_client.set(KEYS.lease, "next-leader", px=30_000)  # deposed, frozen past its lease
    before = snapshot(redis_client)
    with pytest.raises(FencedOut, match="next-leader"):
        fenced.apply([item("A3")], ["A1"])
    assert snapshot(redis_client) == before
    assert {"mnemod:{ns}:m:A1", "mnemod:{ns}:m:A2"} <= set(before)
