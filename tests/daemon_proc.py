"""`mnemod run` as a real child process for the daemon tests.

Each daemon runs in its own process group (so a test can kill -9 it like a crash would);
stdout and stderr (JSON log lines) go to files next to the data folder, so a failing test
can show them. The embedded redis-server starts its own session on purpose (it must outlive
a crashed daemon), so `DaemonFactory.cleanup` also stops every server found through the
pidfiles of the data folders it handed out: no test leaves a process behind. A test that
passed must also leave no key that should expire and never does in those servers
(`guards.keys_without_ttl`, as tests/conftest.py checks in the session's).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from guards import keys_without_ttl
from helpers import wait_until
from mnemod.redisio.connection import connect
from mnemod.redisio.keys import GROUP, Keys
from mnemod.store.paths import NamespacePaths
from mnemod.store.recovery import read_committed

KEYS = Keys("mnemod", "default")
Client = Any
"""A redis-py client with decode_responses=True: replies are str, which redis-py's stubs
(typed `bytes | str`) cannot express, so the tests use this alias."""
FAST = {
    # quick enough for tests, the same code paths as production
    "MNEMOD_SCHEDULE_HEARTBEAT": "1s",
    "MNEMOD_SCHEDULE_SNAPSHOT": "250ms",
    "MNEMOD_DAEMON_BLOCK": "200ms",
    "MNEMOD_DAEMON_DRAIN_DEADLINE": "30s",
    "MNEMOD_LOG_FORMAT": "json",
    "MNEMOD_LOG_LEVEL": "info",
}


def clean_environ(extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without any MNEMOD_* setting of the machine, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env.update(FAST)
    env.update(extra)
    return env


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def stopped(pid: int) -> bool:
    """Every thread of the process is stopped (SIGSTOP takes effect a moment after kill)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(t / "stat").read_text().rpartition(")")[2].split()[0] for t in tasks]
    except OSError:
        return False
    return bool(states) and all(state in ("T", "t") for state in states)


class DaemonProc:
    """One `mnemod run` process."""

    def __init__(
        self,
        data_dir: Path,
        logs_dir: Path,
        name: str,
        *,
        redis_url: str | None = None,
        config: Path | None = None,
        env: dict[str, str] | None = None,
        namespace: str = "default",
    ) -> None:
        self.data_dir = data_dir
        self.redis_url = redis_url
        self.config = config
        self.namespace = namespace
        self.env = clean_environ(env or {})
        self.stdout_path = logs_dir / f"{name}.out"
        self.stderr_path = logs_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> DaemonProc:
        args = [sys.executable, "-m", "mnemod.cli.main", "run", "--data-dir", str(self.data_dir)]
        if self.redis_url:
            args += ["--redis-url", self.redis_url]
        if self.config is not None:
            args += ["--config", str(self.config)]
        if self.namespace != "default":
            args += ["--namespace", self.namespace]
        # append: a restarted daemon keeps the earlier runs' output for the post-mortem
        with self.stdout_path.open("ab") as out, self.stderr_path.open("ab") as err:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def kill9(self) -> None:
        """A crash: SIGKILL the daemon's whole process group and reap it."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    # -- what it said --------------------------------------------------------------------
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def log_events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if not self.stderr_path.exists():
            return found
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def count_events(self, name: str) -> int:
        return sum(1 for record in self.log_events() if record.get("event") == name)

    def wait_log(self, name: str, at_least: int = 1, timeout: float = 20.0) -> None:
        def logged() -> bool:
            if self.count_events(name) >= at_least:
                return True
            if not self.running():
                raise AssertionError(f"daemon exited before logging {name}:\n{self.tail()}")
            return False

        logged.__name__ = f"log_{name.replace('.', '_')}"
        wait_until(logged, timeout=timeout, interval=0.05)

    def url_from_stdout(self, timeout: float = 20.0) -> str:
        def printed() -> str:
            for word in self.stdout().split():
                if word.startswith("unix://"):
                    return word
            if not self.running():
                raise AssertionError(f"daemon exited before printing its URL:\n{self.tail()}")
            return ""

        return wait_until(printed, timeout=timeout, interval=0.05)

    def tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class DaemonFactory:
    """Hands out daemons and data folders; `cleanup()` leaves no process behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.daemons: list[DaemonProc] = []
        self.data_dirs: list[Path] = []
        self.clients: list[Client] = []
        self.urls: set[str] = set()

    def data_dir(self, name: str = "data") -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        self.data_dirs.append(path)
        return path

    def daemon(self, data_dir: Path, **kwargs: Any) -> DaemonProc:
        name = f"daemon{len(self.daemons)}"
        proc = DaemonProc(data_dir, self.root, name, **kwargs)
        self.daemons.append(proc)
        return proc

    def client(self, url: str) -> Client:
        client = connect(url, socket_timeout=10.0)
        self.clients.append(client)
        self.urls.add(url)
        return client

    def leaked_keys(self) -> list[str]:
        """Keys that never expire but should (`guards.keys_without_ttl`) in the servers the
        test talked to (those still up: a test may have stopped one)."""
        found: list[str] = []
        for url in sorted(self.urls):
            client = connect(url, socket_timeout=5.0)
            try:
                found += sorted(keys_without_ttl(client))
            except redis.ConnectionError:
                continue
            finally:
                client.close()
        return found

    def embedded_pids(self) -> list[int]:
        """Live redis-servers started for the data folders of this test (those it asked
        for, and any other a daemon of it ran on)."""
        pids = []
        for data_dir in dict.fromkeys([*self.data_dirs, *(p.data_dir for p in self.daemons)]):
            with contextlib.suppress(OSError, ValueError):
                pid = int((data_dir / "redis" / "redis.pid").read_text().strip())
                if alive(pid):
                    pids.append(pid)
        return pids

    def cleanup(self) -> None:
        for client in self.clients:
            client.close()
        for proc in self.daemons:
            if proc.running():
                proc.kill9()
        for pid in self.embedded_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_until(lambda p=pid: not alive(p), timeout=10)  # type: ignore[misc]

    def report(self) -> Iterator[str]:
        for proc in self.daemons:
            yield f"--- {proc.stderr_path.name}\n{proc.tail()}"


