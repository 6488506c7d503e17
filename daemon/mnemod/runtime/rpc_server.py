"""Serving resolve requests from the rpc stream inside the writer (resolve records accesses,
so it runs where the engine is owned). The `once` ledger of a session lives in Redis, the
answers go out on a `ReplyChannel` (redisio.replies).

A request is answered first; the accesses its selection records are gathered, sealed once
per snapshot interval and recorded when no request is waiting (`seal`, `settle`, called by
the writer's bookkeeping), so a busy agent does not wait for them. Redis's replies to a
batch's answers are read after the batch (`collect`): the daemon is back at the stream
before an agent's next request comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import orjson
import redis
import structlog

from mnemod.clock import Clock
from mnemod.errors import InvalidInputError
from mnemod.redisio.connection import FAILOVER_ERRORS
from mnemod.redisio.dead_letters import dead_letter
from mnemod.redisio.keys import Keys
from mnemod.redisio.replies import ReplyChannel
from mnemod.redisio.rpc import (
    ResolveRequest,
    StatsRequest,
    parse_request,
    reply_target,
    result_payload,
)
from mnemod.redisio.session_set import remember_once, seen_once
from mnemod.runtime.metrics import Metrics
from mnemod.store.engine import Engine

log = structlog.get_logger("mnemod.rpc")


@dataclass(frozen=True, slots=True)
class _Sent:
    """An answer sent whose replies are not read yet (`RpcServer.collect`)."""

    request_id: str
    raw: dict[str, str]
    target: str


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
        self.replies = ReplyChannel(client, keys)
        self._sent: list[_Sent] = []  # answers whose replies are read by `collect`

    def close(self) -> None:
        """Give the answers' connection back (closed if replies were unread)."""
        self._sent = []
        self.replies.close()

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
            if isinstance(request, StatsRequest):
                self._answer_stats(request, raw)
            else:
                self._answer(request_id, raw, request, started)
        except FAILOVER_ERRORS:
            raise  # not the request's fault: answered once Redis settles (it stays pending)
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
        self._push(request.reply_to, payload, request_id)
        self._sent.append(_Sent(request_id, raw, request.reply_to))
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

    def _answer_stats(self, request: StatsRequest, raw: dict[str, str]) -> None:
        """The namespace's counts as applied here (what `mnemod stats` prints): read from
        the running daemon, they cost a pass over the entries in memory, where the files
        beside it can hold a checkpoint and many records after it to replay."""
        engine = self.engine
        payload = {
            "ok": True,
            "id": request.request_id,
            "counts": engine.stats(),
            "last_event_id": engine.last_event_id,
            "l1": len(engine.l1_items()),
            "l1_problems": [str(p) for p in engine.l1_problems],
        }
        self._push(request.reply_to, payload, request.request_id)
        self._sent.append(_Sent(request.request_id, raw, request.reply_to))

    def _refuse(self, request_id: str, raw: dict[str, str], error: str, target: str | None) -> None:
        """Answer `error` on `target`; with no usable target, or when that fails too, keep
        the request (fields as sent, plus `error`) in the dead letters. Acknowledged."""
        log.warning("rpc.rejected", request_id=request_id, error=error[:300])
        if target is not None:
            self.collect()  # the connection's replies come in order: earlier answers' first
            self._push(target, {"ok": False, "id": request_id, "error": error}, request_id)
            refused = self.replies.receive()
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
        refusals = [self.replies.receive() for _ in sent]  # all first: `_refuse` sends more
        for answer, refused in zip(sent, refusals, strict=True):
            if refused is not None:
                self._refuse(
                    answer.request_id, answer.raw, f"cannot answer: {refused}", answer.target
                )

    def _push(self, target: str, payload: dict[str, object], request_id: str) -> None:
        """Send the answer and the request's acknowledgement (an answered request needs no
        snapshot). orjson: a 1,000-token answer is about 10 KB of JSON, which the standard
        library takes 0.1-0.3 ms to write here."""
        self.replies.send(target, orjson.dumps(payload), request_id)
