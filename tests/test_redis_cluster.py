"""The daemon on a real Redis Cluster (3 masters, a replica each, on loopback): namespaces
served by different masters, a slot migration and a master killed during ingest. An add a
replica had confirmed (WAIT) is in the daemon's files afterwards, and the daemon never
exits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from daemon_proc import DaemonFactory, index_entries
from helpers import run_cli, wait_until
from mnemod.client import Client as AgentClient
from mnemod.redisio.keys import Keys
from redis_topology import Ingest, LocalCluster

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