# -- Redis-side checks shared by the tests ---------------------------------------------------
def pending(client: Client) -> int:
    try:
        summary = client.xpending(KEYS.events, GROUP)
    except redis.ResponseError:
        return 0  # no group yet: nothing was read, nothing is pending
    return int(summary.get("pending", 0)) if summary else 0


def unread(client: Client) -> int:
    """Events not yet delivered to the daemon (the group's lag)."""
    try:
        groups = client.xinfo_groups(KEYS.events)
    except redis.ResponseError:
        return int(client.xlen(KEYS.events))
    for group in groups:
        if group["name"] == GROUP:
            lag = group.get("lag")
            if lag is None:  # lag unknown (after a trim): compare the ids
                info = client.xinfo_stream(KEYS.events)
                return 0 if group["last-delivered-id"] == info["last-generated-id"] else 1
            return int(lag)
    return int(client.xlen(KEYS.events))


def index_entries(data_dir: Path, namespace: str = "default") -> list[dict[str, Any]]:
    """The committed L3 entries (checkpoint + change log), as index.json would hold them."""
    state = read_committed(NamespacePaths(data_dir, namespace))
    return [e.to_dict() for e in state.entries.values()]


def committed_l2(data_dir: Path, namespace: str = "default") -> list[dict[str, Any]]:
    state = read_committed(NamespacePaths(data_dir, namespace))
    return [e.to_dict() for e in state.l2.values()]


def index_last_event_id(data_dir: Path, namespace: str = "default") -> str | None:
    return read_committed(NamespacePaths(data_dir, namespace)).last_event_id


def history(data_dir: Path, namespace: str = "default") -> list[dict[str, Any]]:
    path = data_dir / namespace / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def add_event(client: Client, content: str, **data: Any) -> str:
    payload = {"type": "preference", "content": content, "importance": 3, **data}
    return str(client.xadd(KEYS.events, {"op": "add", "data": json.dumps(payload)}))


@contextlib.contextmanager
def managed(root: Path) -> Iterator[DaemonFactory]:
    """The body of each daemon test module's `daemons` fixture."""
    factory = DaemonFactory(root)
    leaked: list[str] = []
    try:
        yield factory
        leaked = factory.leaked_keys()  # when the test passed: else its own error says more
    finally:
        try:
            factory.cleanup()
        finally:
            for text in factory.report():
                print(text)  # shown by pytest when the test failed
    assert not leaked, f"keys that should expire and never do: {leaked[:10]}"


def distinct_content(rng: random.Random, words: int = 5) -> str:
    """Content that shares no keyword with any other (random letter words): never merged."""
    return " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(9)) for _ in range(words)
    )


def serving_one_fact(daemons: DaemonFactory, data_dir: Path) -> tuple[DaemonProc, Client]:
    """A daemon on `data_dir` whose index holds one memory (`tz`, the user's timezone),
    and a client of its Redis."""
    proc = daemons.daemon(data_dir).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    add_event(client, "User prefers the Asia/Taipei timezone", id="tz")
    wait_until(lambda: [e["id"] for e in index_entries(data_dir)] == ["tz"], 10)
    return proc, client
