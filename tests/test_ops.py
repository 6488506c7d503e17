"""Operator commands against a real daemon: doctor's exit code, status, metrics, and CLI
changes that go through the running daemon."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from daemon_proc import DaemonFactory
from helpers import run_cli, wait_until

pytestmark = pytest.mark.process  # starts processes of its own


def cli(data: Path, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    return run_cli(data, *args, expect=expect)


def checks(data: Path, expect: int) -> dict[str, Any]:
    report = json.loads(cli(data, "doctor", "--json", expect=expect).stdout)
    return {row["check"]: row for row in report["checks"]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_doctor_follows_the_daemon(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    down = checks(data, expect=1)
    assert down["redis"]["state"] == "fail" and "unreachable" in down["redis"]["detail"]
    proc = daemons.daemon(data).start()
    proc.wait_log("daemon.running")  # the log is cheap to poll; each doctor is a CLI run
    wait_until(lambda: cli(data, "doctor", "--quiet", expect=None).returncode == 0, timeout=20)
    up = checks(data, expect=0)
    assert {up[name]["state"] for name in ("redis", "daemon", "leader", "index")} == {"ok"}
    proc.signal(15)
    assert proc.wait_exit() == 0
    stopped = cli(data, "doctor", expect=1).stdout
    assert "FAIL  redis" in stopped  # the embedded server stopped with the daemon


def test_doctor_names_a_killed_daemon_on_a_live_redis(
    daemons: DaemonFactory, redis_server: str
) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data, redis_url=redis_server).start()

    def healthy() -> bool:
        return cli(data, "doctor", "--redis-url", redis_server, "-q", expect=None).returncode == 0

    proc.wait_log("daemon.running")
    wait_until(healthy, timeout=20)
    proc.kill9()
    report = cli(data, "doctor", "--redis-url", redis_server, expect=1).stdout
    assert "OK    redis" in report
    assert f"FAIL  daemon       daemon process {proc.pid} is gone" in report


def test_doctor_reaches_a_socket_that_asks_for_a_password(
    tmp_path: Path, redis_server: str, redis_client: redis.Redis
) -> None:
    """A configured `unix://user:password@/path` is tried like any URL (it was taken for a
    socket path named `user:password@/path`, which never exists, so "unreachable")."""
    redis_client.acl_setuser(
        "agent", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"]
    )
    try:
        url = f"unix://agent:s3cret@{redis_server.removeprefix('unix://')}"
        report = cli(tmp_path / "data", "doctor", "--redis-url", url, expect=1).stdout
        assert "OK    redis" in report
        assert "FAIL  daemon" in report  # none has run: the one failing check
        assert "s3cret" not in report
    finally:
        redis_client.acl_deluser("agent")


def test_status_and_cli_changes_through_the_daemon(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    port = free_port()
    proc = daemons.daemon(data, env={"MNEMOD_METRICS_PORT": str(port)}).start()
    proc.wait_log("daemon.running")
    wait_until(lambda: cli(data, "doctor", "--quiet", expect=None).returncode == 0, timeout=20)
    added = json.loads(cli(data, "add", "The cat is named Miso", "--json").stdout)
    assert added["via"] == "daemon" and added["item"]["content"] == "The cat is named Miso"
    status = json.loads(cli(data, "status", "--json").stdout)
    info = status["namespaces"]["default"]
    assert info["daemon"] == "running"
    assert info["hot"] == 1 and info["pending"] == 0 and info["dead_letters"] == 0
    assert set(info["jobs"]) >= {"gc", "expiry", "snapshot", "trim", "hot_refresh", "heartbeat"}
    resolved = json.loads(cli(data, "resolve", "what is the cat called?", "--json").stdout)
    assert "Miso" in resolved["text"]
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "mnemod_events_applied_total" in body
    assert "mnemod_resolve_seconds" in body
    proc.signal(15)
    assert proc.wait_exit() == 0


def test_config_show_redacts_the_password(tmp_path: Path) -> None:
    out = cli(tmp_path, "config", "show", "--redis-url", "redis://agent:s3cret@redis:6379/0").stdout
    assert "s3cret" not in out
    assert 'url = "redis://agent:***@redis:6379/0"' in out
