"""A tiny sd_notify(3) client: tell systemd we are ready, alive, reloading or stopping.

No dependency: one AF_UNIX datagram per message to the socket named by `NOTIFY_SOCKET`
(a path, or `@name` for an abstract socket). With no `NOTIFY_SOCKET` (a terminal, Docker,
tests) every call is a no-op that returns False, so callers never need to check.

    notifier = Notifier.from_environ()
    notifier.ready("serving 3 namespaces")
    interval = watchdog_interval()          # seconds between WATCHDOG=1 pings, or None
    notifier.watchdog()
    notifier.stopping("draining")

Children (the embedded redis-server) must not inherit `NOTIFY_SOCKET`: start them with
`child_environ()`, or they may tell systemd they are ready on the daemon's behalf.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping

NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Sends sd_notify messages; a no-op when `address` is None."""

    def __init__(self, address: str | None) -> None:
        self.address = _socket_address(address) if address else None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET") or None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, **fields: str | int) -> bool:
        """Send `KEY=value` lines (keys upper-cased); True when the datagram was sent."""
        if self.address is None:
            return False
        lines = [f"{key.upper()}={_one_line(str(value))}" for key, value in fields.items()]
        payload = ("\n".join(lines) + "\n").encode()
        with self._lock:
            try:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.sendto(payload, self.address)
            except OSError:
                # systemd went away or the socket is gone: nothing to tell anyone.
                return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify(ready=1, **_status(status))

    def status(self, text: str) -> bool:
        return self.notify(status=text)

    def watchdog(self) -> bool:
        return self.notify(watchdog=1)

    def reloading(self, status: str | None = None) -> bool:
        """RELOADING=1 with the monotonic timestamp newer systemd (Type=notify-reload) wants."""
        now_usec = time.monotonic_ns() // 1000
        return self.notify(reloading=1, monotonic_usec=now_usec, **_status(status))

    def stopping(self, status: str | None = None) -> bool:
        return self.notify(stopping=1, **_status(status))

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


def watchdog_interval(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of `WATCHDOG_USEC`), or None when not asked.

    `WATCHDOG_PID`, when set, must be this process: the pings are not for a child.
    """
    env = os.environ if environ is None else environ
    usec_text = env.get("WATCHDOG_USEC", "")
    if not usec_text:
        return None
    watchdog_pid = env.get("WATCHDOG_PID", "")
    if watchdog_pid:
        try:
            if int(watchdog_pid) != (os.getpid() if pid is None else pid):
                return None
        except ValueError:
            return None
    try:
        usec = int(usec_text)
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


def child_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment without the sd_notify variables, for child processes."""
    env = os.environ if environ is None else environ
    return {key: value for key, value in env.items() if key not in NOTIFY_VARIABLES}


def _socket_address(address: str) -> str | bytes:
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def _status(text: str | None) -> dict[str, str]:
    return {} if text is None else {"status": text}


def _one_line(text: str) -> str:
    # A newline would start a new KEY=value assignment: keep each value on its line.
    return text.replace("\r", " ").replace("\n", " ")
