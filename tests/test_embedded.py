"""The embedded redis-server: private unix socket, persistence, reuse after a crash, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from daemon_proc import alive
from helpers import wait_until
from mnemod.errors import RedisUnavailableError
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import DAEMON_CLIENT, EmbeddedRedis
from mnemod.redisio.socket_path import MAX_SOCKET_PATH, socket_path_for

pytestmark = pytest.mark.process  # starts processes of its own

CRASHING_OWNER = """
import sys, time
from pathlib import Path
from mnemod.redisio.embedded import EmbeddedRedis
server = EmbeddedRedis(Path(sys.argv[1]))
print("READY", server.start(), server.pid, flush=True)
time.sleep(600)
"""


def start_and_crash_owner(folder: Path) -> tuple[str, int]:
    """Start the server from a child process, then kill -9 that process (the 'daemon')."""
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_OWNER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        line = next(x for x in owner.stdout if x.startswith("READY"))  # log lines come first
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    _ready, url, pid = line.split()
    return url, int(pid)


@pytest.fixture
def orphans() -> Iterator[list[int]]:
    """Pids of servers a test left without an owner: killed afterwards, whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_start_listens_only_on_a_private_unix_socket(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        assert server.url == f"unix://{tmp_path / 'redis.sock'}"
        client = connect(server.url)
        assert client.ping()
        assert client.config_get("port")["port"] == "0"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("appendfsync")["appendfsync"] == "everysec"
        assert oct((tmp_path / "redis.sock").stat().st_mode & 0o777) == oct(0o700)
        assert (tmp_path / "redis.pid").read_text().strip() == str(server.pid)
        client.close()
        pid = server.pid
        assert pid is not None
    assert not alive(pid)
    assert not (tmp_path / "redis.sock").exists()
    assert not (tmp_path / "redis.pid").exists()


def test_a_folder_with_spaces_and_quotes_in_its_name(tmp_path: Path) -> None:
    """`~/My Projects/agent` is a folder people have: its paths reach redis.conf quoted."""
    folder = tmp_path / 'My "odd" Projects' / "redis"
    with EmbeddedRedis(folder) as server:
        client = connect(server.url)
        assert client.ping()
        assert client.config_get("dir")["dir"] == str(folder)
        client.close()


def test_events_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        client = connect(server.url)
        client.xadd("mnemod:{ns}:events", {"op": "add", "data": "{}"})
        client.close()
    with EmbeddedRedis(tmp_path) as server:
        client = connect(server.url)
        assert client.xlen("mnemod:{ns}:events") == 1
        client.close()


def test_reuses_the_server_left_by_a_crashed_owner(tmp_path: Path, orphans: list[int]) -> None:
    url, pid = start_and_crash_owner(tmp_path)
    orphans.append(pid)
    client = connect(url)
    client.xadd("mnemod:{ns}:events", {"op": "add", "data": "{}"})  # queued while daemon down
    client.close()
    server = EmbeddedRedis(tmp_path)
    with capture_logs() as logs:
        assert server.start() == url
    assert server.reused and server.pid == pid
    assert [e["event"] for e in logs] == ["redis.embedded.reused"]
    client = connect(url)
    assert client.xlen("mnemod:{ns}:events") == 1
    client.close()
    server.stop()
    wait_until(lambda: not alive(pid))


def test_a_server_another_daemon_uses_is_left_running(tmp_path: Path, orphans: list[int]) -> None:
    """Daemons of two namespaces share one folder's server: whichever stops first leaves it
    to the other (connected under a daemon's client name); the last one shuts it down."""
    first, second = EmbeddedRedis(tmp_path), EmbeddedRedis(tmp_path)
    first.start()
    assert first.pid is not None
    orphans.append(first.pid)
    assert second.start() == first.url and second.reused
    other = connect(second.url, name=f"{DAEMON_CLIENT}alice:host:1:a")
    assert other.ping()
    with capture_logs() as logs:
        first.release()
    assert other.ping()
    assert [e["used_by"] for e in logs if e["event"] == "redis.embedded.left_running"] == [
        [f"{DAEMON_CLIENT}alice:host:1:a"]
    ]
    other.close()
    second.release()
    wait_until(lambda: not alive(orphans[0]))


def test_revive_starts_a_server_that_is_gone(tmp_path: Path) -> None:
    """Stopped under a daemon (by another one, or a crash): `revive` starts it again, with
    what its append-only file holds; a live server is left alone."""
    with EmbeddedRedis(tmp_path) as server:
        client = connect(server.url)
        client.xadd("mnemod:{ns}:events", {"op": "add", "data": "{}"})
        assert server.revive() is False  # alive: nothing to do
        client.shutdown()  # as the daemon of another namespace would
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert server.revive() is True
        assert client.xlen("mnemod:{ns}:events") == 1  # a new connection, the same data
        client.close()


def test_stale_pidfile_and_socket_are_cleaned(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "redis.pid").write_text(f"{dead.pid}\n")
    (tmp_path / "redis.sock").write_text("stale")
    with EmbeddedRedis(tmp_path) as server:
        assert not server.reused
        assert connect(server.url).ping()


def test_pidfile_naming_an_unrelated_live_process_is_not_signalled(tmp_path: Path) -> None:
    (tmp_path / "redis.pid").write_text(f"{os.getpid()}\n")
    with EmbeddedRedis(tmp_path) as server:
        assert not server.reused
        assert server.pid != os.getpid()


def test_hung_server_is_stopped_not_orphaned(tmp_path: Path, orphans: list[int]) -> None:
    _url, pid = start_and_crash_owner(tmp_path)
    orphans.append(pid)
    os.kill(pid, signal.SIGSTOP)
    with capture_logs() as logs, EmbeddedRedis(tmp_path, stop_timeout=0.5) as server:
        assert not server.reused
        assert server.pid != pid
        assert connect(server.url).ping()
    assert "redis.embedded.stale_killed" in [e["event"] for e in logs]
    wait_until(lambda: not alive(pid))


def test_long_folder_falls_back_to_a_short_socket_path(tmp_path: Path) -> None:
    folder = tmp_path / ("x" * 60) / ("y" * 60)
    expected = socket_path_for(folder)
    assert expected.parent != folder
    assert len(os.fsencode(expected)) <= MAX_SOCKET_PATH
    assert socket_path_for(folder) == expected  # stable per folder
    assert socket_path_for(tmp_path / "other" / ("y" * 120)) != expected
    with capture_logs() as logs, EmbeddedRedis(folder) as server:
        assert server.url == f"unix://{expected}"
        assert connect(server.url).ping()
    events = [e for e in logs if e["event"] == "redis.embedded.socket_fallback"]
    assert events and events[0]["socket"] == str(expected)
    assert not expected.exists()


def test_missing_binary_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(RedisUnavailableError, match="apt-get install redis-server"):
        EmbeddedRedis(tmp_path, binary="no-such-redis-server-binary").start()


def test_bad_binary_reports_exit(tmp_path: Path) -> None:
    with pytest.raises(RedisUnavailableError, match="exited with code"):
        EmbeddedRedis(tmp_path, binary="false").start()


def test_session_server_is_private(redis_client: redis.Redis) -> None:
    assert redis_client.config_get("port")["port"] == "0"
    assert redis_client.dbsize() == 0
