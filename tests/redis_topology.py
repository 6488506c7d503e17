"""Real Redis topologies on loopback for the cluster and sentinel tests: redis-servers on
free ports, each in its own temp folder, stopped (and waited for) afterwards.

`LocalCluster`: masters joined with `redis-cli --cluster create`, a replica each, with a
short node timeout so a failover takes seconds. `LocalSentinel`: a master, a replica and
three sentinels watching them.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self, cast

import redis

from daemon_proc import distinct_content
from helpers import wait_until
from mnemod.client import Client as AgentClient
from mnemod.errors import MnemodError

NODE_TIMEOUT_MS = 2000
SERVICE = "mnemod-master"


def free_port(bus: bool = False) -> int:
    """A free loopback port (and, with `bus`, its cluster bus port, 10000 above, too)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if not bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Server:
    """One redis-server (or redis-sentinel) process on a loopback port."""

    def __init__(self, folder: Path, port: int, config: list[str], sentinel: bool = False):
        self.folder = folder
        self.port = port
        self.config = config
        folder.mkdir(parents=True, exist_ok=True)
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {folder}",
            "save ''",
            f"logfile {folder / 'redis.log'}",
            *config,
        ]
        self.conffile = folder / ("sentinel.conf" if sentinel else "redis.conf")
        if not self.conffile.exists():  # a restart keeps what a sentinel wrote there
            self.conffile.write_text("\n".join(lines) + "\n")
        args = ["redis-server", str(self.conffile)] + (["--sentinel"] if sentinel else [])
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        # Any: the CLUSTER, SENTINEL and ROLE commands go through untyped execute_command
        self.client: Any = redis.Redis(
            host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5
        )
        wait_until(self._answers, timeout=20)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            assert self.process.poll() is None, f"redis on {self.port} exited"
            return False

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing written on the way out."""
        self.client.close()
        if self.alive():
            self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        self.client.close()
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class Topology:
    """Servers started together (`start`), all stopped at the end of a `with` block, or
    when setting them up fails half-way (`setting_up`)."""

    def __init__(self) -> None:
        self.started: list[Server] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, folder: Path, port: int, config: list[str], sentinel: bool = False) -> Server:
        server = Server(folder, port, config, sentinel)
        self.started.append(server)
        return server

    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in reversed(self.started):  # the sentinels first: no failover on the way
            server.stop()


class LocalCluster(Topology):
    """`masters` masters with a replica each, all slots assigned."""

    def __init__(self, root: Path, masters: int = 3) -> None:
        super().__init__()
        with self.setting_up():
            self._create(root, masters)

    def _create(self, root: Path, masters: int) -> None:
        config = [
            "cluster-enabled yes",
            f"cluster-node-timeout {NODE_TIMEOUT_MS}",
            "appendonly no",
            "cluster-require-full-coverage no",
        ]
        self.servers: list[Server] = []
        for n in range(masters * 2):
            own = [*config, f"cluster-config-file {root}/n{n}.conf"]
            self.servers.append(self.start(root / f"node{n}", free_port(bus=True), own))
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(s.address for s in self.servers),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
        wait_until(self._settled, timeout=30, interval=0.2)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(s.address for s in self.servers[:2])

    def _settled(self) -> bool:
        for server in self.servers:
            if not server.alive():
                continue
            info = cast(dict[str, Any], server.client.cluster("INFO"))
            if str(info.get("cluster_state")) != "ok":
                return False
        return len(self.masters()) * 2 == len([s for s in self.servers if s.alive()])

    def node_id(self, server: Server) -> str:
        return str(server.client.cluster("MYID"))

    def role(self, server: Server) -> str:
        return str(cast(list[Any], server.client.execute_command("ROLE"))[0])

    def masters(self) -> list[Server]:
        return [s for s in self.servers if s.alive() and self.role(s) == "master"]

    def owner(self, slot: int) -> Server:
        """The master serving `slot`."""
        live = next(s for s in self.servers if s.alive())
        for start, end, master, *_ in cast(
            list[list[Any]], live.client.execute_command("CLUSTER", "SLOTS")
        ):
            if int(start) <= slot <= int(end):
                port = int(master[1])
                return next(s for s in self.servers if s.port == port)
        raise AssertionError(f"slot {slot} is not served")

    def replica_of(self, master: Server) -> Server:
        for server in self.servers:
            if server.alive() and self.role(server) == "slave":
                info = server.client.info("replication")
                if int(info.get("master_port", -1)) == master.port:
                    return server
        raise AssertionError(f"no replica of the master on {master.port}")

    def migrate_slot(self, slot: int, target: Server) -> int:
        """Move `slot` with its keys to `target` as `redis-cli --cluster reshard` does:
        IMPORTING/MIGRATING, MIGRATE of its keys in batches, then SETSLOT NODE everywhere.
        Returns how many keys moved."""
        source = self.owner(slot)
        source_id, target_id = self.node_id(source), self.node_id(target)
        target.client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while True:
            names = cast(
                list[str], source.client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 50)
            )
            if not names:
                break
            source.client.execute_command(
                "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *names
            )
            moved += len(names)
        for server in self.masters():
            server.client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def fail_over(self, master: Server) -> Server:
        """Kill `master` (SIGKILL), wait until its replica serves its slots, then start the
        dead one again: it comes back as the new master's replica. Returns the new master.
        What the replica had not received when the master died is lost."""
        replica = self.replica_of(master)
        master.kill()
        wait_until(lambda: self.role(replica) == "master", timeout=30, interval=0.1)
        wait_until(self._state_ok, timeout=30, interval=0.1)
        index = self.servers.index(master)
        back = self.servers[index] = self.start(master.folder, master.port, master.config)
        wait_until(lambda: self._replicates(back), timeout=30, interval=0.1)
        return replica

    def _replicates(self, server: Server) -> bool:
        info = server.client.info("replication")
        return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")

    def _state_ok(self) -> bool:
        return all(
            str(cast(dict[str, Any], s.client.cluster("INFO")).get("cluster_state")) == "ok"
            for s in self.servers
            if s.alive()
        )


class LocalSentinel(Topology):
    """A master, one replica, three sentinels watching them as `SERVICE`."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        with self.setting_up():
            self._create(root)

    def _create(self, root: Path) -> None:
        self.master = self.start(root / "master", free_port(), ["appendonly no"])
        self.replica = self.start(
            root / "replica",
            free_port(),
            ["appendonly no", f"replicaof 127.0.0.1 {self.master.port}"],
        )
        wait_until(self._replicating, timeout=20, interval=0.1)
        self.sentinels = [
            self.start(
                root / f"sentinel{n}",
                free_port(),
                [
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 2",
                    f"sentinel down-after-milliseconds {SERVICE} 1000",
                    f"sentinel failover-timeout {SERVICE} 5000",
                ],
                sentinel=True,
            )
            for n in range(3)
        ]
        wait_until(self._watched, timeout=30, interval=0.2)

    @property
    def url(self) -> str:
        hosts = ",".join(s.address for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    @property
    def servers(self) -> list[Server]:
        return [self.master, self.replica]

    def _replicating(self) -> bool:
        info = self.replica.client.info("replication")
        return str(info.get("master_link_status")) == "up"

    def _watched(self) -> bool:
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.ResponseError):
                state = sentinel.client.execute_command("SENTINEL", "MASTER", SERVICE)
                fields = _pairs(state)
                if int(fields.get("num-other-sentinels", 0)) < 2:
                    return False
                if int(fields.get("num-slaves", 0)) < 1:
                    return False
                continue
            return False
        return True

    def master_port(self) -> int:
        host_port = self.sentinels[0].client.execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
        )
        return int(cast(list[str], host_port)[1])

    def fail_over(self) -> Server:
        """`SENTINEL FAILOVER`: the replica becomes the master; returns it."""
        before = self.master_port()
        self.sentinels[0].client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_until(lambda: self.master_port() != before, timeout=30, interval=0.1)
        new = next(s for s in self.servers if s.port == self.master_port())
        wait_until(lambda: _role(new) == "master", timeout=30, interval=0.1)
        return new


