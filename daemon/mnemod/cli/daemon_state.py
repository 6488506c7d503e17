"""What a namespace's daemon says of itself in Redis, for `mnemod status` and `mnemod doctor`.

A module of its own, imported once a command has found a Redis to ask: redis and the
modules that read its keys are 0.13 s of CPU to import, which `status` without a running
daemon does not pay.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import redis

from mnemod.cli.context import Context
from mnemod.cli.ops import DEAD_LETTER_WARN, PENDING_WARN, Check
from mnemod.cli.remote import FRESH, heartbeat_age, is_running, redis_url
from mnemod.config import redact_url
from mnemod.errors import MnemodError
from mnemod.processes import describe_owner, owner_is_gone
from mnemod.redisio.change_feed import ChangeFeed
from mnemod.redisio.connection import check_version, connect
from mnemod.redisio.dead_letters import dead_letter_count
from mnemod.redisio.hot_layer import HotLayer
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import lease_holder
from mnemod.redisio.socket_path import socket_path_for
from mnemod.redisio.status_hash import read_status
from mnemod.redisio.streams import EventStream


def daemon_status(ctx: Context, namespace: str, client: redis.Redis) -> dict[str, Any]:
    """`status`'s fields of a namespace that Redis tells: the daemon, its leader, the hot
    layer, replication, the event backlog, and the status hash's fields."""
    info: dict[str, Any] = {}
    keys = Keys(ctx.config.redis.prefix, namespace)
    status = read_status(client, keys)
    running = is_running(status)
    info["daemon"] = (
        "running" if running else f"not running (last heartbeat {status.get('heartbeat', 'never')})"
    )
    info["leader"] = lease_holder(client, keys)
    info["led_by"] = describe_owner(info["leader"]) if info["leader"] else None
    hot = HotLayer(client, keys)
    info["hot"] = hot.count("l3")
    info["l1"] = hot.count("l1")
    info["l2"] = hot.count("l2")
    info.update(_replication(client, keys))
    info["pending"] = EventStream(client, keys).pending()
    info["dead_letters"] = dead_letter_count(client, keys)
    for field in ("pid", "version", "started_at", "heartbeat", "last_event_id"):
        info[field] = status.get(field)
    for field in ("counts", "jobs", "l1_problems", "waiting"):
        info[field] = json.loads(status[field]) if status.get(field) else None
    return info


def _replication(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """The namespace's committed position and each live follower's: how far it applied,
    how far behind it is, and how long ago it said so."""
    feed = ChangeFeed(client, keys, owner="")
    committed = feed.committed()
    live, _ = feed.followers()
    seq = committed.seq if committed is not None else None
    return {
        "committed_seq": seq,
        "followers": {
            name: {
                "applied": applied,
                "behind": max(0, seq - applied) if seq is not None else None,
                "seen_s_ago": ago,
            }
            for name, (applied, ago) in sorted(live.items())
        },
    }


def daemon_checks(ctx: Context, namespace: str, client: redis.Redis) -> list[Check]:
    """`doctor`'s checks of the namespace's daemon: heartbeat, derived state, leader,
    dead letters, backlog."""
    keys = Keys(ctx.config.redis.prefix, namespace)
    status = read_status(client, keys)
    checks = [_check_heartbeat(namespace, status)]
    waiting = json.loads(status["waiting"]) if status.get("waiting") else {}
    detail = "; ".join(f"{name}: {why}" for name, why in sorted(waiting.items()))
    checks.append(Check("derived", "warn" if waiting else "ok", detail or "up to date"))
    holder = lease_holder(client, keys)
    if holder is None:
        checks.append(Check("leader", "fail", f"no daemon holds namespace {namespace!r}"))
    else:
        checks.append(Check("leader", "ok", str(holder)))
    dead = dead_letter_count(client, keys)
    checks.append(
        Check(
            "dead-letter",
            "warn" if dead >= DEAD_LETTER_WARN else "ok",
            f"{dead} event(s) in {keys.dead}",
        )
    )
    pending = EventStream(client, keys).pending()
    checks.append(
        Check("backlog", "warn" if pending >= PENDING_WARN else "ok", f"{pending} pending event(s)")
    )
    return checks


def check_redis(ctx: Context) -> tuple[redis.Redis | None, Check]:
    url = redis_url(ctx)
    if not ctx.config.redis.url and not socket_path_for(ctx.data_dir / "redis").exists():
        detail = f"{redact_url(url)}: unreachable (the embedded server is not running)"
        return None, Check("redis", "fail", detail)
    client = connect(url, socket_timeout=2.0)
    try:
        version = check_version(client, url)  # its message names the cause (NOPERM, TLS...)
    except MnemodError as exc:
        client.close()
        return None, Check("redis", "fail", str(exc))
    return client, Check("redis", "ok", f"{redact_url(url)}: Redis {'.'.join(map(str, version))}")


def _check_heartbeat(namespace: str, status: dict[str, str]) -> Check:
    age = heartbeat_age(status)
    if age is None:
        return Check("daemon", "fail", f"no daemon has run for namespace {namespace!r}")
    pid = status.get("pid", "")
    if owner_is_gone(status.get("owner", "")):
        return Check("daemon", "fail", f"daemon process {pid} is gone (crashed or killed)")
    if age > FRESH or status.get("state") != "running":
        return Check(
            "daemon",
            "fail",
            f"heartbeat {int(age.total_seconds())} s old, state {status.get('state')}",
        )
    return Check("daemon", "ok", f"pid {status.get('pid')}, heartbeat {_seconds(age)} ago")


def _seconds(age: timedelta) -> str:
    return f"{age.total_seconds():.1f} s"
