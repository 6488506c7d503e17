"""Telling subscribers what changed: one message per changed entry on the namespace's
`changes` channel (`{"op": "add", "id": "01J…"}`), published after the hot layer took it.
On a Redis Cluster, where a PUBLISH reaches the subscribers of every node, they go out
pipelined to the node of the namespace's slot (a cluster pipeline refuses PUBLISH)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis

from mnemod.redisio.connection import is_cluster
from mnemod.redisio.keys import Keys


def publish_changes(client: redis.Redis, keys: Keys, changes: Mapping[str, str]) -> None:
    """PUBLISH each entry id's last op, in one round trip."""
    if is_cluster(client):
        client = client.get_node_from_key(keys.changes).redis_connection  # type: ignore[attr-defined]
    pipe = client.pipeline(transaction=False)
    for entry_id, op in changes.items():
        pipe.publish(keys.changes, _dumps({"op": op, "id": entry_id}))
    pipe.execute()


def _dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
