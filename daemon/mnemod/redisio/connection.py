"""Connecting to Redis, checking it is new enough, and backing off while it is away.

One sync redis-py client per component (the stack is thread-based), built here for every
URL form (docs/operations.md): one server (`redis://`, `rediss://`, `unix://`), a Redis
Cluster (`redis+cluster://host:port[,host:port…]`) or a master found through Sentinel
(`redis+sentinel://host:port[,host:port…]/service[/db]`), `rediss+…` for TLS. URLs may carry
an ACL user and password; they only ever reach logs and error messages through `redact_url`.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode

import redis
import structlog
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from mnemod.config import URL_SCHEMES, redact_url
from mnemod.domain.validation import check_unicode
from mnemod.errors import InvalidInputError, RedisUnavailableError

log = structlog.get_logger("mnemod.redis")

MIN_VERSION = (6, 2, 0)
"""XAUTOCLAIM (reclaiming events a dead daemon had read) arrived in Redis 6.2."""

SENTINEL_PORT = 26379
CLUSTER_PORT = 6379
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
"""Query options of a `redis+sentinel://` URL meant for the sentinels, not the master."""

FAILOVER_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ClusterError,  # CLUSTERDOWN, a master's slots not served yet
    redis.exceptions.AskError,  # MOVED/ASK left after redis-py's own redirections
    redis.exceptions.TryAgainError,  # a multi-key command while its slot migrates
    redis.exceptions.ReadOnlyError,  # a master demoted under a connection
    redis.exceptions.RedisClusterException,  # no node of the cluster answers
)
"""What a failover or a migrating slot looks like to a client: waited out like a lost
connection, the command tried again once the cluster or the sentinels settle."""

OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    *FAILOVER_ERRORS,
)
"""Redis away for now (a lost connection, a timeout, a failover): wait and try again."""

REDIS_FAILURES: tuple[type[BaseException], ...] = (
    redis.RedisError,
    redis.exceptions.RedisClusterException,
)
"""Anything a Redis command can fail with (the cluster client's own errors are not
RedisErrors)."""
MAX_ERROR_CHARS = 300

TEXT_ERRORS = "surrogateescape"
"""How replies are decoded. Bytes an agent sent that are not UTF-8 become lone surrogates
instead of failing the whole read (the event stays in the stream, so the read would fail
again at every restart), and are encoded back to the same bytes when written (a dead letter
keeps them as sent). Whatever reads agents' fields rejects such text with `check_text`."""


def connect(
    url: str, socket_timeout: float | timedelta = 5.0, retries: int = 0, name: str | None = None
) -> redis.Redis:
    """A client for `url` (any form of the module doc, with `user:password@`), decoding
    responses to str, its connections named `name` (CLIENT SETNAME) if given. redis-py
    connects lazily to a server or a sentinel's master: the first command reports an outage.
    A cluster client asks for the cluster's layout at once: RedisUnavailableError when no
    node answers (the daemon waits that out). A RedisCluster is typed as a Redis: both
    speak the same commands, and what differs is asked with `is_cluster`.

    redis-py's own retries are off by default (`retries=0`): a command is never silently
    re-sent (an XADD could land twice) and an outage surfaces at once, to be waited out with
    `Backoff` by the caller, who knows what is safe to repeat. Redirections (MOVED, ASK) are
    followed by the cluster client: the command did not run where it was refused."""
    if not url.startswith(URL_SCHEMES):
        shown = ", ".join(URL_SCHEMES)
        raise InvalidInputError("redis.url", f"must start with {shown}, got {redact_url(url)!r}")
    seconds = (
        socket_timeout.total_seconds() if isinstance(socket_timeout, timedelta) else socket_timeout
    )
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        "health_check_interval": 30,
        "client_name": name,
        "encoding_errors": TEXT_ERRORS,
    }
    try:
        if "+cluster://" in url:
            return _cluster(url, retries, options)
        if "+sentinel://" in url:
            return _sentinel(url, retries, options)
        return redis.Redis.from_url(
            absolute_socket_url(url), retry=Retry(NoBackoff(), retries), **options
        )
    except ValueError as exc:
        # redis-py's message may quote the URL: rebuild it without the password.
        raise InvalidInputError("redis.url", f"cannot use {redact_url(url)!r}") from exc
    except REDIS_FAILURES as exc:  # a cluster none of whose nodes answers
        raise RedisUnavailableError(f"{redact_url(url)}: unreachable ({describe(exc)})") from exc


