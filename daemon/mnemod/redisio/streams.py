"""The events and rpc streams of one namespace: appending to them (agents), reading and
trimming them (the daemon's consumer group, whose acknowledgements of events go with a
batch's hot-layer write: redisio.changes), and what is still pending (the CLI, the hook,
`wait_applied`). The writer decides when; this speaks Redis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis

from mnemod.redisio.connection import is_cluster
from mnemod.redisio.events import stream_id_key
from mnemod.redisio.keys import GROUP, Keys

Batches = list[tuple[str, list[tuple[str, dict[str, str]]]]]
"""What XREADGROUP returns: per stream, its entries as (id, fields)."""


class GroupMissingError(Exception):
    """The consumer group, or the stream read, is gone (NOGROUP, or UNBLOCKED by a FLUSHALL
    or DEL while the read waited): Redis may have lost its data."""


class EventStream:
    """The consumer group `GROUP` over the namespace's events and rpc streams."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    # ---- agents' side ------------------------------------------------------------------
    def append(self, fields: Mapping[str, str]) -> str:
        """XADD an event; its stream id."""
        return cast(str, self.client.xadd(self.keys.events, cast(Any, fields)))

    def append_replicated(
        self, fields: Mapping[str, str], replicas: int, timeout_ms: int
    ) -> tuple[str, int]:
        """XADD an event, then WAIT until `replicas` replicas have it or `timeout_ms`
        passed: its stream id and how many replicas confirmed it. Both go on one
        connection (WAIT counts that connection's writes), on a cluster the one of the
        node serving the namespace: a MOVED there (the slot moved) refreshes the client's
        slots and tries again, which is safe as the refused XADD did not run."""
        for attempt in range(3):
            node = self.client
            if is_cluster(node):
                found = node.get_node_from_key(self.keys.events)  # type: ignore[attr-defined]
                node = found.redis_connection
            pipe = node.pipeline(transaction=False)
            pipe.xadd(self.keys.events, cast(Any, fields))
            pipe.wait(replicas, timeout_ms)
            try:
                event_id, confirmed = pipe.execute()
            except redis.exceptions.AskError:
                if attempt == 2 or not is_cluster(self.client):
                    raise
                self.client.exists(self.keys.events)  # follows the MOVED, learns the slot
                continue
            return str(event_id), int(confirmed)
        raise AssertionError("unreachable")

    def request(self, fields: Mapping[str, str]) -> str:
        """XADD a request to the rpc stream; its stream id."""
        return cast(str, self.client.xadd(self.keys.rpc, cast(Any, fields)))

    # ---- the daemon's side -------------------------------------------------------------
    def ensure_groups(self) -> None:
        """Create the consumer groups (from the stream's start: events written before the
        first daemon ran are applied too)."""
        for stream in (self.keys.events, self.keys.rpc):
            try:
                self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def read(
        self, consumer: str, start: Mapping[str, str], count: int, block: int | None
    ) -> Batches:
        """XREADGROUP from each stream of `start` (its id, or `>` for new entries), waiting
        up to `block` ms (None: not at all). GroupMissingError when the group is gone."""
        return self.read_after(consumer, start, count, block, None)[0]

    def read_after(
        self,
        consumer: str,
        start: Mapping[str, str],
        count: int,
        block: int | None,
        after: str | None,
    ) -> tuple[Batches, str | None]:
        """`read`, and with `after` (an event id) in the same round trip: the first event
        after it in `consumer`'s pending list once read (None when none is). Unless it is
        the read's first, another process under that name read it meanwhile. The XPENDING
        waits behind the blocked read on the connection, so it sees what the read took."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xreadgroup(GROUP, consumer, dict(start), count=count, block=block)  # type: ignore[arg-type]
        if after is not None:
            pipe.xpending_range(
                self.keys.events, GROUP, min=f"({after}", max="+", count=1, consumername=consumer
            )
        replies = pipe.execute(raise_on_error=False)  # a raised one is prefixed by redis-py
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                if not str(reply).startswith(("NOGROUP", "UNBLOCKED")):
                    raise reply
                raise GroupMissingError(str(reply)[:80]) from reply
            if isinstance(reply, Exception):  # a cluster pipeline's node lost mid-failover
                raise reply
        batches = cast(Batches, replies[0] or [])
        found = cast(list[dict[str, Any]], replies[1]) if after is not None else []
        return batches, (str(found[0]["message_id"]) if found else None)

    def pending(self) -> int:
        """Events delivered to the group and not acknowledged yet (0 with no group)."""
        try:
            summary = self.client.xpending(self.keys.events, GROUP)
        except redis.ResponseError:
            return 0
        return int(summary.get("pending", 0)) if summary else 0

    def trim(self, last_applied: str | None, dead_max_len: int) -> int:
        """Trim acknowledged events (below the oldest pending one, at most up to the last
        applied id) and answered requests (acknowledged as soon as they are answered), and
        cap the dead letters; returns how many entries went."""
        client, keys = self.client, self.keys
        trimmed = 0
        for stream, floor in ((keys.events, last_applied), (keys.rpc, None)):
            summary = client.xpending(stream, GROUP)
            oldest = summary.get("min") if summary and summary.get("pending") else None
            minid = oldest or floor
            if stream == keys.rpc and oldest is None:
                minid = client.xinfo_stream(stream).get("last-generated-id")
            if minid:
                trimmed += int(client.xtrim(stream, minid=minid, approximate=False))
        trimmed += int(client.xtrim(keys.dead, maxlen=dead_max_len, approximate=True))
        return trimmed

    def claim_stale_requests(
        self, consumer: str, min_idle_ms: int, count: int = 100
    ) -> list[tuple[str, dict[str, str]]]:
        """Requests delivered to a consumer of the group at least `min_idle_ms` ago and
        never answered (its daemon died), claimed for `consumer` to answer: every daemon of
        the namespace reads the rpc stream, so none waits for the one that died."""
        try:
            reply = self.client.xautoclaim(
                self.keys.rpc, GROUP, consumer, min_idle_ms, start_id="0-0", count=count
            )
        except redis.ResponseError as exc:
            if str(exc).startswith("NOGROUP"):
                return []
            raise
        messages = cast(list[tuple[str, dict[str, str] | None]], reply[1] if reply else [])
        return [(message_id, fields) for message_id, fields in messages if fields is not None]

    # ---- what is still waiting -----------------------------------------------------------
    def acknowledged(self, event_id: str) -> bool:
        """The group read `event_id` and acknowledged it (False with no stream or group)."""
        try:
            groups = self.client.xinfo_groups(self.keys.events)
        except redis.ResponseError:
            return False  # no stream or no group yet: the daemon never ran
        for group in groups:
            if group.get("name") != GROUP:
                continue
            last = str(group.get("last-delivered-id") or "0-0")
            if stream_id_key(last) < stream_id_key(event_id):
                return False
            pending = self.client.xpending_range(
                self.keys.events, GROUP, min=event_id, max=event_id, count=1
            )
            return not pending
        return False

    def unanswered(self, window_ms: int, behind_ms: int) -> tuple[int, list[str]]:
        """Redis's time (ms) and the requests of the last `window_ms` older than
        `behind_ms` the group has not acknowledged: unread, or read and pending."""
        rpc = self.keys.rpc
        seconds, micros = self.client.time()
        now_ms = seconds * 1000 + micros // 1000
        low, high = now_ms - window_ms, now_ms - behind_ms
        pending = self.client.xpending_range(rpc, GROUP, str(low), str(high), 1)
        waiting = [str(p["message_id"]) for p in pending]
        groups = self.client.xinfo_groups(rpc)
        delivered = next((g["last-delivered-id"] for g in groups if g["name"] == GROUP), None)
        if delivered is not None:
            start = f"({delivered}" if stream_id_key(str(delivered))[0] >= low else str(low)
            unread = cast(list[tuple[str, Any]], self.client.xrange(rpc, start, str(high), 1))
            waiting += [entry_id for entry_id, _ in unread]
        return now_ms, waiting
