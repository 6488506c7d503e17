"""One batch of the hot layer's puts and removals as one script call, which checks that
every item it replaces or removes holds what the batch was planned from, then writes it.

The writer plans from what it wrote last (`HotLayer` remembers each item's stored label, the
one index entry an item's hash alone does not hold; an item it never wrote is taken as
absent). When Redis holds something else (a
restart that kept the layer, a hand edit, lost data) the script writes nothing and answers
with what it found, and the batch is planned again from that.

A script runs alone, so an agent never sees an item without its index entries (what the
MULTI/EXEC of `HotLayer` promised). The call takes every key it touches as a key (a cluster
routes it and refuses nothing). The batch goes as one JSON argument, keys named by their
position among the keys: redis-py packed each argument of a command for some 0.15 µs of the
daemon's CPU, and a batch of 200 adds had 15,000 of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
import redis

from mnemod.redisio.change_feed import FencedOut
from mnemod.redisio.changes import END_LUA, BatchEnd
from mnemod.redisio.keys import LAYER_SETS, Keys

if TYPE_CHECKING:
    from mnemod.redisio.hot_layer import HotItem

LAYERS = tuple(LAYER_SETS)
Stored = str | None
"""What an item's hash holds of its index entries: its label, None when absent (or no hash)."""
ABSENT: Stored = None
ACCESS_FIELDS = ("last_accessed_at", "access_count", "expires_at", "score")
HASH_FIELDS = (
    "id",
    "content",
    "layer",
    "type",
    "key",
    "importance",
    "tokens",
    "created_at",
    "keywords",
    *ACCESS_FIELDS,
)
"""An item hash's fields (docs/redis-keys.md), in the order of `HotItem.hash_values`; the
last four are those an access changes."""
_FIELD_NAMES = json.dumps(HASH_FIELDS)
_SCORE_AT = HASH_FIELDS.index("score")

# The fence of a script: nothing is done while another owner holds the lease (KEYS[#KEYS]
# when ARGV[1], the owner, is not "").
_FENCE = """
if ARGV[1] ~= '' then
  local holder = redis.call('get', KEYS[#KEYS])
  if holder and holder ~= ARGV[1] then return {'lease', holder} end
end
"""

# KEYS: every key the batch reads or writes, then the lease's when fenced. ARGV: the owner
# the lease may name ("" for no fence); the hash field names (JSON); the batch (JSON): a list
# of, in this order, the checks {hash, label} ("" for none), the items to put and those to
# remove (their hashes are deleted first), the labels to delete while they name an item
# {label, id}, then per command its lists {key, arguments}: ZREM, HSET (the values of the
# fields named), ZADD, SET. Keys are given by their position in KEYS. Returns {'lease',
# holder} when another owner holds the lease; {'changed', label, ...} (per check, "" for
# none), having written nothing, when a hash holds other than its check says; else {'ok',
# how many of the items removed existed}. Then, when more ARGV follow, the batch's end from
# ARGV[4] (redisio.changes), once written.
_WRITE = (
    _FENCE
    + END_LUA
    + """
local fields = cjson.decode(ARGV[2])
local b = cjson.decode(ARGV[3])
local found, changed = {'changed'}, false
for _, c in ipairs(b[1]) do
  local label = redis.call('hget', KEYS[c[1]], 'key') or ''
  if label ~= c[2] then changed = true end
  found[#found + 1] = label
end
if changed then return found end
local function named(list)
  local out = {}
  for i, at in ipairs(list) do out[i] = KEYS[at] end
  return out
end
if #b[2] > 0 then redis.call('del', unpack(named(b[2]))) end
local existed = 0
if #b[3] > 0 then existed = redis.call('del', unpack(named(b[3]))) end
for _, p in ipairs(b[4]) do
  if redis.call('get', KEYS[p[1]]) == p[2] then redis.call('del', KEYS[p[1]]) end
end
for _, c in ipairs(b[5]) do redis.call('zrem', KEYS[c[1]], unpack(c[2])) end
for _, c in ipairs(b[6]) do
  local flat = {}
  for i, value in ipairs(c[2]) do
    flat[2 * i - 1] = fields[i]
    flat[2 * i] = value
  end
  redis.call('hset', KEYS[c[1]], unpack(flat))
end
for _, c in ipairs(b[7]) do redis.call('zadd', KEYS[c[1]], unpack(c[2])) end
for _, p in ipairs(b[8]) do redis.call('set', KEYS[p[1]], p[2]) end
if #ARGV > 3 then batch_end(4) end
return {'ok', existed}
"""
)

# A batch's end alone (it changed nothing hot). KEYS: the events stream, then the lease's
# when fenced. ARGV: the owner ("" for no fence), then the end.
_END = (
    _FENCE
    + END_LUA
    + """
batch_end(2)
return {'ok', 0}
"""
)


@dataclass(frozen=True)
class Written:
    """A batch Redis took: how many of its removed items existed."""

    existed: int


