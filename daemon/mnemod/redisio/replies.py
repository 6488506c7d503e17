"""Answering rpc requests: the answer pushed on the request's `reply_to` list with its expiry,
and the request acknowledged, in one write; Redis's replies read later (`receive`), so the
daemon is back at the stream before an agent's next request comes.

On a connection kept for the answers: a redis-py pipeline takes a connection from the pool,
checks it and gives it back on every answer, which was a fifth of what an answer costs after
the resolve. Like the pool, it first checks that the server has not closed the connection
(an idle timeout, CLIENT KILL, a restart). On a Redis Cluster the answer and the
acknowledgement go through the cluster client instead, each to the node of its key (a
`reply_to` may live in another slot than the namespace).
"""

from __future__ import annotations

import hashlib
from collections import deque

import redis
from redis.connection import Connection
from redis.exceptions import NoScriptError

from mnemod.redisio.connection import FAILOVER_ERRORS, is_cluster
from mnemod.redisio.keys import GROUP, Keys
from mnemod.redisio.rpc import REPLY_TTL_SECONDS

# RPUSH, then EXPIRE only if the push worked (a script stops at the first error)
_PUSH_REPLY = """
local pushed = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return pushed
"""


class ReplyChannel:
    """`send` answers, then `receive` once per answer sent, in order."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        # called by its digest, loaded on first use (and again after a Redis restart): a
        # pipeline holding a registered script would ask SCRIPT EXISTS on every answer
        self._push_sha = hashlib.sha1(_PUSH_REPLY.encode(), usedforsecurity=False).hexdigest()
        self._connection: Connection | None = None
        self._routed = is_cluster(client)
        self._owed: deque[tuple[str, bytes, object]] = deque()  # sent, replies not read

    @property
    def owed(self) -> int:
        """Answers sent whose replies are not read yet."""
        return len(self._owed)

    def close(self) -> None:
        """Give the connection back to the pool (closed if replies were unread)."""
        if self._connection is not None:
            if self._owed:
                self.drop()
            self.client.connection_pool.release(self._connection)
            self._connection = None

    def send(self, target: str, body: bytes, request_id: str) -> None:
        """Push `body` on `target` (with its expiry) and acknowledge the request. The answer
        and its expiry are one script, so that a `reply_to` holding another type of key gets
        neither (an EXPIRE alone would set a timer on the agent's own key); a waiting BLPOP
        is served as soon as the answer is pushed."""
        if self._routed:
            self._owed.append((target, body, self._routed_push(target, body, request_id)))
            return
        connection = self._connection
        if connection is None:
            connection = self._connection = self.client.connection_pool.get_connection()
        if not self._owed:  # no replies owed, so anything to read means it was closed
            try:
                if connection.can_read():
                    self.drop()
            except (redis.ConnectionError, OSError):
                self.drop()
        packed = connection.pack_commands(  # type: ignore[no-untyped-call]  # redis-py: untyped
            [
                ("EVALSHA", self._push_sha, 1, target, body, REPLY_TTL_SECONDS),
                ("XACK", self.keys.rpc, GROUP, request_id),
            ]
        )
        connection.send_packed_command(packed)  # type: ignore[no-untyped-call]  # reconnects
        self._owed.append((target, body, None))

    def receive(self) -> redis.ResponseError | None:
        """Redis's replies to the oldest answer not received: None when the answer is in
        its `reply_to`, else why Redis refused it. A script Redis does not know (its first
        use, or Redis restarted) is loaded and the push made again. A lost connection
        forgets every answer owed and raises."""
        target, body, pushed = self._owed.popleft()
        if not self._routed:
            pushed = self._read_replies()
        if isinstance(pushed, NoScriptError):
            self._push_sha = self.client.script_load(_PUSH_REPLY)
            try:
                self.client.evalsha(self._push_sha, 1, target, body, REPLY_TTL_SECONDS)
            except redis.ResponseError as exc:
                return exc
            return None
        return pushed if isinstance(pushed, redis.ResponseError) else None

    def drop(self) -> None:
        """Forget the answers whose replies were on the connection, and close it (the next
        answer reconnects)."""
        self._owed.clear()
        if self._connection is not None:
            self._connection.disconnect()  # type: ignore[no-untyped-call]  # redis-py: untyped

    def _read_replies(self) -> object:
        """Redis's replies to one push: the push's (an error reply as its exception, not
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
                self.drop()  # the replies still owed went with it
                raise
        return replies[0]

    def _routed_push(self, target: str, body: bytes, request_id: str) -> object:
        """The push and the acknowledgement as two commands of the cluster client, each
        sent to its key's node (and after a MOVED, to the new one); the push's reply."""
        try:
            pushed: object = self.client.evalsha(self._push_sha, 1, target, body, REPLY_TTL_SECONDS)
        except FAILOVER_ERRORS:
            raise
        except redis.ResponseError as exc:
            pushed = exc
        self.client.xack(self.keys.rpc, GROUP, request_id)
        return pushed
