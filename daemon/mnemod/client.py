"""A small client for agents that talk to a running mnemod daemon through Redis.

    from mnemod.client import Client

    with Client("unix:///path/to/.mnemod/redis/redis.sock") as memory:
        item_id = memory.add("User prefers Asia/Taipei", type="preference", key="user.tz")
        memory.access("user.tz")
        answer = memory.resolve("what timezone am I in?", budget=500)
        print(answer["text"])

Writes are events on `<prefix>:{ns}:events`: the daemon validates and applies them in the
background, so a write returns as soon as Redis has it (`wait_applied` waits for the daemon).
`add` picks the entry id on the client side, so re-sending the same add after a network error
stores the memory once. Reads come straight from the hot layer; `resolve` is a request on the
rpc stream answered on a list of our own. The daemon stays the authority on what is valid:
the checks here only catch the obvious mistakes before they travel.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, cast

import orjson
import redis

from mnemod.clock import utcnow
from mnemod.domain.model import TIERS
from mnemod.domain.validation import UPDATABLE, check_unicode
from mnemod.errors import InvalidInputError, MnemodError, RedisUnavailableError
from mnemod.ids import is_valid_id, new_id, next_id
from mnemod.redisio.connection import connect
from mnemod.redisio.dead_letters import dead_letter_error
from mnemod.redisio.hot_layer import HotItem, HotLayer
from mnemod.redisio.keys import Keys
from mnemod.redisio.rpc import MAX_BUDGET, MAX_PROMPT_CHARS
from mnemod.redisio.status_hash import read_status
from mnemod.redisio.streams import EventStream

__all__ = [
    "Client",
    "ClientError",
    "EventRejectedError",
    "NoAnswerError",
    "NotReplicatedError",
    "RequestRejectedError",
]

DEFAULT_TIMEOUT = 5.0


class ClientError(MnemodError):
    """Root of the errors this client raises about the daemon's answers."""


class NoAnswerError(ClientError, TimeoutError):
    """The daemon did not answer (or apply an event) in time: is `mnemod run` running?"""