@dataclass(frozen=True)
class Changed:
    """A batch Redis did not take: what each checked hash holds, to plan it again from."""

    stored: list[Stored]


class BatchScripts:
    """The script, registered once per client."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.keys = keys
        self._write = client.register_script(_WRITE)
        self._end = client.register_script(_END)

    def apply(
        self, batch: Batch, fence: tuple[str, str] | None = None, end: BatchEnd | None = None
    ) -> Written | Changed:
        """Write `batch` if every item holds what it was planned from, then `end` (its
        messages and acknowledgements; not when nothing is written). `fence` (the lease's
        key, its owner): nothing is done while another owner holds the lease (FencedOut)."""
        owner = fence[1] if fence is not None else ""
        body = orjson.dumps(batch.body())  # names every key it uses
        args: list[str | bytes | int] = [owner, batch.fields, body]
        if end is not None:
            args += end.args(self.keys, batch.key_at(self.keys.events))
        keys = batch.key_names + ([fence[0]] if fence is not None else [])
        return _changed_or_written(self._write(keys=keys, args=args), owner)

    def end(self, end: BatchEnd, fence: tuple[str, str] | None = None) -> None:
        """`end` alone, fenced as `apply`."""
        owner = fence[1] if fence is not None else ""
        keys = [self.keys.events] + ([fence[0]] if fence is not None else [])
        _changed_or_written(self._end(keys=keys, args=[owner, *end.args(self.keys, 1)]), owner)


def _changed_or_written(answer: Any, owner: str) -> Written | Changed:
    """A script's answer (see `_WRITE`); FencedOut when another owner holds the lease."""
    reply = cast(list[Any], answer)
    if reply[0] == "lease":
        raise FencedOut(f"the lease is {reply[1]}'s, not {owner}'s")
    if reply[0] == "changed":
        return Changed([value or None for value in reply[1:]])
    return Written(int(reply[1]))


class Batch:
    """The commands of one batch, grouped by key: one ZREM and ZADD per layer, one HSET per
    item and one SET per label (a command per item and layer was most of a batch's work)."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self._at: dict[str, int] = {}  # key name -> its position in KEYS (from 1)
        self.key_names: list[str] = []
        self.fields = _FIELD_NAMES
        self.checks: list[tuple[int, str]] = []
        self.put_keys: list[int] = []
        self.removed_keys: list[int] = []
        self.gone_labels: list[tuple[str, str]] = []  # label keys and the item they may name
        self.labels: dict[str, str] = {}
        self.hashes: list[tuple[int, list[str]]] = []
        self.layer_del: dict[str, list[str]] = {layer: [] for layer in LAYERS}
        self.layer_add: dict[str, list[str]] = {layer: [] for layer in LAYERS}
        self.stored: dict[str, Stored] = {}  # what each put item holds once written

    def key_at(self, name: str) -> int:
        """The position of key `name` in KEYS (from 1), given one if it has none."""
        at = self._at.get(name)
        if at is None:
            self.key_names.append(name)
            at = self._at[name] = len(self.key_names)
        return at

    def plan(
        self, puts: Sequence[HotItem], removals: Sequence[str], olds: Sequence[Stored]
    ) -> Batch:
        """The commands that turn `olds` (what each put, then each removal, holds now)
        into the batch's items."""
        keys = self.keys
        for item, old in zip(puts, olds, strict=False):
            item_id = item.id
            at = self.key_at(keys.item(item_id))
            self.checks.append((at, old or ""))
            self.put_keys.append(at)
            if old and old != item.key:
                self.gone_labels.append((keys.key(old), item_id))
            values = item.hash_values()
            self.hashes.append((at, values))
            self.stored[item_id] = item.key
            for layer, ids in self.layer_del.items():
                if layer != item.layer:
                    ids.append(item_id)
            self.layer_add[item.layer] += (values[_SCORE_AT], item_id)
            if item.key:
                self.labels[keys.key(item.key)] = item_id
        for item_id, old in zip(removals, olds[len(puts) :], strict=True):
            at = self.key_at(keys.item(item_id))
            self.checks.append((at, old or ""))
            self.removed_keys.append(at)
            for ids in self.layer_del.values():
                ids.append(item_id)
            if old:
                self.gone_labels.append((keys.key(old), item_id))
        return self

    def body(self) -> list[Any]:
        """The batch for the script (see `_WRITE`). A label one item leaves and another
        takes ends with the other, whatever their order in the batch."""
        key = self.key_at
        gone = [(key(k), i) for k, i in self.gone_labels if k not in self.labels]
        layer = self.keys.layer
        return [
            self.checks,
            self.put_keys,
            self.removed_keys,
            gone,
            [(key(layer(n)), ids) for n, ids in self.layer_del.items() if ids],
            self.hashes,
            [(key(layer(n)), pairs) for n, pairs in self.layer_add.items() if pairs],
            [(key(k), i) for k, i in self.labels.items()],
        ]


def stored_keywords(raw: str | None) -> list[str]:
    """Keywords of a stored hash (JSON list); anything unreadable counts as none."""
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []
