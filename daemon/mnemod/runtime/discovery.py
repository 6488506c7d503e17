"""Finding the namespaces a daemon serving `*` takes up.

A namespace is found when its folder is in the data folder (it has files: `mnemod add`
without a daemon, a restored backup) or when Redis holds its events stream (an agent
started writing to it: its first XADD creates `<prefix>:{ns}:events`). The daemon looks
at start-up and then every `daemon.discover_interval`; a namespace found is served from
then on, until the daemon stops. SCAN walks the keys a few hundred at a time, so a look
costs the server little; keys whose namespace is not a valid name are passed over.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import redis

from mnemod.redisio.keys import events_pattern, namespace_of_events
from mnemod.store.paths import NAMESPACE_PATTERN, list_namespaces

EVERY = "*"
"""In `daemon.namespaces` or `--namespace`: every namespace found."""

SCAN_COUNT = 500


def found_namespaces(client: redis.Redis, prefix: str, data_dir: Path) -> list[str]:
    """Every namespace in the data folder or with an events stream, sorted."""
    found = set(list_namespaces(data_dir))
    for key in client.scan_iter(match=events_pattern(prefix), count=SCAN_COUNT, _type="stream"):
        namespace = namespace_of_events(prefix, cast(str, key))
        if namespace is not None and NAMESPACE_PATTERN.fullmatch(namespace):
            found.add(namespace)
    return sorted(found)
