"""One batch of the hot layer's puts and removals as two script calls: one reads what each
item holds now, the other checks that nothing changed since and writes the whole batch.

A script runs alone, so an agent never sees an item without its index entries (what the
MULTI/EXEC of `HotLayer` promised). Both calls take every key they touch as a key (a
cluster routes them and refuses nothing), and each is one command for redis-py: a
pipeline of the same commands cost some 13 µs of the daemon's CPU per command, ~8 an
added memory, more than the rest of its hot-layer work.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import redis

from mnemod.redisio.change_feed import FencedOut
from mnemod.redisio.keys import LAYER_SETS, Keys

if TYPE_CHECKING:
    from mnemod.redisio.hot_layer import HotItem

LAYERS = tuple(LAYER_SETS)
Stored = list["str | None"]
"""What an item's hash holds now: its keywords (JSON) and label, each None when absent."""

# KEYS: the item hashes. Per hash: its keywords and label (nil when absent), 1 if it exists.
_READ = """
local out = {}
for i = 1, #KEYS do
  local stored = redis.call('hmget', KEYS[i], 'keywords', 'key')
  out[i] = {stored[1], stored[2], redis.call('exists', KEYS[i])}
end
return out
"""

# KEYS: every key the batch writes, then the lease's when fenced. ARGV: the owner the lease
# may name ("" for no fence); how many hashes are checked; per hash its name and the keywords
# and label `_READ` found ("" for none); then the commands: name, how many arguments, the
# arguments. `delif` takes pairs (label key, id): the label goes only while it names that
# item. Returns 0, having written nothing, when a hash changed since it was read, and the
# lease's holder when another owner holds it.
_APPLY = """
if ARGV[1] ~= '' then
  local holder = redis.call('get', KEYS[#KEYS])
  if holder and holder ~= ARGV[1] then return holder end
end
local at = 3
for _ = 1, tonumber(ARGV[2]) do
  local stored = redis.call('hmget', ARGV[at], 'keywords', 'key')
  if (stored[1] or '') ~= ARGV[at + 1] or (stored[2] or '') ~= ARGV[at + 2] then
    return 0
  end
  at = at + 3
end
while at <= #ARGV do
  local name, count = ARGV[at], tonumber(ARGV[at + 1])
  if name == 'delif' then
    for i = at + 2, at + 1 + count, 2 do
      if redis.call('get', ARGV[i]) == ARGV[i + 1] then redis.call('del', ARGV[i]) end
    end
  elseif count > 0 then
    redis.call(name, unpack(ARGV, at + 2, at + 1 + count))
  end
  at = at + 2 + count
end
return 1
"""


class BatchScripts:
    """The two scripts, registered once per client."""

    def __init__(self, client: redis.Redis) -> None:
        self._read = client.register_script(_READ)
        self._apply = client.register_script(_APPLY)

    def read(self, item_keys: Sequence[str]) -> tuple[list[Stored], list[int]]:
        """What each item holds now, and whether it exists."""
        replies = cast(list[list["str | int | None"]], self._read(keys=list(item_keys)))
        olds = [cast(Stored, reply[:2]) for reply in replies]
        return olds, [int(reply[2] or 0) for reply in replies]

    def apply(
        self,
        batch: Batch,
        item_keys: Sequence[str],
        olds: Sequence[Stored],
        fence: tuple[str, str] | None = None,
    ) -> bool:
        """Write `batch`, planned from `olds`; False when an item changed since (nothing
        written: read again and plan again). `fence` (the lease's key, its owner): nothing
        is written while another owner holds the lease (FencedOut)."""
        checks: list[str] = []
        for name, old in zip(item_keys, olds, strict=True):
            checks += [name, old[0] or "", old[1] or ""]
        owner = fence[1] if fence is not None else ""
        args: list[str | int | float] = [
            owner,
            len(item_keys),
            *checks,
            *batch.commands(item_keys),
        ]
        keys = batch.key_names(item_keys) + ([fence[0]] if fence is not None else [])
        reply = self._apply(keys=keys, args=args)
        if isinstance(reply, str):  # every client decodes replies (redisio.connection)
            raise FencedOut(f"the lease is {reply}'s, not {owner}'s")
        return bool(reply)


