"""The hot layer in Redis (docs/design.md §3): one hash per item plus its index entries.

An item and its index entries (layer sorted set, `key:<label>` string) change together in
one script (redisio.hot_batch), so an agent never sees an item without its index entries,
nor index entries pointing at a vanished item. Replacing an item drops the key label its
stored version has and it no longer has; the stored version is taken to be what this layer
wrote last, which the script checks.

There is no keyword index in Redis: a set per keyword would be one SADD per word of every
added memory, most of the hot layer's Redis work, and nothing of mnemod reads one (resolve
ranks from the daemon's own index; an item's `keywords` field holds its words). A full
rebuild deletes the `kw:<term>` sets an earlier version kept.

Every key here is a cache of the files. One that something else overwrote with another
type of value (the `hot` sorted set turned into a string) would fail each write with
WRONGTYPE, at every restart too: it is deleted, said in the log, and the write done again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import orjson
import redis
import structlog

from mnemod.clock import format_time
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.redisio.changes import BatchEnd
from mnemod.redisio.connection import wrong_type
from mnemod.redisio.hot_batch import (
    ABSENT,
    ACCESS_FIELDS,
    HASH_FIELDS,
    LAYERS,
    Batch,
    BatchScripts,
    Stored,
    Written,
    stored_keywords,
)
from mnemod.redisio.keys import LAYER_SETS, Keys

log = structlog.get_logger("mnemod.redis")


@dataclass(frozen=True)
class HotItem:
    """What Redis holds of one item. Times are ISO-8601 strings (or None).

    `score` orders the layer's sorted set: the retention score for l3 (`hot`); for l1/l2 a
    stable value chosen by the caller (file position, importance) so the order does not churn.
    """

    id: str
    layer: str
    type: str
    key: str | None
    content: str
    importance: int = 3
    tokens: int = 0
    created_at: str | None = None
    last_accessed_at: str | None = None
    access_count: int = 0
    expires_at: str | None = None
    keywords: tuple[str, ...] = ()
    score: float = 0.0

    def __post_init__(self) -> None:
        if self.layer not in LAYER_SETS:
            raise InvalidInputError("layer", f"must be l1, l2 or l3, got {self.layer!r}")
        object.__setattr__(self, "keywords", tuple(self.keywords))

    @classmethod
    def from_entry(cls, entry: Entry, layer: str, score: float = 0.0) -> HotItem:
        return cls(
            id=entry.id,
            layer=layer,
            type=entry.type,
            key=entry.key,
            content=entry.content,
            importance=entry.importance,
            tokens=entry.tokens,
            created_at=format_time(entry.created_at),
            last_accessed_at=format_time(entry.last_accessed_at),
            access_count=entry.access_count,
            expires_at=None if entry.expires_at is None else format_time(entry.expires_at),
            keywords=tuple(entry.keywords),
            score=score,
        )

    def to_hash(self) -> dict[str, str]:
        """The hash fields; None is stored as "" (Redis has no null)."""
        return dict(zip(HASH_FIELDS, self.hash_values(), strict=True))

    def hash_values(self) -> list[str]:
        """The values of `to_hash`, in the order of HASH_FIELDS."""
        return [
            self.id,
            self.content,
            self.layer,
            self.type,
            self.key or "",
            str(self.importance),
            str(self.tokens),
            self.created_at or "",
            orjson.dumps(self.keywords).decode(),
            *self._access_values(),
        ]

    def access_fields(self) -> dict[str, str]:
        """The hash fields an access changes (see `HotLayer.touch`)."""
        return dict(zip(ACCESS_FIELDS, self._access_values(), strict=True))

    def _access_values(self) -> list[str]:
        return [
            self.last_accessed_at or "",
            str(self.access_count),
            self.expires_at or "",
            repr(float(self.score)),
        ]

    @classmethod
    def from_hash(cls, item_id: str, data: dict[str, str]) -> HotItem:
        return cls(
            id=item_id,
            layer=data.get("layer", "l3"),
            type=data.get("type", ""),
            key=data.get("key") or None,
            content=data.get("content", ""),
            importance=int(data.get("importance") or 3),
            tokens=int(data.get("tokens") or 0),
            created_at=data.get("created_at") or None,
            last_accessed_at=data.get("last_accessed_at") or None,
            access_count=int(data.get("access_count") or 0),
            expires_at=data.get("expires_at") or None,
            keywords=tuple(stored_keywords(data.get("keywords"))),
            score=float(data.get("score") or 0.0),
        )


@dataclass(frozen=True)
class SyncResult:
    written: int
    removed: int
    repaired: int


# An access changes these fields and the score, nothing an index holds; an item that is gone
# (evicted, or Redis lost it) is not brought back half-written. Many items per call: one
# command each cost redis-py more than the work itself.
# KEYS: per item, its hash and its layer's sorted set. ARGV: how many field/value pairs an
# item has, then per item its id, its score and those pairs (HotItem.access_fields).
_TOUCH = """
local pair_args = 2 * tonumber(ARGV[1])
local touched = 0
local at = 2
for i = 1, #KEYS, 2 do
  if redis.call('exists', KEYS[i]) == 1 then
    redis.call('hset', KEYS[i], unpack(ARGV, at + 2, at + 1 + pair_args))
    redis.call('zadd', KEYS[i + 1], ARGV[at + 1], ARGV[at])
    touched = touched + 1
  end
  at = at + 2 + pair_args
