"""Every Redis key name mnemod uses, built in this one module (docs/design.md §3).

All keys of namespace `ns` start with `<prefix>:{ns}:`; the `{ns}` hash tag keeps one
namespace in one Redis Cluster slot, so the hot layer's MULTI/EXEC and Lua scripts stay
legal on a cluster. docs/redis-keys.md documents the same table; a test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from mnemod.errors import InvalidInputError

GROUP = "mnemod"
"""Consumer group that reads the events and rpc streams."""

LAYER_SETS = {"l1": "l1", "l2": "l2", "l3": "hot"}
"""Which sorted set lists the ids of each layer's hot items."""

_GLOB_SPECIAL = "\\*?[]"


@dataclass(frozen=True)
class Keys:
    """Key names for one namespace: `Keys("mnemod", "default").item("01J…")`."""

    prefix: str = "mnemod"
    namespace: str = "default"

    def __post_init__(self) -> None:
        if not self.prefix or ":" in self.prefix:
            raise InvalidInputError("redis.prefix", "must be non-empty without ':'")
        if not self.namespace or any(c in self.namespace for c in "{}:"):
            raise InvalidInputError("namespace", "must be non-empty without '{', '}' or ':'")

    @cached_property
    def base(self) -> str:
        """`mnemod:{ns}` — the start of every key of this namespace (made once: the hot
        layer names a dozen keys an item)."""
        return f"{self.prefix}:{{{self.namespace}}}"

    # -- streams and channels agents talk through -------------------------------------
    @property
    def events(self) -> str:
        return f"{self.base}:events"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def rpc(self) -> str:
        return f"{self.base}:rpc"

    @property
    def changes(self) -> str:
        return f"{self.base}:changes"

    @property
    def status(self) -> str:
        return f"{self.base}:status"

    # -- the hot layer -------------------------------------------------------------------
    def item(self, item_id: str) -> str:
        return f"{self.base}:m:{item_id}"

    @property
    def hot(self) -> str:
        return f"{self.base}:hot"

    @property
    def l1(self) -> str:
        return f"{self.base}:l1"

    @property
    def l2(self) -> str:
        return f"{self.base}:l2"

    def layer(self, layer: str) -> str:
        """Sorted set of a layer's ids: l1 → `l1`, l2 → `l2`, l3 → `hot`."""
        try:
            return f"{self.base}:{LAYER_SETS[layer]}"
        except KeyError:
            raise InvalidInputError("layer", f"must be l1, l2 or l3, got {layer!r}") from None

    def key(self, label: str) -> str:
        """String holding the id of the item whose `key` is `label`."""
        return f"{self.base}:key:{label}"

    def reply(self, token: str) -> str:
        """Suggested `reply_to` list for an rpc request (the agent picks a unique token)."""
        return f"{self.base}:reply:{token}"

    # -- daemon bookkeeping --------------------------------------------------------------
    @property
    def lease(self) -> str:
        """Leader lease: one daemon per namespace applies events."""
        return f"{self.base}:lease"

    # -- followers (redisio.change_feed) ---------------------------------------------
    @property
    def feed(self) -> str:
        """The leader's change-log records, one stream entry per record, id `<seq>-0`."""
        return f"{self.base}:feed"

    @property
    def feed_staged(self) -> str:
        """The pieces of a long record a leader is publishing, before the script that adds
        it to the feed (redisio.feed_pieces)."""
        return f"{self.base}:feed:staged"

    @property
    def committed(self) -> str:
        """The namespace's committed position: the last published record's seq and CRC."""
        return f"{self.base}:committed"

    @property
    def checkpoint(self) -> str:
        """The leader's last checkpoint (index.json, compressed) a follower starts from."""
        return f"{self.base}:checkpoint"

    @property
    def checkpoint_staged(self) -> str:
        """The pieces of a long checkpoint a leader is publishing, before the script that
        makes it the checkpoint (redisio.feed_pieces)."""
        return f"{self.base}:checkpoint:staged"

    @property
    def followers(self) -> str:
        """Each follower's applied seq and when it said so (the leader trims the feed)."""
        return f"{self.base}:followers"

    @property
    def standby(self) -> str:
        """Sorted set of the daemons standing by for this namespace, each until when
        (redisio.presence): whom its leader may hand it over to."""
        return f"{self.base}:standby"

    def sessions(self, session: str) -> str:
        """Set of `once` item ids already injected in `session` (expires with the session)."""
        return f"{self.base}:session:{session}"

    @property
    def marker(self) -> str:
        """Written after a rebuild; its absence means Redis lost its data."""
        return f"{self.base}:epoch"

    # -- patterns for SCAN ---------------------------------------------------------------
    @property
    def item_pattern(self) -> str:
        return f"{_glob_escape(self.base)}:m:*"

    @property
    def kw_pattern(self) -> str:
        """The keyword sets of an earlier hot-layer layout, which a rebuild deletes."""
        return f"{_glob_escape(self.base)}:kw:*"

    @property
    def key_pattern(self) -> str:
        return f"{_glob_escape(self.base)}:key:*"

    def item_id(self, item_key: str) -> str:
        """Inverse of `item()`: the id inside a `m:<id>` key name."""
        head = f"{self.base}:m:"
        if not item_key.startswith(head):
            raise InvalidInputError("key", f"not an item key of this namespace: {item_key!r}")
        return item_key[len(head) :]


def daemons_key(prefix: str) -> str:
    """Sorted set of the live daemons of every namespace under `prefix`, each until when
    (redisio.presence): how many share out the leadership."""
    return f"{prefix}:daemons"


def events_pattern(prefix: str) -> str:
    """SCAN MATCH pattern of every namespace's events stream (finding new namespaces)."""
    return f"{_glob_escape(prefix)}:{{*}}:events"


def namespace_of_events(prefix: str, key: str) -> str | None:
    """The namespace whose events stream `key` is, or None when it is no such key."""
    head, tail = f"{prefix}:{{", "}:events"
    if not (key.startswith(head) and key.endswith(tail)):
        return None
    namespace = key[len(head) : -len(tail)]
    return namespace if namespace and not any(c in namespace for c in "{}:") else None


def _glob_escape(text: str) -> str:
    """Escape glob characters so a namespace is matched literally by SCAN MATCH."""
    return "".join(f"\\{c}" if c in _GLOB_SPECIAL else c for c in text)
