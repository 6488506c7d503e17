"""Serving resolve requests from the rpc stream inside the writer (resolve records accesses,
so it runs where the engine is owned). The `once` ledger of a session lives in Redis.

A request is answered first; the accesses its selection records are gathered, sealed once
per snapshot interval and recorded when no request is waiting (`seal`, `settle`, called by
the writer's bookkeeping), so a busy agent does not wait for them. Answers go out on a
connection kept for them, and Redis's replies to a batch's answers are read after the batch
(`collect`): the daemon is back at the stream before an agent's next request comes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import orjson
import redis
import structlog
from redis.connection import Connection
from redis.exceptions import NoScriptError

from mnemod.clock import Clock
from mnemod.errors import InvalidInputError
from mnemod.redisio.dead_letters import dead_letter
from mnemod.redisio.keys import GROUP, Keys
from mnemod.redisio.rpc import (
    REPLY_TTL_SECONDS,
    ResolveRequest,
    parse_request,
    reply_target,
    result_payload,
)
from mnemod.redisio.session_set import remember_once, seen_once
from mnemod.runtime.metrics import Metrics
from mnemod.store.engine import Engine

log = structlog.get_logger("mnemod.rpc")
# RPUSH, then EXPIRE only if the push worked (a script stops at the first error)
_PUSH_REPLY = """
local pushed = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return pushed
"""


@dataclass(frozen=True, slots=True)
class _Sent:
    """An answer sent whose replies are not read yet (`RpcServer.collect`)."""

    request_id: str
    raw: dict[str, str]
    target: str
    body: bytes


class RpcServer:
    def __init__(
        self, engine: Engine, client: redis.Redis, keys: Keys, clock: Clock, metrics: Metrics
    ) -> None:
        self.engine = engine
        self.client = client
        self.keys = keys
        self.clock = clock
        self.metrics = metrics
        # entry id -> (times selected, the last time): gathered until `seal`, then settled
        self._picked: dict[str, tuple[int, datetime]] = {}
        self._sealed: dict[str, tuple[int, datetime]] = {}
        # where sealed selections go: the engine (a leader), access events (a follower)
        self.record_selections: Callable[[dict[str, tuple[int, datetime]]], None] = (
            engine.record_selections
        )
        # called by its digest, loaded on first use (and again after a Redis restart): a
        # pipeline holding a registered script would ask SCRIPT EXISTS on every answer
        self._push_sha = hashlib.sha1(_PUSH_REPLY.encode(), usedforsecurity=False).hexdigest()
        # answers go out on a connection of their own, taken from the pool once (`_push`),
        # and Redis's replies to them are read after the batch (`collect`)
        self._connection: Connection | None = None
        self._sent: list[_Sent] = []

    def close(self) -> None:
        """Give the answers' connection back to the pool (closed if replies were unread)."""
        if self._connection is not None:
            if self._sent:
                self._drop_connection()
            self.client.connection_pool.release(self._connection)
            self._connection = None

    @property
    def unsettled(self) -> int:
        """Entries whose sealed selections are not recorded yet."""
        return len(self._sealed)

    def seal(self) -> None:
        """The selections answered so far are to be recorded (`settle`)."""
        sealed = self._sealed
        for entry_id, (times, last) in self._picked.items():
            before = sealed.get(entry_id)
            sealed[entry_id] = (times, last) if before is None else (before[0] + times, last)
        self._picked = {}

    def settle(self, limit: int | None = None) -> None:
        """Record the sealed selections of `limit` entries (all with None): each entry's
        accesses at once, however often it was selected."""
        sealed = self._sealed
        count = len(sealed) if limit is None else min(limit, len(sealed))
        self.record_selections(dict(sealed.popitem() for _ in range(count)))

    def handle(self, request_id: str, raw: dict[str, str]) -> None:
        """Answer one request (Redis's replies to the answer are read by `collect`). A bad
        request is answered with its error; one that Redis refuses to serve (a `reply_to`
        holding another type of key, a key the ACL denies) is answered with that error if it
        can be, else kept in the dead letters: either way it is acknowledged and never takes
        the daemon down."""
        started = time.perf_counter()
        try:
            request = parse_request(request_id, raw, self.keys)
        except InvalidInputError as exc:
            self._refuse(request_id, raw, str(exc), reply_target(raw, self.keys))
            return
        try:
            self._answer(request_id, raw, request, started)
        except redis.ResponseError as exc:
            self._refuse(request_id, raw, f"cannot answer: {exc}", request.reply_to)

    def _answer(
        self, request_id: str, raw: dict[str, str], request: ResolveRequest, started: float
    ) -> None:
        seen: set[str] = set()
        if request.session and self.engine.has_once_items:  # else the ledger changes nothing
            seen = seen_once(self.client, self.keys, request.session)
        now = self.clock.now()
        result = self.engine.resolve(
            request.prompt,
            request.budget,
            seen_once=seen,
            now=now,
            trace=request.trace,
            record_access=False,
        )
        if request.session:
            remember_once(self.client, self.keys, request.session, result.once_ids)
        payload = {"id": request_id, **result_payload(result, request.trace)}
        body = self._push(request.reply_to, payload, request_id)
        self._sent.append(_Sent(request_id, raw, request.reply_to, body))
        # The accesses (what Engine.resolve records by default) are gathered and recorded
        # later, each entry's at once: an agent waits for its answer, not for them, and they
        # are no ranking evidence.
        picked = self._picked
        for item in result.items:
            if item.layer != "l1":
                picked[item.id] = (picked.get(item.id, (0, now))[0] + 1, now)
        seconds = time.perf_counter() - started
        self.metrics.resolved(self.keys.namespace, seconds)
        log.debug(
            "rpc.resolved",
            request_id=request_id,
            items=len(result.items),
            ms=round(seconds * 1000, 2),
        )

    def _refuse(self, request_id: str, raw: dict[str, str], error: str, target: str | None) -> None:
        """Answer `error` on `target`; with no usable target, or when that fails too, keep
        the request (fields as sent, plus `error`) in the dead letters. Acknowledged."""
        log.warning("rpc.rejected", request_id=request_id, error=error[:300])
        if target is not None:
            self.collect()  # the connection's replies come in order: earlier answers' first
            body = self._push(target, {"ok": False, "id": request_id, "error": error}, request_id)
            refused = self._pushed(self._read_replies(), target, body)
            if refused is None:
                return
            error = f"{error}; the error answer failed too: {refused}"
        max_len = self.engine.config.daemon.stream_max_len
        dead_letter(self.client, self.keys, request_id, raw, error, max_len, request=True)

    def collect(self) -> None:
        """Read Redis's replies to the answers sent since the last call. An answer Redis
        refused is answered with the error, or kept in the dead letters (`_refuse`). The
        writer calls this after each batch: the replies' round trip overlaps the batch's
        bookkeeping instead of delaying it, so the daemon is reading the stream again when
        an agent's next request comes."""
        sent, self._sent = self._sent, []
        if not sent:
            return
        replies = [self._read_replies() for _ in sent]  # all first: `_refuse` sends more
        for answer, pushed in zip(sent, replies, strict=True):
            refused = self._pushed(pushed, answer.target, answer.body)
            if refused is not None:
                self._refuse(
                    answer.request_id, answer.raw, f"cannot answer: {refused}", answer.target
                )

    def _push(self, target: str, payload: dict[str, object], request_id: str) -> bytes:
        """Send the answer, its expiry and the request's acknowledgement in one write (an
        answered request needs no snapshot); returns the answer as sent. The answer and its
        expiry are one script, so that a `reply_to` holding another type of key gets neither
        (an EXPIRE alone would set a timer on the agent's own key); a waiting BLPOP is served
        as soon as the answer is pushed. orjson: a 1,000-token answer is about 10 KB of JSON,
        which the standard library takes 0.1-0.3 ms to write here.

        On a connection kept for the answers: a redis-py pipeline takes a connection from
        the pool, checks it and gives it back on every answer, which was a fifth of what an
        answer costs after the resolve. Like the pool, it first checks that the server has
        not closed the connection (an idle timeout, CLIENT KILL, a restart)."""
        body = orjson.dumps(payload)
        connection = self._connection
        if connection is None:
            connection = self._connection = self.client.connection_pool.get_connection()
        if not self._sent:  # no replies owed, so anything to read means it was closed
            try:
                if connection.can_read():
                    self._drop_connection()
            except (redis.ConnectionError, OSError):
                self._drop_connection()
        packed = connection.pack_commands(  # type: ignore[no-untyped-call]  # redis-py: untyped
            [
                ("EVALSHA", self._push_sha, 1, target, body, REPLY_TTL_SECONDS),
                ("XACK", self.keys.rpc, GROUP, request_id),
            ]
        )
        connection.send_packed_command(packed)  # type: ignore[no-untyped-call]  # reconnects
        return body

    def _read_replies(self) -> object:
        """Redis's replies to one `_push`: the push's (an error reply as its exception, not
        raised); the acknowledgement's is read and left."""
        connection = self._connection
        assert connection is not None  # a push came first
        replies: list[object] = []
        for _ in range(2):
            try:
                replies.append(connection.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
            except BaseException:
                self._drop_connection()  # the replies still owed went with it
                raise
        return replies[0]

    def _pushed(self, pushed: object, target: str, body: bytes) -> redis.ResponseError | None:
        """None when the answer is in `target`, else why Redis refused it. A script Redis
        does not know (its first use, or Redis restarted) is loaded and the push made again."""
        if isinstance(pushed, NoScriptError):
            self._push_sha = self.client.script_load(_PUSH_REPLY)
            try:
                self.client.evalsha(self._push_sha, 1, target, body, REPLY_TTL_SECONDS)
            except redis.ResponseError as exc:
                return exc
            return None
        return pushed if isinstance(pushed, redis.ResponseError) else None

    def _drop_connection(self) -> None:
        """Forget the answers whose replies were on the connection, and close it (the next
        push reconnects)."""
        self._sent = []
        if self._connection is not None:
            self._connection.disconnect()  # type: ignore[no-untyped-call]  # redis-py: untyped
