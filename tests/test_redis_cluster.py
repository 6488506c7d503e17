"""The daemon on a real Redis Cluster (3 masters, a replica each, on loopback): namespaces
served by different masters, a slot migration and a master killed during ingest. An add a
replica had confirmed (WAIT) is in the daemon's files afterwards, and the daemon never
exits."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from daemon_proc import DaemonFactory, index_entries
from helpers import run_cli, wait_until
from mnemod.client import Client as AgentClient
from mnemod.redisio.keys import Keys
from redis_topology import Ingest, LocalCluster, TlsFiles, free_port
from test_redis_acl import DOCS, PASSWORDS, documented_acl, refusals
from test_redis_tls import make_certificates

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster") as topology:
        yield topology


def slot_of(namespace: str) -> int:
    return key_slot(Keys("mnemod", namespace).events.encode())


def namespaces_on_two_masters(cluster: LocalCluster) -> tuple[str, str]:
    """Two namespaces whose slots different masters serve."""
    first = "alpha"
    owner = cluster.owner(slot_of(first)).port
    second = next(
        f"beta{n}" for n in range(100) if cluster.owner(slot_of(f"beta{n}")).port != owner
    )
    return first, second


def stored_ids(data_dir: Path, namespace: str) -> set[str]:
    return {str(e["id"]) for e in index_entries(data_dir, namespace)}


def test_namespaces_on_two_masters_survive_a_slot_migration_and_a_master_failover(
    daemons: DaemonFactory, cluster: LocalCluster
) -> None:
    first, second = namespaces_on_two_masters(cluster)
    data = {ns: daemons.data_dir(ns) for ns in (first, second)}
    procs = {
        ns: daemons.daemon(data[ns], redis_url=cluster.url, namespace=ns).start()
        for ns in (first, second)
    }
    for proc in procs.values():
        proc.wait_log("daemon.running", timeout=60)

    with AgentClient(cluster.url, first) as agent:  # resolve is answered across the cluster
        agent.add("The user prefers the Asia/Taipei timezone", key="tz", wait=20)
        assert "Asia/Taipei" in agent.resolve("which timezone?", timeout=20)["text"]
        assert agent.get("tz") is not None

    with Ingest(cluster.url, first, seed=1) as ingest, Ingest(cluster.url, second, 2) as other:
        ingest.wait_for(30)
        other.wait_for(30)
        # the first namespace's slot moves to the master serving the second one
        slot = slot_of(first)
        target = cluster.owner(slot_of(second))
        moved = cluster.migrate_slot(slot, target)
        assert moved >= 5 and cluster.owner(slot).port == target.port
        ingest.wait_for(30)
        other.wait_for(30)
        # that master dies; its replica takes over both namespaces' slots
        cluster.fail_over(target)
        ingest.wait_for(30)
        other.wait_for(30)

    for ns, agent_run in ((first, ingest), (second, other)):
        confirmed = set(agent_run.confirmed)
        wait_until(
            lambda ns=ns, confirmed=confirmed: confirmed <= stored_ids(data[ns], ns),  # type: ignore[misc]
            timeout=60,
            interval=0.2,
        )
        assert procs[ns].running(), procs[ns].tail()
    print(  # the figures docs/reliability.md quotes (pytest -s)
        f"confirmed {len(ingest.confirmed) + len(other.confirmed)} adds, "
        f"{ingest.retried + other.retried} sent again ({ingest.errors}, {other.errors})"
    )
    assert ingest.retried + other.retried > 0  # the failover was felt
    # `mnemod status` and `doctor` read the namespaces on their new master
    args = ("--redis-url", cluster.url, "--namespace", first)
    status = json.loads(run_cli(data[first], "status", "--json", *args).stdout)
    assert status["namespaces"][first]["daemon"] == "running", status
    run_cli(data[first], "doctor", "--quiet", *args)
    assert sum(p.count_events("redis.unavailable") for p in procs.values()) > 0


CLUSTER_EXTRAS = ["+cluster|slots", "+command", "+asking"]
"""What the users of docs/operations.md add on a cluster (the page says so)."""


def test_the_documented_users_with_the_cluster_additions_work(
    daemons: DaemonFactory, cluster: LocalCluster
) -> None:
    """The daemon and an agent waiting for its replica, each with the documented ACL and
    what the page adds for a cluster, on every node (`+asking`, for a slot being moved,
    is not put to use here)."""
    text = DOCS.read_text()
    assert all(f"`{extra}`" in text for extra in [*CLUSTER_EXTRAS, "+wait"])
    for name, rules in documented_acl().items():
        extra = [*CLUSTER_EXTRAS, "+wait"] if name == "agent" else CLUSTER_EXTRAS
        for server in cluster.servers:
            server.client.execute_command("ACL", "SETUSER", name, *rules, *extra)
    hosts = cluster.url.removeprefix("redis+cluster://")
    url = {name: f"redis+cluster://{name}:{PASSWORDS[name]}@{hosts}" for name in PASSWORDS}
    data = daemons.data_dir()
    proc = daemons.daemon(data, redis_url=url["mnemod"]).start()
    proc.wait_log("daemon.running", timeout=60)
    with AgentClient(url["agent"], replicas=1, replica_timeout=5.0) as agent:
        agent.add("The user prefers the Asia/Taipei timezone", key="tz", wait=20)
        assert "Asia/Taipei" in agent.resolve("which timezone?", timeout=20)["text"]
        assert agent.get("tz") is not None and agent.status()["state"] == "running"
    assert refusals(proc.stderr_path.read_text()) == []
    assert proc.count_events("redis.command_refused") == 0


def test_a_daemon_started_before_its_cluster_answers_waits_for_it(
    daemons: DaemonFactory,
) -> None:
    """No node of the URL answers yet: the daemon says so and waits (a cluster client asks
    for the layout at once), and a SIGTERM still stops it cleanly."""
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    proc = daemons.daemon(daemons.data_dir(), redis_url=url).start()
    proc.wait_log("redis.unavailable", at_least=2)
    assert proc.running()
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0


def test_a_tls_cluster_is_reached_with_the_certificates_in_the_url(
    daemons: DaemonFactory, tmp_path: Path
) -> None:
    """`rediss+cluster://…?ssl_ca_certs=…&ssl_certfile=…&ssl_keyfile=…`: the TLS options of
    the URL reach every node's connections, the daemon's and an agent's."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificates can be made for the test")
    folder = tmp_path / "tls"
    folder.mkdir()
    make_certificates(folder)
    names = ("ca.crt", "client.crt", "client.key", "server.crt", "server.key")
    tls = TlsFiles(*(folder / name for name in names))
    with LocalCluster(tmp_path / "cluster", tls=tls) as cluster:
        assert cluster.url.startswith("rediss+cluster://")
        proc = daemons.daemon(daemons.data_dir(), redis_url=cluster.url).start()
        proc.wait_log("daemon.running", timeout=60)
        with AgentClient(cluster.url) as agent:
            agent.add("The user prefers the Asia/Taipei timezone", key="tz", wait=20)
            assert "Asia/Taipei" in agent.resolve("which timezone?", timeout=20)["text"]