class RequestRejectedError(ClientError):
    """The daemon answered a resolve request with `{"ok": false, "error": ...}`."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        self.answer = dict(answer)
        self.error = str(answer.get("error") or "no reason given")
        super().__init__(f"mnemod rejected the request: {self.error}")


class EventRejectedError(ClientError):
    """The daemon could not apply an event and moved it to the dead-letter stream."""

    def __init__(self, event_id: str, error: str) -> None:
        self.event_id = event_id
        self.error = error
        super().__init__(f"mnemod rejected event {event_id}: {error}")


class NotReplicatedError(ClientError):
    """Redis took the event, but fewer replicas than asked confirmed it in time: a
    failover now could lose it. Sending it again is safe (an add keeps its id)."""

    def __init__(self, event_id: str, confirmed: int, wanted: int) -> None:
        self.event_id = event_id
        self.confirmed = confirmed
        self.wanted = wanted
        super().__init__(
            f"event {event_id} is queued but {confirmed} of {wanted} replica(s) confirmed it"
        )


class Client:
    """One namespace of a mnemod daemon, reached through Redis at `url`.

    `url` is what `mnemod run` prints (`unix:///…/redis.sock`) or the daemon's configured
    `redis.url`: `redis://[user:password@]host:port/db`, `rediss://…`, a Redis Cluster
    (`redis+cluster://host:port[,host:port…]`) or a master found through Sentinel
    (`redis+sentinel://host:port[,host:port…]/service_name`). `prefix` must match the
    daemon's `redis.prefix`. The client is thread-safe as redis-py is (a connection pool).

    With `replicas`, every event waits (WAIT, at most `replica_timeout` seconds) until that
    many replicas of the master hold it, and NotReplicatedError says when fewer did: an
    event a replica holds survives a failover (docs/operations.md).
    """

    def __init__(
        self,
        url: str,
        namespace: str = "default",
        prefix: str = "mnemod",
        socket_timeout: float = 10.0,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise InvalidInputError("replicas", "must be a whole number, 0 or more")
        self.keys = Keys(prefix, namespace)
        self.socket_timeout = socket_timeout
        self.replicas = replicas
        self.replica_timeout = replica_timeout
        self.redis: redis.Redis = connect(url, socket_timeout=socket_timeout)
        self.stream = EventStream(self.redis, self.keys)
        self.hot_layer = HotLayer(self.redis, self.keys)
        self.last_event_id: str | None = None
        """Stream id of the last event this client sent (for `wait_applied`)."""
        self._last_id = ""
        self._id_lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "default",
        prefix: str = "mnemod",
        socket_timeout: float = 10.0,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> Client:
        return cls(url, namespace, prefix, socket_timeout, replicas, replica_timeout)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(namespace={self.keys.namespace!r}, prefix={self.keys.prefix!r})"

    # -- writes (events) -----------------------------------------------------------------
    def add(
        self,
        content: str,
        type: str | None = None,
        importance: int | None = None,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        tier: str | None = None,
        triggers: Sequence[str] | None = None,
        once: bool | None = None,
        id: str | None = None,
        keywords: Sequence[str] | None = None,
        source: str | None = None,
        wait: float | None = None,
    ) -> str:
        """Queue a new memory and return its id. Arguments left as None take the daemon's
        defaults (type `context`, importance 3, tier `cold`).

        The id is chosen here (a new sortable id unless given), so sending the same add
        again is harmless. The daemon may fold a near-duplicate into an existing entry or,
        when `key` already names an entry, update that one; the id is then not stored.
        With `wait` (seconds), return only once the daemon has applied the event durably
        (raises EventRejectedError if it refused it, NoAnswerError on timeout)."""
        if not isinstance(content, str) or not content.strip():
            raise InvalidInputError("content", "must be a non-empty string")
        entry_id = self.new_id() if id is None else id
        if not isinstance(entry_id, str) or not is_valid_id(entry_id):
            raise InvalidInputError("id", "use 1–64 letters, digits, '_', '.', ':' or '-'")
        data: dict[str, Any] = {"content": content, "id": entry_id}
        optional: dict[str, Any] = {
            "type": type,
            "importance": importance,
            "key": key,
            "tags": _string_list("tags", tags),
            "tier": tier,
            "triggers": _string_list("triggers", triggers),
            "once": once,
            "keywords": _string_list("keywords", keywords),
            "source": source,
        }
        data.update({name: value for name, value in optional.items() if value is not None})
        _check_fields(data)
        self._send("add", data, wait)
        return entry_id

    def new_id(self) -> str:
        """A new unique id (ULID layout): ids made by one client sort in the order they
        were made, even within one millisecond."""
        with self._id_lock:
            candidate = new_id(utcnow())
            if candidate <= self._last_id:
                candidate = next_id(self._last_id)
            self._last_id = candidate
            return candidate

    def access(self, id_or_key: str, wait: float | None = None) -> str:
        """Record a use of an entry (extends its life, counts towards promotion).
        Returns the event's stream id."""
        return self._send("access", {"id": _target(id_or_key)}, wait)

    def update(self, id_or_key: str, wait: float | None = None, **fields: Any) -> str:
        """Change some fields of an entry: content, importance, key, tags, keywords, tier,
        triggers, once, type. Returns the event's stream id."""
        if not fields:
            raise InvalidInputError("fields", "nothing to update")
        unknown = sorted(set(fields) - set(UPDATABLE))
        if unknown:
            raise InvalidInputError(
                unknown[0], f"cannot be updated (updatable: {', '.join(UPDATABLE)})"
            )
        _check_fields(fields)
        return self._send("update", {"id": _target(id_or_key), **fields}, wait)

    def remove(self, id_or_key: str, wait: float | None = None) -> str:
        """Delete an entry. Returns the event's stream id."""
        return self._send("remove", {"id": _target(id_or_key)}, wait)

    def promote(self, id_or_key: str, wait: float | None = None) -> str:
        """Move an L3 entry into L2 (permanent Markdown). Returns the event's stream id."""
        return self._send("promote", {"id": _target(id_or_key)}, wait)

    def wait_applied(self, event_id: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Block until the daemon has applied the event and made it durable (acknowledged in
        its consumer group); default: the last event this client sent. Raises
        EventRejectedError when the daemon moved it to the dead-letter stream instead, and
        NoAnswerError when `timeout` seconds pass first."""
        event_id = event_id or self.last_event_id
        if event_id is None:
            raise InvalidInputError("event_id", "no event sent yet")
        deadline = time.monotonic() + timeout
        interval = 0.02
        while not self._acknowledged(event_id):
            if time.monotonic() >= deadline:
                raise NoAnswerError(
                    f"the daemon has not applied event {event_id} within {timeout:g} s "
                    "(is `mnemod run` running for this namespace?); it stays queued"
                )
            time.sleep(interval)
            interval = min(interval * 2, 0.25)
        error = self._dead_letter_error(event_id)
        if error is not None:
            raise EventRejectedError(event_id, error)

    # -- reads (hot layer) ---------------------------------------------------------------
    def get(self, id_or_key: str) -> dict[str, Any] | None:
        """The hot item with this id, or else with this `key` label; None when neither is in
        the hot layer (it may still exist in cold storage: resolve finds those)."""
        with _redis_errors():
            item = self.hot_layer.get(id_or_key)
            if item is None:
                found = self.hot_layer.id_for_key(id_or_key)
                item = self.hot_layer.get(found) if found else None
        return None if item is None else _item_dict(item)

    def hot_ids(self, layer: str = "l3", limit: int | None = 50) -> list[str]:
        """Ids of a layer's hot items: l3 and l2 highest score first (retention score,
        importance), l1 in file order. `limit=None` lists them all."""
        self.keys.layer(layer)  # an unknown layer is refused before any round trip
        with _redis_errors():
            return self.hot_layer.top(layer, limit)

    def hot(self, layer: str = "l3", limit: int | None = 50) -> list[dict[str, Any]]:
        """The hot items of a layer (see `hot_ids` for the order), read in one round trip."""
        ids = self.hot_ids(layer, limit)
        if not ids:
            return []
        with _redis_errors():  # an item removed between the two reads is simply skipped
            return [_item_dict(item) for item in self.hot_layer.get_many(ids)]

    def status(self) -> dict[str, str]:
        """The daemon's status hash (empty when no daemon ever ran on this namespace)."""
        with _redis_errors():
            return read_status(self.redis, self.keys)

    # -- rpc (resolve, stats) ------------------------------------------------------------
    def resolve(
        self,
        prompt: str,
        budget: int | None = None,
        session: str | None = None,
        trace: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> dict[str, Any]:
        """Token-budgeted context for `prompt`: a dict with `text` (ready to prepend to a
        system prompt), `items`, `tokens_used`, `tiers_used`, `dropped` and, with
        `trace=True`, `trace`. `session` makes `once` items appear once per session.

        Raises RequestRejectedError when the daemon refuses the request and NoAnswerError
        when no answer comes within `timeout` seconds."""
        if not isinstance(prompt, str):
            raise InvalidInputError("prompt", "must be a string")
        check_unicode("prompt", prompt)
        if session:
            check_unicode("session", session)
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidInputError(
                "prompt", f"{len(prompt)} characters, at most {MAX_PROMPT_CHARS}"
            )
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET
        ):
            raise InvalidInputError("budget", f"must be a whole number from 1 to {MAX_BUDGET}")
        fields: dict[str, str] = {"op": "resolve", "prompt": prompt}
        if budget is not None:
            fields["budget"] = str(budget)
        if session:
            fields["session"] = session
        if trace:
            fields["trace"] = "1"
        return self._ask(fields, timeout)

    def stats(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The namespace's counts as the daemon holds them: `counts` (entries by type, L2 by
        type, promotable entries, the L3 entries' tokens), `last_event_id`, `l1` and
        `l1_problems`. Raises as `resolve` does."""
        return self._ask({"op": "stats"}, timeout)

    def _ask(self, fields: dict[str, str], timeout: float) -> dict[str, Any]:
        """Send an rpc request and wait for its JSON answer."""
        # Any key outside mnemod's own `<prefix>:{ns}:` space may receive the answer.
        # In the namespace's hash slot (`{ns}`), so a cluster serves it where the rpc stream is.
        reply_to = f"{self.keys.prefix}-reply:{{{self.keys.namespace}}}:{uuid.uuid4().hex}"
        fields = {**fields, "reply_to": reply_to}
        deadline = time.monotonic() + timeout
        with _redis_errors():
            request_id = self.stream.request(fields)
            raw = self._pop(reply_to, deadline)
        if raw is None:
            raise NoAnswerError(
                f"no answer from mnemod within {timeout:g} s to request {request_id} "
                f"(is `mnemod run` running for namespace {self.keys.namespace!r}?)"
            )
        try:
            answer = orjson.loads(raw)
        except ValueError:
            raise ClientError(f"unreadable answer from mnemod: {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            raise ClientError(f"unexpected answer from mnemod: {raw[:200]!r}")
        if answer.get("ok") is False or "error" in answer:
            raise RequestRejectedError(answer)
        return answer

    def send(
        self, op: str, data: dict[str, Any], wait: float | None = None, by: str = "agent"
    ) -> str:
        """XADD one raw event (`op`, `data`); `by="cli"` marks it in the history. With
        `wait`, return once the daemon has made it durable. Returns the event id."""
        return self._send(op, data, wait, by)

    # -- internals -----------------------------------------------------------------------
    def _send(self, op: str, data: dict[str, Any], wait: float | None, by: str = "agent") -> str:
        fields = {"op": op, "data": json.dumps(data, ensure_ascii=False)}
        if by != "agent":
            fields["by"] = by
        with _redis_errors():
            if self.replicas:
                timeout_ms = max(1, round(self.replica_timeout * 1000))
                event_id, confirmed = self.stream.append_replicated(
                    fields, self.replicas, timeout_ms
                )
            else:
                event_id, confirmed = self.stream.append(fields), 0
        self.last_event_id = event_id
        if confirmed < self.replicas:
            raise NotReplicatedError(event_id, confirmed, self.replicas)
        if wait is not None:
            self.wait_applied(event_id, timeout=wait)
        return event_id

    def _pop(self, reply_to: str, deadline: float) -> str | None:
        """BLPOP in slices shorter than the socket timeout, so a long wait cannot trip it."""
        slice_seconds = max(0.1, self.socket_timeout / 2)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # BLPOP takes seconds with decimals (Redis >= 6); 0 would block forever.
            wait = max(0.01, min(left, slice_seconds))
            popped = self.redis.blpop([reply_to], timeout=round(wait, 3))
            if popped is not None:
                return cast(Sequence[str], popped)[1]

    def _acknowledged(self, event_id: str) -> bool:
        with _redis_errors():
            return self.stream.acknowledged(event_id)

    def _dead_letter_error(self, event_id: str) -> str | None:
        with _redis_errors():
            return dead_letter_error(self.redis, self.keys, event_id)


def _target(id_or_key: str) -> str:
    if not isinstance(id_or_key, str) or not id_or_key.strip():
        raise InvalidInputError("id", "must be a non-empty id or key")
    if len(id_or_key) > 200 or "\n" in id_or_key:
        raise InvalidInputError("id", "at most 200 characters, one line")
    return id_or_key


def _string_list(name: str, values: Sequence[str] | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise InvalidInputError(name, "must be a list of non-empty strings")
    return list(values)


def _check_fields(data: Mapping[str, Any]) -> None:
    """Cheap local checks of fields shared by add and update; the daemon checks the rest."""
    if "content" in data and (not isinstance(data["content"], str) or not data["content"].strip()):
        raise InvalidInputError("content", "must be a non-empty string")
    if "importance" in data:
        value = data["importance"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
            raise InvalidInputError("importance", "must be an integer from 1 to 5")
    if "tier" in data and data["tier"] not in TIERS:
        raise InvalidInputError("tier", f"must be one of {', '.join(TIERS)}")
    if "once" in data and not isinstance(data["once"], bool):
        raise InvalidInputError("once", "must be true or false")
    if "type" in data and (not isinstance(data["type"], str) or not data["type"]):
        raise InvalidInputError("type", "must be a non-empty string")
    key = data.get("key")
    if key is not None and (not isinstance(key, str) or not key.strip() or "\n" in key):
        raise InvalidInputError("key", "must be a non-empty string, one line")
    for name in ("tags", "triggers", "keywords"):
        if name in data and data[name] is not None:
            _string_list(name, data[name])
    for name, value in data.items():  # text Redis would refuse to send (a lone surrogate)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                check_unicode(name, text)


def _item_dict(item: HotItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "content": item.content,
        "layer": item.layer,
        "type": item.type,
        "key": item.key,
        "importance": item.importance,
        "tokens": item.tokens,
        "created_at": item.created_at,
        "last_accessed_at": item.last_accessed_at,
        "access_count": item.access_count,
        "expires_at": item.expires_at,
        "keywords": list(item.keywords),
        "score": item.score,
    }


@contextmanager
def _redis_errors() -> Iterator[None]:
    """Connection trouble becomes RedisUnavailableError (a message without the password)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailableError(f"cannot reach Redis: {exc}") from exc