def _split_hosts(url: str, default_port: int) -> tuple[str, str, list[tuple[str, int]], str]:
    """`redis+x://user:pw@h1:p1,h2/rest` → (`redis`, `user:pw@`, [(h1, p1), (h2, port)],
    `/rest`)."""
    scheme, _, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    if "?" in authority:  # no path: `host:port?option=…`
        authority, _, query = authority.partition("?")
        tail, slash = f"?{query}", ""
    credentials, at, hosts = authority.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon:
            host, port = port, str(default_port)
        if not host or not port.isdigit():
            raise ValueError("each node is host:port")
        nodes.append((host.strip("[]"), int(port)))
    return scheme.partition("+")[0], f"{credentials}{at}", nodes, f"{slash}{tail}"


def _cluster(url: str, retries: int, options: dict[str, Any]) -> redis.Redis:
    """A RedisCluster that starts from every node the URL names."""
    scheme, credentials, nodes, tail = _split_hosts(url, CLUSTER_PORT)
    if tail.partition("?")[0].strip("/") not in ("", "0"):
        raise ValueError("a cluster has only database 0")
    (host, port), others = nodes[0], nodes[1:]
    first = f"{scheme}://{credentials}{host}:{port}{tail}"
    client = RedisCluster(
        url=first,
        startup_nodes=[ClusterNode(h, p) for h, p in others],  # type: ignore[no-untyped-call]
        retry=Retry(NoBackoff(), retries),
        **options,
    )
    return cast(redis.Redis, client)


def _sentinel(url: str, retries: int, options: dict[str, Any]) -> redis.Redis:
    """A client of the master the sentinels name for the URL's service: after a failover
    its connections go to the new master (redis-py asks the sentinels again)."""
    scheme, credentials, nodes, tail = _split_hosts(url, SENTINEL_PORT)
    path, _, query = tail.partition("?")
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise ValueError("a sentinel URL names the master's service: …/service_name[/db]")
    pairs = parse_qsl(query)
    own = {name: value for name, value in pairs if name not in SENTINEL_OPTIONS}
    # parsed as redis-py parses a one-server URL (TLS options, timeouts, the db)
    master: dict[str, Any] = redis.connection.parse_url(  # type: ignore[no-untyped-call]
        f"{scheme}://{credentials}localhost/{db}{'?' if own else ''}{urlencode(own)}"
    )
    tls = master.pop("connection_class", None) is redis.SSLConnection
    master.pop("host", None)
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": options["socket_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
        "decode_responses": True,
        "retry": Retry(NoBackoff(), retries),
    }
    sentinel_kwargs.update({k: v for k, v in master.items() if k.startswith("ssl_")})
    for name, value in pairs:
        if name in SENTINEL_OPTIONS:
            sentinel_kwargs[name.removeprefix("sentinel_")] = value
    if tls:
        sentinel_kwargs["ssl"] = True
    sentinel = Sentinel(nodes, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        service,
        redis_class=redis.Redis,
        retry=Retry(NoBackoff(), retries),
        ssl=tls,
        **{**options, **master},
    )
    return client


def is_cluster(client: redis.Redis) -> bool:
    """Whether `client` talks to a Redis Cluster (`connect` types both alike)."""
    return isinstance(client, RedisCluster)


def replacing_foreign(client: redis.Redis, key: str, write: Callable[[], object]) -> None:
    """`write` to one of mnemod's own keys; if something else had written that key with
    another type of value (WRONGTYPE), the key is deleted and `write` done again: failing
    instead would stop the daemon, and restarting it would fail the same way."""
    try:
        write()
    except redis.ResponseError as exc:
        if not wrong_type(exc):
            raise
        log.warning("redis.foreign_key_replaced", key=key)
        client.delete(key)
        write()


def wrong_type(exc: redis.ResponseError) -> bool:
    """Redis refused a command because a key holds another type of value."""
    return "WRONGTYPE" in str(exc)


def as_sent(fields: Mapping[str, str]) -> dict[bytes, bytes]:
    """Fields encoded back to the bytes they were read from (a dead letter keeps what the
    agent sent): redis-py's hiredis packer encodes text strictly, whatever TEXT_ERRORS says."""
    return {
        name.encode("utf-8", TEXT_ERRORS): value.encode("utf-8", TEXT_ERRORS)
        for name, value in fields.items()
    }


