"""A daemon that does not lead a namespace follows it.

It keeps its own copy in its own folder (store.replica): the leader's records applied as
they reach the feed, so that it can take over at once, on another host, with every memory.
It answers resolve requests from that copy, reading the rpc stream in the same consumer
group under its own consumer name (Redis spreads requests over every daemon), after
catching up to the committed position, so an agent that saw its event acknowledged finds it
in the answer. What an answer selected goes to the leader as `access` events. Requests left
pending on a daemon that died are claimed. When the lease is free and the copy current, it
takes the lease, catches up once more under it, and hands its engine over to lead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import redis
import structlog

from mnemod.clock import Clock
from mnemod.config import Config
from mnemod.files.change_log import CorruptLogError
from mnemod.redisio.change_feed import ChangeFeed, Position
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import Lease
from mnemod.redisio.streams import EventStream, GroupMissingError
from mnemod.runtime.catch_up import Diverged, Standing, catch_up, position
from mnemod.runtime.metrics import Metrics
from mnemod.runtime.rpc_server import RpcServer
from mnemod.store.engine import Engine
from mnemod.store.replica import start_from_checkpoint

log = structlog.get_logger("mnemod.follower")
HOUSEKEEPING_SECONDS = 1.0  # say how far it applied, claim stale requests, derive, checkpoint
CLAIM_IDLE_MS = 5000  # a request delivered this long ago and not answered: its daemon died
ACCESS_SECONDS = 2.0  # what answers selected is sent to the leader this often
POLL_SECONDS = 0.25  # longest wait for a request between looks at the feed and the lease


class Follower:
    def __init__(
        self,
        open_engine: Callable[[], Engine],
        client: redis.Redis,
        keys: Keys,
        config: Config,
        clock: Clock,
        metrics: Metrics,
        owner: str,
        lease: Lease,
        may_lead: Callable[[], bool],
        stop: threading.Event,
    ) -> None:
        """`may_lead` tries to take the lease (clearing a dead holder first)."""
        self.open_engine = open_engine
        self.client = client
        self.keys = keys
        self.config = config
        self.clock = clock
        self.metrics = metrics
        self.owner = owner
        self.lease = lease
        self.may_lead = may_lead
        self.stop = stop
        self.consumer = f"follower:{owner}"
        self.feed = ChangeFeed(client, keys, owner)
        self.stream = EventStream(client, keys)
        self.trusted: Position | None = None
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemod-checkpoint")
        self._checkpoint: Future[int] | None = None
        self._housekept = -HOUSEKEEPING_SECONDS
        self._sent_at = clock.monotonic()
        self.engine: Engine | None = None
        self.rpc: RpcServer | None = None

    def run(self) -> Engine | None:
        """Follow until this daemon leads; returns the engine to lead with (its copy at the
        committed position, the lease held), or None when a stop was asked."""
        try:
            while not self.stop.is_set():
                if self.engine is None:
                    self.engine = self.open_engine()
                    self.rpc = self._rpc(self.engine)
                engine = self.engine
                try:
                    standing = self._catch_up(engine)
                    if self._lead(engine):
                        return self._hand_over()
                    if standing is Standing.AHEAD:
                        raise Diverged("holds records the namespace does not, while another leads")
                    self._serve(engine)
                    self._housekeeping(engine)
                except Diverged as exc:
                    self._start_again(str(exc))
                except CorruptLogError as exc:
                    # a record in Redis that does not read: starting again would meet it too
                    log.error("follow.bad_record", error=str(exc)[:300])
                    self.stop.wait(self.lease.ttl / 3)
                except OSError as exc:
                    # its files cannot be written (a full or read-only disk): tried again
                    log.error("files.write_failed", error=str(exc)[:300], at="following")
                    self.stop.wait(1.0)
            return None
        finally:
            self._finish()

    # ---- the copy ------------------------------------------------------------------------
    def _catch_up(self, engine: Engine) -> Standing:
        before = engine.commits.log.last_seq
        standing = catch_up(engine, self.feed, self.trusted)
        # nothing committed in Redis (it lost its data): the next leader's history must be
        # checked against this copy again, not taken on trust
        self.trusted = None if standing is Standing.UNPUBLISHED else position(engine)
        if engine.commits.log.last_seq != before:
            log.debug("follow.applied", to_seq=engine.commits.log.last_seq, from_seq=before)
        return standing

    def _lead(self, engine: Engine) -> bool:
        """Take the lease if it is free, and catch up under it (nobody else publishes now:
        a record the old leader published just before its lease lapsed is applied)."""
        if not self.may_lead():
            return False
        self._catch_up(engine)
        return True

    def _hand_over(self) -> Engine | None:
        self._collect(wait=True)
        engine, self.engine = self.engine, None
        self.feed.forget(self.owner)
        if self.rpc is not None:
            self.rpc.seal()
            self.rpc.settle(None)  # what answers selected: to the events, which it applies
        if engine is not None:
            engine.set_replica(False)
            log.info(
                "follow.leading", namespace=self.keys.namespace, seq=engine.commits.log.last_seq
            )
        return engine

    def _start_again(self, why: str) -> None:
        """Start the copy again from the published checkpoint (the old folder set aside)."""
        checkpoint = self.feed.checkpoint()
        if checkpoint is None:
            log.warning("follow.no_checkpoint", reason=why, action="waiting for the leader's")
            self.stop.wait(self.lease.ttl / 3)
            return
        log.warning("follow.restarting_copy", reason=why, checkpoint_seq=checkpoint.seq)
        if self.rpc is not None:
            self.rpc.close()
            self.rpc = None
        self._collect(wait=True)
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.abandon()  # its files are set aside as they are
            start_from_checkpoint(engine.paths, checkpoint.seq, checkpoint.line, checkpoint.index)
        self.trusted = None  # the copy is opened again at the top of the loop

    # ---- requests --------------------------------------------------------------------------
    def _rpc(self, engine: Engine) -> RpcServer:
        rpc = RpcServer(engine, self.client, self.keys, self.clock, self.metrics)
        rpc.record_selections = self._send_accesses
        return rpc

    def _serve(self, engine: Engine) -> None:
        """Answer one batch of requests, waiting up to POLL_SECONDS for one: how late at
        most the copy follows the leader while no request comes (a request is answered
        after catching up), and how soon a free lease is seen."""
        seconds = min(self.config.daemon.block.total_seconds(), POLL_SECONDS, self.lease.ttl / 3)
        block = int(seconds * 1000)
        try:
            batches = self.stream.read(
                self.consumer, {self.keys.rpc: ">"}, self.config.daemon.batch_size, max(block, 1)
            )
        except GroupMissingError:
            self.stream.ensure_groups()  # no leader yet, or Redis lost its data
            return
        self._answer(engine, [m for _, messages in batches for m in messages])

    def _answer(self, engine: Engine, messages: list[tuple[str, dict[str, str]]]) -> None:
        rpc = self.rpc
        if not messages or rpc is None:
            return
        self._catch_up(engine)  # what was acknowledged before the request is in the answer
        try:
            for request_id, raw in messages:
                rpc.handle(request_id, raw or {})
        finally:
            rpc.collect()

    def _send_accesses(self, selected: dict[str, tuple[int, datetime]]) -> None:
        """What answers selected, to the leader as `access` events (soft state: lost with
        a Redis outage, as a leader's unsaved accesses are with a crash)."""
        if not selected:
            return
        for entry_id, (times, _) in selected.items():
            data = {"id": entry_id, "times": times, "selected": True}
            self.stream.append({"op": "access", "data": _dumps(data)})

    # ---- between batches -------------------------------------------------------------------
    def _housekeeping(self, engine: Engine) -> None:
        if self.clock.monotonic() - self._sent_at >= ACCESS_SECONDS and self.rpc is not None:
            self._sent_at = self.clock.monotonic()
            self.rpc.seal()
            self.rpc.settle(None)
        if self.clock.monotonic() - self._housekept < HOUSEKEEPING_SECONDS:
            return
        self._housekept = self.clock.monotonic()
        self.feed.register(self.owner, engine.commits.log.last_seq)
        claimed = self.stream.claim_stale_requests(self.consumer, CLAIM_IDLE_MS)
        if claimed:
            log.info("rpc.claimed", namespace=self.keys.namespace, requests=len(claimed))
        self._answer(engine, claimed)
        engine.commits.derive()
        self._collect(wait=False)
        if self._checkpoint is None and engine.commits.checkpoint_due():
            job = engine.checkpoint_job()
            if job is not None:
                self._checkpoint = self._saver.submit(job)

    def _collect(self, wait: bool) -> None:
        """Take a checkpoint written on the saver thread (the log before it can go)."""
        done = self._checkpoint
        if done is None or not (wait or done.done()):
            return
        self._checkpoint = None
        try:
            seq = done.result()
        except OSError as exc:
            log.error("checkpoint.failed", error=str(exc)[:300])
            return
        if self.engine is not None:
            self.engine.commits.checkpoint_written(seq)

    def _finish(self) -> None:
        """A stop (or an error): what answers selected sent, the copy's files written and
        closed. An engine handed over to lead is not this one's to close."""
        try:
            if self.engine is not None and self.rpc is not None:
                self.rpc.seal()
                self.rpc.settle(None)
                self.feed.forget(self.owner)
        except redis.RedisError as exc:
            log.warning("redis.unavailable", error=str(exc)[:200], at="follower stop")
        finally:
            if self.rpc is not None:
                self.rpc.close()
            self._collect(wait=True)
            self._saver.shutdown(wait=True)
            if self.engine is not None:
                self.engine.close()
                self.engine = None


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
