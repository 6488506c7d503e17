"""The embedded default: a private redis-server on a unix socket inside the data folder.

With no `redis.url`, `mnemod run` owns a redis-server that listens on no TCP port, only on a
unix socket (mode 0700 unless told otherwise), with append-only persistence so events agents
queued survive a restart of the daemon or of Redis. If the daemon died and left its
redis-server running, the next start reuses it (the queued events are in it); a stale
pidfile or socket is cleaned up so orphans never pile up. The test suite runs on this same
code, so the embedded default is exercised on every test run.

Daemons of several namespaces on one data folder share the server: each connects under a
name starting with `DAEMON_CLIENT`, the last one to stop shuts it down, and one whose
server went away anyway (stopped, crashed, killed) starts it again (`revive`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from mnemod.errors import RedisUnavailableError
from mnemod.files.atomic import atomic_write_text, make_dirs
from mnemod.processes import pid_alive
from mnemod.redisio.socket_path import socket_path_for

log = structlog.get_logger("mnemod.redis")

DAEMON_CLIENT = "mnemod-daemon:"
"""The start of the client name a daemon connects under (CLIENT SETNAME): a server that one
of them still uses is left running when another stops."""

_OUTLIVING: list[subprocess.Popen[bytes]] = []
"""Servers this process started and left running for another daemon: kept referenced so
that Python does not warn about a child it never waited for, and reaped once they end."""

INSTALL_HINT = (
    "install redis-server (Debian/Ubuntu/Raspberry Pi OS: apt-get install redis-server; "
    "macOS: brew install redis), or set redis.url to use an existing Redis"
)


class EmbeddedRedis:
    """A redis-server owned by this process (or adopted after the previous owner died)."""

    def __init__(
        self,
        folder: Path,
        binary: str = "redis-server",
        *,
        socket_perm: int = 0o700,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.folder = Path(folder).absolute()
        self.binary = binary
        self.socket_perm = socket_perm
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.pidfile = self.folder / "redis.pid"
        self.conffile = self.folder / "redis.conf"
        self.logfile = self.folder / "redis.log"
        self.socket_path = socket_path_for(self.folder)
        self.pid: int | None = None
        self.reused = False
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> str:
        """Start (or adopt) the server and return its `unix://` URL once it answers PING."""
        executable = self._find_binary()
        # The folder is as open as the socket (group may traverse when the group may connect).
        folder_mode = 0o750 if self.socket_perm & 0o070 else 0o700
        data_dir = self.folder.parent
        if not data_dir.is_dir():
            make_dirs(data_dir)
            if self.socket_perm & 0o070:  # the group reaches the socket through it
                data_dir.chmod(data_dir.stat().st_mode & 0o777 | 0o010)
        self.folder.mkdir(parents=True, exist_ok=True, mode=folder_mode)
        self.folder.chmod(folder_mode)
        if self.socket_path.parent != self.folder:
            log.info(
                "redis.embedded.socket_fallback",
                folder_len=len(str(self.folder)),
                socket=str(self.socket_path),
            )
        with self._start_lock():
            running = self._running_pid()
            if running is not None:
                self.pid = running
                self.reused = True
                self._wait_ready(None)
                log.info("redis.embedded.reused", pid=running, socket=str(self.socket_path))
                return self.url
            self._clean_stale()
            self._write_config()
            self._spawn(executable)
        return self.url

    def revive(self) -> bool:
        """Start the server again when its process is gone (another daemon on this folder
        stopped it, it crashed or was killed); True when one was started or adopted. A live
        server that is merely slow to answer is left alone."""
        pid = self._pidfile_pid()
        if pid is not None and _is_redis_process(pid, Path(self.binary).name):
            return False
        if self._process is not None:
            try:  # ours: a shutdown still writing its AOF ends before a new server starts
                self._process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                return False
            self._process = None
        self.start()
        return True

    def release(self, leaving: str = "") -> None:
        """A daemon's stop: `stop`, unless the daemon of another namespace still uses the
        server, which then stays up for it. `leaving`: the owner id of a daemon exiting with
        its connections still open (a forced exit), not to be counted as a user."""
        users = self._daemons_connected() if self.pid is not None else []
        if leaving:
            users = [name for name in users if not name.endswith(f":{leaving}")]
        if not users:
            self.stop()
            return
        log.info("redis.embedded.left_running", pid=self.pid, used_by=users)
        if self._process is not None:
            _OUTLIVING.append(self._process)
        self.pid = None
        self._process = None

    def stop(self) -> None:
        """SHUTDOWN (the AOF is flushed), wait for the process, kill it if it hangs."""
        pid = self.pid
        if pid is None:
            return
        try:
            with self._client(timeout=2.0) as client:
                client.shutdown()
        except redis.RedisError as exc:
            log.warning("redis.embedded.shutdown_failed", pid=pid, error=type(exc).__name__)
        if not self._wait_exit(pid, self.stop_timeout):
            log.warning("redis.embedded.killed", pid=pid, reason="did not shut down in time")
            _signal(pid, signal.SIGKILL)
            self._wait_exit(pid, self.stop_timeout)
        self._remove_leftovers()
        self.pid = None
        self._process = None
        _OUTLIVING[:] = [process for process in _OUTLIVING if process.poll() is None]
        log.info("redis.embedded.stopped", pid=pid)

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- start helpers -------------------------------------------------------------------
    def _find_binary(self) -> str:
        found = shutil.which(self.binary)
        if found is None:
            raise RedisUnavailableError(
                f"redis-server binary {self.binary!r} not found: {INSTALL_HINT}"
            )
        return found

    @contextlib.contextmanager
    def _start_lock(self) -> Iterator[None]:
        """Two daemons starting on one data folder must not start two servers on one AOF."""
        fd = os.open(self.folder / "redis.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _running_pid(self) -> int | None:
        """The pid of a live server of this folder that answers on our socket, if any."""
        try:
            with self._client(timeout=2.0) as client:
                info = client.info("server")
                folder = client.config_get("dir").get("dir", "")
        except redis.BusyLoadingError:
            return self._pidfile_pid()  # alive and loading its AOF: adopt it
        except (redis.RedisError, OSError):
            return None
        if Path(str(folder)).resolve() != self.folder.resolve():
            return None  # some other server took the socket name: not ours to adopt
        return int(info["process_id"])

    def _daemons_connected(self) -> list[str]:
        """Names of the daemons connected now (this process has closed its own clients)."""
        try:
            with self._client(timeout=2.0) as client:
                listed = client.client_list()
        except (redis.RedisError, OSError):
            return []
        names = (str(entry.get("name", "")) for entry in listed)
        return sorted({name for name in names if name.startswith(DAEMON_CLIENT)})

    def _pidfile_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def _clean_stale(self) -> None:
        """A pidfile naming a live redis-server that does not answer: stop it; then remove
        the stale pidfile and socket so the fresh server starts clean."""
        pid = self._pidfile_pid()
        if pid is not None and _is_redis_process(pid, Path(self.binary).name):
            log.warning("redis.embedded.stale_killed", pid=pid)
            _signal(pid, signal.SIGTERM)
            if not self._wait_exit(pid, self.stop_timeout):
                _signal(pid, signal.SIGKILL)
                self._wait_exit(pid, self.stop_timeout)
        if pid is not None or self.socket_path.exists():
            log.info("redis.embedded.stale_cleaned", pid=pid)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        for leftover in (self.pidfile, self.socket_path):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()

    def _write_config(self) -> None:
        lines = [
            "# Written by mnemod at every start of its embedded redis-server; edits are lost.",
            "port 0",
            f"unixsocket {_quoted(self.socket_path)}",
            f"unixsocketperm {self.socket_perm:o}",
            "daemonize no",
            f"pidfile {_quoted(self.pidfile)}",
            f"dir {_quoted(self.folder)}",
            f"logfile {_quoted(self.logfile)}",
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
        ]
        atomic_write_text(self.conffile, "\n".join(lines) + "\n")

    def _spawn(self, executable: str) -> None:
        with self.logfile.open("ab") as output:
            # A new session: Ctrl-C on the daemon's terminal must not stop Redis before the
            # daemon has drained; the daemon stops it last, in order.
            self._process = subprocess.Popen(
                [executable, str(self.conffile)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
                umask=0o077,  # its append-only file holds memories: private, as ours
            )
        self.pid = self._process.pid
        self.reused = False
        self._wait_ready(self._process)
        log.info("redis.embedded.started", pid=self.pid, socket=str(self.socket_path))

    def _wait_ready(self, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if process is not None and process.poll() is not None:
                raise RedisUnavailableError(
                    f"embedded redis-server exited with code {process.returncode} at start; "
                    f"see {self.logfile}: {_tail(self.logfile)}"
                )
            try:
                with self._client(timeout=1.0) as client:
                    if client.ping():
                        return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RedisUnavailableError(
                    f"embedded redis-server on {self.socket_path} did not answer within "
                    f"{self.start_timeout:g} s; see {self.logfile}"
                )
            time.sleep(0.02)

    # -- shared helpers ------------------------------------------------------------------
    @contextlib.contextmanager
    def _client(self, timeout: float) -> Iterator[redis.Redis]:
        client = redis.Redis(
            unix_socket_path=str(self.socket_path),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),  # probes: one try, the caller decides what failure means
        )
        try:
            yield client
        finally:
            client.close()

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._process is not None and self._process.pid == pid:
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        return _poll(lambda: not pid_alive(pid), timeout)


def _quoted(path: Path) -> str:
    """A path as a redis.conf value: quoted, so that a folder with spaces (`My Projects`)
    or quotes in its name is one argument and not a fatal config error."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return '"' + "".join(escapes.get(char, char) for char in str(path)) + '"'


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _is_redis_process(pid: int, binary_name: str) -> bool:
    """Is `pid` a redis-server? (Never signal a process that merely reused the pid.)"""
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        command = cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        try:
            command = subprocess.run(
                ["ps", "-p", str(pid), "-o", "command="],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return "redis-server" in command or binary_name in command


def _poll(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:])