def _role(server: Server) -> str:
    return str(cast(list[Any], server.client.execute_command("ROLE"))[0])


def _pairs(reply: object) -> dict[str, str]:
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = cast(list[str], reply)
    return dict(zip(items[0::2], items[1::2], strict=False))


class Ingest:
    """An agent adding distinct memories on its own thread, each with `replicas=1`, as one
    that must not lose an add would: an add counts as confirmed once Redis said a replica
    holds it; one that failed or was not confirmed is sent again with the same id."""

    def __init__(self, url: str, namespace: str, seed: int) -> None:
        self.client = AgentClient(url, namespace, replicas=1, replica_timeout=2.0)
        self.rng = random.Random(seed)
        self.confirmed: list[str] = []
        self.retried = 0
        self.errors: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ingest-{namespace}")

    def __enter__(self) -> Ingest:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self.client.close()

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` more adds are confirmed."""
        target = len(self.confirmed) + count
        wait_until(lambda: len(self.confirmed) >= target, timeout=timeout, interval=0.05)

    def _run(self) -> None:
        while not self._stop.is_set():
            entry_id = self.client.new_id()
            content = distinct_content(self.rng)
            while not self._stop.is_set():
                try:
                    self.client.add(content, type="context", id=entry_id)
                except (MnemodError, redis.RedisError) as exc:  # the failover, or a MOVED
                    name = type(exc).__name__
                    self.errors[name] = self.errors.get(name, 0) + 1
                    self.retried += 1
                    self._stop.wait(0.05)
                    continue
                self.confirmed.append(entry_id)
                break
