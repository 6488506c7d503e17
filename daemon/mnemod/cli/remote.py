"""Talking to a running daemon from the CLI: find it, send events, ask for a resolve.

While a daemon owns a namespace, its files are not the CLI's to write: mutating commands
go through the event stream, exactly as an agent's would (through `mnemod.client`).

redis and the client load when a command first talks to Redis: reading the files alone
(`stats`, `list`, `get`) does not pay for importing them (0.13 s of CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mnemod.cli.context import Context
from mnemod.cli.progress import phase
from mnemod.clock import parse_time, utcnow
from mnemod.config import parse_schedule
from mnemod.errors import LockedError
from mnemod.redisio.socket_path import socket_path_for

if TYPE_CHECKING:
    import redis

    from mnemod.client import Client
    from mnemod.store.engine import Engine

FRESH = timedelta(seconds=30)  # a heartbeat older than this means no daemon is running
EVENT_WAIT_SECONDS = 10.0


def redis_url(ctx: Context) -> str:
    """The configured URL, or the embedded server's socket in the data folder."""
    return ctx.config.redis.url or f"unix://{socket_path_for(ctx.data_dir / 'redis')}"


def connect_quietly(ctx: Context, socket_timeout: float = 2.0) -> redis.Redis | None:
    """A client of the daemon's Redis, or None when nothing answers there."""
    if not ctx.config.redis.url and not socket_path_for(ctx.data_dir / "redis").exists():
        return None  # the embedded server is not running
    import redis

    from mnemod.redisio.connection import connect

    client = connect(redis_url(ctx), socket_timeout=socket_timeout)
    try:
        client.ping()
    except redis.RedisError:
        client.close()
        return None
    return client


def heartbeat_age(status: dict[str, str], now: datetime | None = None) -> timedelta | None:
    beat = status.get("heartbeat")
    return (now or utcnow()) - parse_time(beat) if beat else None


def is_running(status: dict[str, str]) -> bool:
    age = heartbeat_age(status)
    return age is not None and age <= FRESH and status.get("state") == "running"


def running_daemon(ctx: Context, socket_timeout: float = 5.0) -> Client | None:
    """A client of the namespace's daemon if its heartbeat is fresh, else None."""
    probe = connect_quietly(ctx, min(2.0, socket_timeout))
    if probe is None:
        return None
    probe.close()
    from mnemod.client import Client

    client = Client(
        redis_url(ctx), ctx.namespace, ctx.config.redis.prefix, socket_timeout=socket_timeout
    )
    if is_running(client.status()):
        return client
    client.close()
    return None


def mutate(
    ctx: Context,
    op: str,
    data: dict[str, Any],
    local: Callable[[Engine], tuple[Any, str]],
) -> None:
    """Apply a change on the files, or, while a daemon owns the namespace, send it as an
    event and wait until the daemon has made it durable."""
    try:
        with ctx.engine(write=True) as engine:
            payload, text = local(engine)
        ctx.emit(payload, text)
        return
    except LockedError:
        client = running_daemon(ctx)
        if client is None:
            raise
    kind, interval = parse_schedule(ctx.config.schedule.snapshot)
    snapshot_every = interval.total_seconds() if kind == "interval" else 0.0
    with client, phase(f"waiting for the running daemon to apply {op}"):
        # the event is durable with the daemon's next snapshot
        event_id = client.send(op, data, wait=EVENT_WAIT_SECONDS + snapshot_every, by="cli")
        item = client.get(str(data["id"])) if data.get("id") else None
    payload = {"via": "daemon", "op": op, "event_id": event_id, "id": data.get("id"), "item": item}
    ctx.emit(
        payload,
        f"applied by the running daemon: {op} {data.get('id', '')} (event {event_id})".rstrip(),
    )