def check_text(fields: Mapping[str, str], where: str) -> None:
    """InvalidInputError naming the first field (by name or value) that is not valid UTF-8
    as it was sent (see TEXT_ERRORS)."""
    for name, value in fields.items():
        try:
            name.encode("utf-8")
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = name.encode("utf-8", "backslashreplace").decode("ascii", "replace")
            check_unicode(f"{shown} (its name)", name, where)
            check_unicode(shown, value, where)


def absolute_socket_url(url: str) -> str:
    """`unix://.mnemod/redis/redis.sock` names a socket relative to the working folder, as
    people write it; redis-py would take `.mnemod` for a host and connect to
    `/redis/redis.sock`. Other URLs, and absolute paths (`unix:///…`), are left alone."""
    if not url.startswith("unix://"):
        return url
    auth, at, location = url[len("unix://") :].rpartition("@")
    if location.startswith("/") or not location:
        return url
    path, question, query = location.partition("?")
    return f"unix://{auth}{at}{Path(path).absolute()}{question}{query}"


def check_version(client: redis.Redis, url: str = "") -> tuple[int, int, int]:
    """The server's version; RedisUnavailableError when unreachable or older than 6.2."""
    where = redact_url(url) if url else "Redis"
    try:
        info = client.info("server")
    except redis.AuthenticationError as exc:
        raise RedisUnavailableError(
            f"{where}: authentication failed (check user and password)"
        ) from exc
    except redis.exceptions.NoPermissionError as exc:
        raise RedisUnavailableError(
            f"{where}: the user may not run INFO ({describe(exc)}); see the ACL in the docs"
        ) from exc
    except redis.RedisError as exc:
        raise RedisUnavailableError(f"{where}: unreachable ({describe(exc)})") from exc
    version = parse_version(str(info.get("redis_version", "")))
    if version < MIN_VERSION:
        shown = ".".join(map(str, version))
        raise RedisUnavailableError(f"{where}: Redis {shown} is too old, mnemod needs 6.2 or newer")
    return version


def memory_used(client: redis.Redis) -> str | None:
    """What the server says it uses (`used_memory_human`)."""
    return cast("str | None", client.info("memory").get("used_memory_human"))


def describe(exc: BaseException) -> str:
    """An error as a log line can say it: its type and what it said (`NOPERM ...`,
    `... certificate verify failed ...`), not only its type. redis-py's messages name the
    host and port, never the password."""
    message = " ".join(str(exc).split())
    if not message:
        return type(exc).__name__
    return f"{type(exc).__name__}: {redact_url(message)[:MAX_ERROR_CHARS]}"


def parse_version(text: str) -> tuple[int, int, int]:
    """`7.0.15` → (7, 0, 15); leading digits of each part, missing parts count as 0."""
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d*", piece)
        parts.append(int(digits.group()) if digits and digits.group() else 0)
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


@dataclass
class Backoff:
    """Exponential backoff with jitter, capped: how the daemon waits out a Redis outage.

    Delay n (from 0) is `min(cap, base * factor**n)`, less up to `jitter` of itself at random,
    so several daemons do not reconnect in lockstep. `sleep` is injectable: tests pass a fake,
    the daemon passes `stop_event.wait` so a shutdown interrupts the wait.
    """

    base: float = 0.1
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5
    sleep: Callable[[float], object] = time.sleep
    rand: Callable[[], float] = field(default=random.random)
    attempts: int = 0

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("Backoff needs 0 < base ≤ cap, factor ≥ 1 and 0 ≤ jitter ≤ 1")

    def next_delay(self) -> float:
        """The next delay in seconds; counts an attempt, so call it once per failure (and
        `sleep` that delay, or use `wait`)."""
        exponent = min(self.attempts, 64)  # beyond this the cap always wins; avoid overflow
        ceiling = min(self.cap, self.base * self.factor**exponent)
        self.attempts += 1
        return ceiling * (1.0 - self.jitter * self.rand())

    def wait(self) -> float:
        """Sleep for the next delay and return it."""
        delay = self.next_delay()
        self.sleep(delay)
        return delay

    def reset(self) -> None:
        """Call after a success: the next outage starts from `base` again."""
        self.attempts = 0
