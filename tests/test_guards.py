"""The suite's own guards (tests/guards.py) find what they are there to find."""

from __future__ import annotations

import subprocess
import threading

import pytest
import redis

from guards import keys_without_ttl, threads_started


def test_a_key_that_never_expires_but_should_is_found(redis_client: redis.Redis) -> None:
    redis_client.rpush("agent:reply:1", "an answer nobody took")
    redis_client.set("agent:reply:2", "an answer", ex=60)
    redis_client.hset("mnemod:{ns}:m:A1", "content", "the daemon's own")
    redis_client.set("other:{ns}:status", "a configured prefix")
    redis_client.rpush("mnemod:{ns}:reply:3", "an answer on mnemod's own reply key")
    redis_client.sadd("mnemod:{ns}:session:s1", "A1")
    redis_client.sadd("mnemod:{ns}:session:s2", "A1")
    redis_client.expire("mnemod:{ns}:session:s2", 60)
    leaked = {"agent:reply:1", "mnemod:{ns}:reply:3", "mnemod:{ns}:session:s1"}
    assert keys_without_ttl(redis_client) == leaked
    redis_client.delete(*leaked)  # else this test's guard fails it


def test_a_thread_left_running_is_found() -> None:
    before = set(threading.enumerate())
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="left-behind", daemon=True)
    thread.start()
    assert threads_started(before) == [thread]
    release.set()
    thread.join()
    assert threads_started(before) == []


def test_a_unit_test_that_starts_a_process_fails() -> None:
    with pytest.raises(RuntimeError, match="outside the `process` tier"):
        subprocess.run(["true"], check=False)
