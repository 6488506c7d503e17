"""Connecting, version check, ACL URLs without leaking the password, and backoff."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from mnemod.errors import InvalidInputError, RedisUnavailableError
from mnemod.redisio.connection import Backoff, check_version, connect, parse_version


def test_connect_unix_url(redis_server: str) -> None:
    client = connect(redis_server)
    assert client.ping()
    assert client.set("mnemod:{ns}:probe", "é") and client.get("mnemod:{ns}:probe") == "é"
    assert check_version(client) >= (6, 2, 0)
    client.close()


def test_unix_url_relative_to_the_working_folder(
    redis_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`unix://.mnemod/redis/redis.sock`, as the README writes it, is a path from the
    working folder, not a host `.mnemod`; credentials and options are kept."""
    socket = Path(redis_server.removeprefix("unix://"))
    monkeypatch.chdir(socket.parent.parent)
    relative = f"{socket.parent.name}/{socket.name}"
    client = connect(f"unix://{relative}")
    assert client.connection_pool.connection_kwargs["path"] == str(socket)
    assert client.ping()
    client.close()
    options = connect(f"unix://u:p@{relative}?db=2").connection_pool.connection_kwargs
    assert (options["path"], options["db"], options["password"]) == (str(socket), 2, "p")


def test_acl_user_and_password_in_url(redis_client: redis.Redis, redis_server: str) -> None:
    redis_client.acl_setuser(
        "agent", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"]
    )
    try:
        path = redis_server.removeprefix("unix://")
        good = connect(f"unix://agent:s3cret@{path}")
        assert good.acl_whoami() == "agent"
        good.close()
        bad_url = f"unix://agent:wrong@{path}"
        with pytest.raises(RedisUnavailableError) as caught:
            check_version(connect(bad_url), bad_url)
        assert "wrong" not in str(caught.value)
        assert "authentication failed" in str(caught.value)
    finally:
        redis_client.acl_deluser("agent")


def test_unreachable_server_is_reported_without_password(tmp_path: object) -> None:
    url = "unix://user:hunter2@/nonexistent/redis.sock"
    with pytest.raises(RedisUnavailableError) as caught:
        check_version(connect(url, socket_timeout=0.5), url)
    assert "hunter2" not in str(caught.value)
    assert "unreachable" in str(caught.value)


@pytest.mark.parametrize("url", ["http://host", "localhost:6379", ""])
def test_bad_scheme(url: str) -> None:
    with pytest.raises(InvalidInputError):
        connect(url)


def test_tcp_and_tls_urls_parse() -> None:
    client = connect("redis://u:p@example.invalid:6380/2")
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("example.invalid", 6380, 2)
    assert (kwargs["username"], kwargs["password"]) == ("u", "p")
    tls = connect("rediss://example.invalid:6380")
    assert tls.connection_pool.connection_class.__name__ == "SSLConnection"


def test_parse_version() -> None:
    assert parse_version("7.0.15") == (7, 0, 15)
    assert parse_version("6.2") == (6, 2, 0)
    assert parse_version("255.255.255") == (255, 255, 255)
    assert parse_version("") == (0, 0, 0)
    assert parse_version("7.2.4-rc1") == (7, 2, 4)


def test_backoff_grows_caps_and_resets() -> None:
    slept: list[float] = []
    backoff = Backoff(base=0.1, cap=1.0, factor=2.0, jitter=0.0, sleep=slept.append)
    delays = [backoff.wait() for _ in range(6)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert slept == delays
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)


def test_backoff_jitter_stays_in_range() -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=0.5, rand=lambda: 1.0, sleep=lambda _: None)
    assert backoff.next_delay() == pytest.approx(0.5)
    low = Backoff(base=1.0, cap=8.0, jitter=0.5, rand=lambda: 0.0, sleep=lambda _: None)
    assert low.next_delay() == pytest.approx(1.0)
    many = Backoff(base=1.0, cap=8.0, jitter=0.5, sleep=lambda _: None)
    assert all(0.5 <= many.next_delay() <= 8.0 for _ in range(200))


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(base=0)
    with pytest.raises(ValueError):
        Backoff(base=2, cap=1)


def test_a_sentinel_url_names_its_sentinels_service_db_and_credentials() -> None:
    """`redis+sentinel://user:pw@h1:p1,h2/service/db?options`: the user and password and
    the options are the master's, `sentinel_*` ones the sentinels'; no port means 26379.
    Connecting is lazy: nothing listens there."""
    url = (
        "redis+sentinel://agent:s3cret@127.0.0.1:1,localhost/mymaster/2"
        "?sentinel_password=watch&socket_keepalive=true"
    )
    client = connect(url, socket_timeout=0.5, name="probe")
    pool = client.connection_pool
    options = pool.connection_kwargs
    assert (pool.service_name, options["db"]) == ("mymaster", 2)  # type: ignore[attr-defined]
    assert (options["username"], options["password"]) == ("agent", "s3cret")
    assert options["socket_keepalive"] is True and options["client_name"] == "probe"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    kwargs = [s.connection_pool.connection_kwargs for s in sentinels]
    assert [(k["host"], k["port"]) for k in kwargs] == [("127.0.0.1", 1), ("localhost", 26379)]
    assert all(k["password"] == "watch" and k.get("username") is None for k in kwargs)
    with pytest.raises(RedisUnavailableError) as caught:
        check_version(client, url)
    assert "s3cret" not in str(caught.value) and "watch" not in str(caught.value)


def test_a_tls_sentinel_url_speaks_tls_to_the_master_and_the_sentinels() -> None:
    client = connect("rediss+sentinel://127.0.0.1:1/mymaster?ssl_cert_reqs=none")
    pool = client.connection_pool
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
    (sentinel,) = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert sentinel.connection_pool.connection_kwargs["ssl_cert_reqs"] == "none"
    assert sentinel.connection_pool.connection_class.__name__ == "SSLConnection"


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://127.0.0.1:26379",  # no service
        "redis+sentinel://127.0.0.1:x/mymaster",
        "redis+cluster://user:pw@127.0.0.1:1,127.0.0.1:/",
        "redis+cluster://127.0.0.1:7000/1",  # a cluster has no db 1
        "redis+other://127.0.0.1",
    ],
)
def test_malformed_cluster_and_sentinel_urls_are_refused_without_password(url: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        connect(url)
    assert "pw" not in str(caught.value).replace("redis.url", "")


def test_an_unreachable_cluster_is_reported_without_password() -> None:
    """A cluster client asks for the layout at once: no node answering is an outage."""
    url = "redis+cluster://user:hunter2@127.0.0.1:1,127.0.0.1:2"
    with pytest.raises(RedisUnavailableError) as caught:
        connect(url, socket_timeout=0.5)
    assert "hunter2" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)
