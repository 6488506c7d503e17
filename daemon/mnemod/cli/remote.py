"""Talking to a running daemon from the CLI: find it, send events, ask for a resolve.

While a daemon owns a namespace, its files are not the CLI's to write: mutating commands
go through the event stream, exactly as an agent's would.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import redis

from mnemod.cli.context import Context
from mnemod.clock import parse_time, utcnow
from mnemod.errors import LockedError, MnemodError, RedisUnavailableError
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import socket_path_for
from mnemod.redisio.events import stream_id_key
from mnemod.redisio.keys import GROUP, Keys
from mnemod.runtime.engine import Engine

FRESH = timedelta(seconds=30)  # a heartbeat older than this means no daemon is running


def redis_url(ctx: Context) -> str:
    """The configured URL, or the embedded server's socket in the data folder."""
    return ctx.config.redis.url or f"unix://{socket_path_for(ctx.data_dir / 'redis')}"


@dataclass
class DaemonLink:
    client: redis.Redis
    keys: Keys
    status: dict[str, str]

    @property
    def heartbeat_age(self) -> timedelta | None:
        beat = self.status.get("heartbeat")
        return utcnow() - parse_time(beat) if beat else None


def connect_quietly(ctx: Context) -> redis.Redis | None:
    url = redis_url(ctx)
    if url.startswith("unix://") and not Path(url[len("unix://") :]).exists():
        return None
    client = connect(url, socket_timeout=2.0)
    try:
        client.ping()
    except redis.RedisError:
        client.close()
        return None
    return client


def running_daemon(ctx: Context) -> DaemonLink | None:
    """The namespace's daemon if its heartbeat is fresh, else None."""
    client = connect_quietly(ctx)
    if client is None:
        return None
    keys = Keys(ctx.config.redis.prefix, ctx.namespace)
    status = cast(dict[str, str], client.hgetall(keys.status))
    link = DaemonLink(client, keys, status)
    age = link.heartbeat_age
    if not status or age is None or age > FRESH or status.get("state") == "stopping":
        client.close()
        return None
    return link


def send_event(link: DaemonLink, op: str, data: dict[str, Any], wait: float = 10.0) -> str:
    """XADD an event (by=cli) and wait until the daemon has applied it and made it durable
    (acknowledged); returns the event id."""
    fields = {"op": op, "data": json.dumps(data, ensure_ascii=False), "by": "cli"}
    event_id = cast(str, link.client.xadd(link.keys.events, fields))  # type: ignore[arg-type]
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _delivered(link, event_id):
            return event_id
        time.sleep(0.05)
    raise MnemodError(
        f"the daemon has not read event {event_id} within {wait:g} s; it stays queued"
    )


def _delivered(link: DaemonLink, event_id: str) -> bool:
    for group in link.client.xinfo_groups(link.keys.events):
        if group.get("name") == GROUP:
            last = group.get("last-delivered-id") or "0-0"
            if stream_id_key(last) < stream_id_key(event_id):
                return False
            pending = link.client.xpending_range(
                link.keys.events, GROUP, min=event_id, max=event_id, count=1
            )
            return not pending
    return False


def remote_resolve(
    link: DaemonLink,
    prompt: str,
    budget: int | None,
    session: str | None,
    trace: bool,
    timeout: float = 10.0,
) -> dict[str, Any]:
    reply_to = f"mnemod-reply:{os.getpid()}:{uuid.uuid4().hex}"
    fields = {"op": "resolve", "prompt": prompt, "reply_to": reply_to}
    if budget is not None:
        fields["budget"] = str(budget)
    if session:
        fields["session"] = session
    if trace:
        fields["trace"] = "1"
    link.client.xadd(link.keys.rpc, fields)  # type: ignore[arg-type]
    answer = link.client.blpop([reply_to], timeout=timeout)
    if answer is None:
        raise RedisUnavailableError(f"no answer from the daemon within {timeout:g} s")
    payload: dict[str, Any] = json.loads(cast(tuple[str, str], answer)[1])
    return payload


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
        link = running_daemon(ctx)
        if link is None:
            raise
    try:
        event_id = send_event(link, op, data)
        item = link.client.hgetall(link.keys.item(str(data["id"]))) if data.get("id") else {}
    finally:
        link.client.close()
    payload = {
        "via": "daemon",
        "op": op,
        "event_id": event_id,
        "id": data.get("id"),
        "item": item or None,
    }
    ctx.emit(
        payload,
        f"applied by the running daemon: {op} {data.get('id', '')} (event {event_id})".rstrip(),
    )
