"""Telling subscribers what changed: one message per changed entry on the namespace's
`changes` channel (`{"op": "add", "id": "01J…"}`), published after the hot layer took it."""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis

from mnemod.redisio.keys import Keys


def publish_changes(client: redis.Redis, keys: Keys, changes: Mapping[str, str]) -> None:
    """PUBLISH each entry id's last op, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for entry_id, op in changes.items():
        pipe.publish(keys.changes, _dumps({"op": op, "id": entry_id}))
    pipe.execute()


def _dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