class Batch:
    """The commands of one batch, grouped by key: one SREM or SADD per keyword set, one ZREM
    and ZADD per layer, one DEL for the items, one HSET per item and one SET per label.
    Every put and removal of the batch touches the same few common-word sets: a command per
    item and word was most of a batch's work (about 50 an added memory), for the same
    effect."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.gone_labels: list[tuple[str, str]] = []  # label keys and the item they may name
        self.labels: dict[str, str] = {}
        self.hashes: list[tuple[str, dict[str, str]]] = []
        self.layer_del: dict[str, list[str]] = {layer: [] for layer in LAYERS}
        self.layer_add: dict[str, dict[str, float]] = {layer: {} for layer in LAYERS}
        self.term_del: dict[str, list[str]] = {}
        self.term_add: dict[str, list[str]] = {}

    def plan(
        self, puts: Sequence[HotItem], removals: Sequence[str], olds: Sequence[Stored]
    ) -> Batch:
        keys = self.keys
        for item, old in zip(puts, olds, strict=False):
            new_terms = {keys.kw(t) for t in item.keywords if t}
            for term_key in {keys.kw(t) for t in stored_keywords(old[0]) if t} - new_terms:
                self.term_del.setdefault(term_key, []).append(item.id)
            old_label = old[1]
            if old_label and old_label != item.key:
                self.gone_labels.append((keys.key(old_label), item.id))
            self.hashes.append((keys.item(item.id), item.to_hash()))
            for layer in LAYERS:
                if layer != item.layer:
                    self.layer_del[layer].append(item.id)
            self.layer_add[item.layer][item.id] = float(item.score)
            for term_key in new_terms:
                self.term_add.setdefault(term_key, []).append(item.id)
            if item.key:
                self.labels[keys.key(item.key)] = item.id
        for item_id, old in zip(removals, olds[len(puts) :], strict=True):
            for layer in LAYERS:
                self.layer_del[layer].append(item_id)
            for term_key in {keys.kw(t) for t in stored_keywords(old[0]) if t}:
                self.term_del.setdefault(term_key, []).append(item_id)
            label = old[1]
            if label:
                self.gone_labels.append((keys.key(label), item_id))
        return self

    def commands(self, item_keys: Sequence[str]) -> list[str | int | float]:
        """The commands for `_APPLY`. Deletions first: a label one item leaves and another
        takes ends with the other, whatever their order in the batch."""
        out: list[str | int | float] = ["del", len(item_keys), *item_keys]
        gone = [(k, i) for k, i in self.gone_labels if k not in self.labels]
        out += ["delif", 2 * len(gone), *(part for pair in gone for part in pair)]
        for layer, ids in self.layer_del.items():
            if ids:
                out += ["zrem", 1 + len(ids), self.keys.layer(layer), *ids]
        for term_key in sorted(self.term_del):
            ids = self.term_del[term_key]
            out += ["srem", 1 + len(ids), term_key, *ids]
        for name, fields in self.hashes:
            out += ["hset", 1 + 2 * len(fields), name]
            for pair in fields.items():
                out += pair
        for layer, scores in self.layer_add.items():
            if scores:
                out += ["zadd", 1 + 2 * len(scores), self.keys.layer(layer)]
                for item_id, score in scores.items():
                    out += (score, item_id)
        for term_key in sorted(self.term_add):
            ids = self.term_add[term_key]
            out += ["sadd", 1 + len(ids), term_key, *ids]
        for name, item_id in self.labels.items():  # SET: the daemon's ACL has no MSET
            out += ["set", 2, name, item_id]
        return out

    def key_names(self, item_keys: Sequence[str]) -> list[str]:
        """Every key `commands` writes or reads."""
        found = dict.fromkeys(item_keys)
        found.update(dict.fromkeys(k for k, _ in self.gone_labels))
        found.update(dict.fromkeys(self.keys.layer(layer) for layer in LAYERS))
        found.update(dict.fromkeys(self.term_del))
        found.update(dict.fromkeys(self.term_add))
        found.update(dict.fromkeys(self.labels))
        return list(found)


def stored_keywords(raw: str | None) -> list[str]:
    """Keywords of a stored hash (JSON list); anything unreadable counts as none."""
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []
