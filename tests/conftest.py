"""Shared fixtures: one real, private redis-server per test session.

It is started by the daemon's own embedded-Redis code on a unix socket in a temp folder (no
TCP port), so every test run also tests the embedded default, and no test can touch a
Redis anyone else uses. Without redis-server on PATH the Redis tests fail, loudly.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import INSTALL_HINT, EmbeddedRedis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (`unix://…`) of the session's private redis-server."""
    if shutil.which("redis-server") is None:
        pytest.fail(f"redis-server is not on PATH; the tests need a real one: {INSTALL_HINT}")
    folder: Path = tmp_path_factory.mktemp("redis")
    with EmbeddedRedis(folder) as server:
        yield server.url


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client of the private server, emptied before each test."""
    client = connect(redis_server, socket_timeout=5.0)
    client.flushall()
    try:
        yield client
    finally:
        client.close()
