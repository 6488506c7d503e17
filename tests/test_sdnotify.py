"""sd_notify client: real datagrams to a socket standing in for systemd."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemod.runtime.sdnotify import Notifier, child_environ, watchdog_interval


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    try:
        yield sock, str(path)
    finally:
        sock.close()


def received(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    assert data.endswith("\n")
    return dict(line.split("=", 1) for line in data.splitlines())


def test_ready_status_watchdog_stopping(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("serving")
    assert received(sock) == {"READY": "1", "STATUS": "serving"}
    assert notifier.status("3 namespaces")
    assert received(sock) == {"STATUS": "3 namespaces"}
    assert notifier.watchdog()
    assert received(sock) == {"WATCHDOG": "1"}
    assert notifier.stopping()
    assert received(sock) == {"STOPPING": "1"}
    notifier.close()


def test_reloading_carries_monotonic_usec(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    notifier = Notifier(path)
    before = time.monotonic_ns() // 1000
    assert notifier.reloading("reloading config")
    message = received(sock)
    after = time.monotonic_ns() // 1000
    assert message["RELOADING"] == "1"
    assert message["STATUS"] == "reloading config"
    assert before <= int(message["MONOTONIC_USEC"]) <= after
    notifier.close()


def test_newline_in_status_cannot_forge_a_field(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    notifier = Notifier(path)
    assert notifier.status("bad\nREADY=1")
    assert received(sock) == {"STATUS": "bad READY=1"}
    notifier.close()


def test_abstract_socket() -> None:
    name = f"mnemod-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready()
        assert received(sock) == {"READY": "1"}
        notifier.close()
    finally:
        sock.close()


def test_no_socket_is_a_no_op() -> None:
    notifier = Notifier.from_environ({})
    assert not notifier.enabled
    assert not notifier.ready("x")
    assert not notifier.watchdog()
    assert not notifier.stopping()
    notifier.close()


def test_a_vanished_socket_does_not_raise(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone"))
    assert notifier.enabled
    assert not notifier.watchdog()
    notifier.close()


def test_watchdog_interval_is_half_the_period() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, pid=42) == 15.0


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"WATCHDOG_USEC": ""},
        {"WATCHDOG_USEC": "0"},
        {"WATCHDOG_USEC": "soon"},
        {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"},
        {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"},
    ],
)
def test_watchdog_interval_none_when_not_for_us(environ: dict[str, str]) -> None:
    assert watchdog_interval(environ, pid=42) is None


def test_watchdog_interval_defaults_to_this_process() -> None:
    environ = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(environ) == 1.0


def test_child_environ_drops_notify_variables() -> None:
    environ = {
        "PATH": "/usr/bin",
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": "1",
    }
    assert child_environ(environ) == {"PATH": "/usr/bin"}
