"""Processes: whether a pid is alive, and who holds a lease (shared by the embedded
Redis, the lease take-over and `mnemod doctor`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True while `pid` runs. Reaps it first if it is our own exited child; a zombie
    (exited, not reaped: a container's PID 1 may never reap) counts as dead."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, under another user
    return not is_zombie(pid)


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def owner_id() -> str:
    """This process as a lease holder: `host:pid:random` (unique across restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def describe_owner(owner: str | None) -> str:
    """A lease holder as a person reads it: `pid 4207 on host pi4` (or the id as it is)."""
    if not owner:
        return "nobody"
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return f"pid {pid} on host {host}" if host and pid.isdigit() else owner


def owner_is_gone(owner: str) -> bool:
    """True when `owner` (an `owner_id()`) is a process on this host that no longer runs;
    a process on another host cannot be checked and counts as alive."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))