end
return touched
"""


class HotLayer:
    """Writes and reads the hot layer of one namespace (only the namespace's writer writes)."""

    def __init__(
        self, client: redis.Redis, keys: Keys, batch_size: int = 200, owner: str | None = None
    ) -> None:
        """`owner`: the leader's lease id. Each batch's write then goes through only while
        no other owner holds the lease (FencedOut otherwise), so a leader deposed between
        its commit and its hot-layer write (frozen past its lease) cannot write over what
        the next leader put there. A free lease is no other's: its next publish takes it."""
        self.client = client
        self.keys = keys
        self.batch_size = batch_size
        self.owner = owner
        self._touch = client.register_script(_TOUCH)
        self._scripts = BatchScripts(client, keys)
        # each item's label as this layer last wrote it (hot_batch plans from it); at most
        # the items in Redis
        self._stored: dict[str, Stored] = {}

    # -- writes --------------------------------------------------------------------------
    def put(self, item: HotItem) -> None:
        """Add or replace one item with its index entries, in one transaction."""
        self._apply([item], [])

    def remove(self, item_id: str) -> bool:
        """Remove an item and every index entry of it; False if it was not there."""
        return self._apply([], [item_id]) > 0

    def put_many(self, items: Iterable[HotItem]) -> int:
        """Put items in batches; each batch is one transaction."""
        unique = list({item.id: item for item in items}.values())
        for start in range(0, len(unique), self.batch_size):
            self._apply(unique[start : start + self.batch_size], [])
        return len(unique)

    def apply(
        self, puts: Iterable[HotItem], removals: Iterable[str], end: BatchEnd | None = None
    ) -> int:
        """Puts and removals of one writer batch, in as few transactions as `batch_size`
        allows (one, for a typical batch), the last followed by `end` (redisio.changes; in
        a script of its own with nothing to write); returns how many removed items
        existed."""
        unique = list({item.id: item for item in puts}.values())
        gone = [r for r in dict.fromkeys(removals) if r not in {i.id for i in unique}]
        existed = 0
        size = self.batch_size
        last = max(len(unique), len(gone)) - 1
        for start in range(0, last + 1, size):
            then = end if start + size > last else None
            existed += self._apply(unique[start : start + size], gone[start : start + size], then)
        if last < 0 and end is not None:
            self._scripts.end(end, self._fence)
        return existed

    def touch(self, items: Sequence[HotItem]) -> int:
        """Accesses of stored items: only what an access changes (2 commands an item, not
        the ~20 of a put with its keyword sets), `batch_size` items a script call; returns
        how many were still stored."""
        updated = 0
        for start in range(0, len(items), self.batch_size):
            keys: list[str] = []
            args: list[str | float | int] = []
            for item in items[start : start + self.batch_size]:
                fields = item.access_fields()
                keys += [self.keys.item(item.id), self.keys.layer(item.layer)]
                args += [item.id, fields["score"], *itertools.chain(*fields.items())]
            try:
                updated += int(self._touch(keys=keys, args=[len(fields), *args]))
            except redis.ResponseError as exc:
                # the keys alternate: an item's hash, then its layer's sorted set
                typed = {name: ("zset" if n % 2 else "hash") for n, name in enumerate(keys)}
                if not wrong_type(exc) or not self._delete_mistyped(typed):
                    raise
                updated += int(self._touch(keys=keys, args=[len(fields), *args]))
        return updated

    def sync(self, items: Iterable[HotItem]) -> SyncResult:
        """Full rebuild: Redis ends up holding exactly `items` and their index entries."""
        desired = {item.id: item for item in items}
        stale = sorted(self.all_ids() - desired.keys())
        removed = 0
        for start in range(0, len(stale), self.batch_size):
            removed += self._apply([], stale[start : start + self.batch_size])
        written = self.put_many(desired.values())
        repaired = self._sweep_indexes(desired)
        log.info("hot.synced", written=written, removed=removed, repaired=repaired)
        return SyncResult(written=written, removed=removed, repaired=repaired)

    def mark(self, value: str) -> None:
        """Set the marker key: its later absence tells the daemon Redis lost its data."""
        self.client.set(self.keys.marker, value)

    # -- reads ---------------------------------------------------------------------------
    def get(self, item_id: str) -> HotItem | None:
        data = cast(dict[str, str], self.client.hgetall(self.keys.item(item_id)))
        return HotItem.from_hash(data.get("id") or item_id, data) if data else None

    def get_many(self, item_ids: Sequence[str]) -> list[HotItem]:
        """The items still stored among `item_ids`, in their order, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for item_id in item_ids:
            pipe.hgetall(self.keys.item(item_id))
        hashes = cast(list[dict[str, str]], pipe.execute())
        return [
            HotItem.from_hash(item_id, data)
            for item_id, data in zip(item_ids, hashes, strict=True)
            if data
        ]

    def top(self, layer: str, limit: int | None) -> list[str]:
        """Up to `limit` ids of a layer (None: all): l1 in file order, the others highest
        score first."""
        stop = -1 if limit is None else limit - 1
        if limit is not None and limit < 1:
            return []
        if layer == "l1":
            return cast(list[str], self.client.zrange(self.keys.layer(layer), 0, stop))
        return cast(list[str], self.client.zrevrange(self.keys.layer(layer), 0, stop))

    def ids(self, layer: str) -> list[str]:
        """Ids of a layer's items, lowest score first."""
        return cast(list[str], self.client.zrange(self.keys.layer(layer), 0, -1))

    def scores(self, layer: str) -> dict[str, float]:
        """Each of a layer's ids with its score."""
        pairs = cast(
            list[tuple[str, float]],
            self.client.zrange(self.keys.layer(layer), 0, -1, withscores=True),
        )
        return dict(pairs)

    def count(self, layer: str) -> int:
        """How many items a layer holds."""
        return int(self.client.zcard(self.keys.layer(layer)))

    def id_for_key(self, label: str) -> str | None:
        return cast("str | None", self.client.get(self.keys.key(label)))

    def marker(self) -> str | None:
        return cast("str | None", self.client.get(self.keys.marker))

    def marked(self) -> bool:
        """Whether the marker key is there (see `mark`)."""
        return bool(self.client.exists(self.keys.marker))

    def all_ids(self) -> set[str]:
        """Every id with a hash or a layer-set entry (a full rebuild looks at both)."""
        found = {self.keys.item_id(k) for k in self.client.scan_iter(self.keys.item_pattern, 500)}
        for layer in LAYERS:
            found.update(self.ids(layer))
        return found

    # -- internals -----------------------------------------------------------------------
    def _apply(
        self, puts: Sequence[HotItem], removals: Sequence[str], end: BatchEnd | None = None
    ) -> int:
        """`_apply_once`, done again after replacing keys of another type (module doc)."""
        try:
            return self._apply_once(puts, removals, end)
        except redis.ResponseError as exc:
            if not wrong_type(exc) or not self._delete_mistyped(self._batch_keys(puts, removals)):
                raise
            return self._apply_once(puts, removals, end)

    def _batch_keys(self, puts: Sequence[HotItem], removals: Sequence[str]) -> dict[str, str]:
        """Each key a batch reads or writes, with the type it must hold: the items, the
        layer sets, the new labels, and those the stored versions have (as this layer
        wrote them, and as Redis holds them: a failed script may have deleted the hash)."""
        keys = self.keys
        expected = {keys.layer(layer): "zset" for layer in LAYERS}
        ids = [i.id for i in puts] + list(removals)
        item_keys = [keys.item(item_id) for item_id in ids]
        expected.update(dict.fromkeys(item_keys, "hash"))
        labels = [i.key for i in puts] + [self._stored.get(item_id) for item_id in ids]
        expected.update({keys.key(label): "string" for label in labels if label})
        reader = self.client.pipeline(transaction=False)
        for name in item_keys:
            reader.hget(name, "key")
        for label in reader.execute(raise_on_error=False):
            # an error: the item key itself holds another type, no stored version
            if label and not isinstance(label, redis.ResponseError):
                expected[keys.key(label)] = "string"
        return expected

    def _delete_mistyped(self, expected: dict[str, str]) -> bool:
        """Delete the keys among `expected` that hold another type; True if there were any."""
        names = list(expected)
        reader = self.client.pipeline(transaction=False)
        for name in names:
            reader.type(name)
        found = cast(list[str], reader.execute())
        wrong = {n: t for n, t in zip(names, found, strict=True) if t not in (expected[n], "none")}
        if wrong:
            self.client.delete(*wrong)
            log.warning("hot.foreign_keys_replaced", keys=dict(list(wrong.items())[:10]))
        return bool(wrong)

    @property
    def _fence(self) -> tuple[str, str] | None:
        return (self.keys.lease, self.owner) if self.owner is not None else None

    def _apply_once(
        self, puts: Sequence[HotItem], removals: Sequence[str], end: BatchEnd | None
    ) -> int:
        """One script call for a batch (redisio.hot_batch), `end` after its writes; returns
        how many removed items existed. It is planned from what this layer wrote last; when
        Redis holds other than that, from what the script found (and called again)."""
        ids = [item.id for item in puts] + list(removals)
        if not ids:
            return 0
        olds = [self._stored.get(item_id, ABSENT) for item_id in ids]
        fence = self._fence
        while True:
            batch = Batch(self.keys).plan(puts, removals, olds)
            reply = self._scripts.apply(batch, fence, end)
            if isinstance(reply, Written):
                break
            olds = reply.stored
        self._stored.update(batch.stored)
        for item_id in removals:
            self._stored.pop(item_id, None)
        return reply.existed

    def _sweep_indexes(self, desired: dict[str, HotItem]) -> int:
        """Drop index entries no desired item accounts for (left by a crash mid-rebuild or a
        hand edit): key labels pointing elsewhere, and the keyword sets of an earlier
        version (module doc)."""
        keys = self.keys
        repaired = 0
        kw_keys = list(self.client.scan_iter(keys.kw_pattern, 500))
        for start in range(0, len(kw_keys), self.batch_size):
            repaired += int(self.client.delete(*kw_keys[start : start + self.batch_size]))
        label_keys = list(self.client.scan_iter(keys.key_pattern, 500))
        head = len(keys.key(""))
        for start in range(0, len(label_keys), self.batch_size):
            chunk = label_keys[start : start + self.batch_size]
            values = cast(list["str | None"], self.client.mget(chunk))
            writer = self.client.pipeline(transaction=True)
            for name, owner in zip(chunk, values, strict=True):
                item = desired.get(owner or "")
                if item is None or item.key != name[head:]:
                    writer.delete(name)
                    repaired += 1
            writer.execute()
        return repaired
