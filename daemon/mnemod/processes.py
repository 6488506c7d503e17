"""Whether a process id is alive: shared by the embedded Redis, the lease take-over and
`mnemod doctor`."""

from __future__ import annotations

import os
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
