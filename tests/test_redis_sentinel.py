"""The daemon on a master found through Sentinel (a master, a replica, three sentinels on
loopback): `SENTINEL FAILOVER` during ingest. The daemon follows the new master, and every
add a replica had confirmed (WAIT) is in its files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon_proc import DaemonFactory, index_entries
from helpers import run_cli, wait_until
from mnemod.client import Client as AgentClient
from redis_topology import Ingest, LocalSentinel
from test_claude_hook import context, hook, prompt

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[LocalSentinel]:
    with LocalSentinel(tmp_path / "sentinel") as topology:
        yield topology


def test_a_sentinel_failover_during_ingest_loses_no_replicated_add(
    daemons: DaemonFactory, sentinel: LocalSentinel
) -> None:
    data = daemons.data_dir("project/.mnemod")
    proc = daemons.daemon(data, redis_url=sentinel.url).start()
    proc.wait_log("daemon.running", timeout=60)
    with AgentClient(sentinel.url) as agent:
        agent.add("The user prefers the Asia/Taipei timezone", key="tz", wait=20)
        assert "Asia/Taipei" in agent.resolve("which timezone?", timeout=20)["text"]

    with Ingest(sentinel.url, "default", seed=3) as ingest:
        ingest.wait_for(50)
        old = sentinel.master_port()
        new = sentinel.fail_over()
        assert new.port != old
        ingest.wait_for(50)

    confirmed = set(ingest.confirmed)
    wait_until(
        lambda: confirmed <= {str(e["id"]) for e in index_entries(data)},
        timeout=60,
        interval=0.2,
    )
    with AgentClient(sentinel.url) as agent:  # answered by the daemon on the new master
        assert "Asia/Taipei" in agent.resolve("which timezone?", timeout=20)["text"]
    assert proc.running(), proc.tail()
    # it felt the failover, and went on: as a lost connection, or as a lease to take again
    # (the new master had not yet received its last publishes: they are published again)
    felt = proc.count_events("redis.unavailable") + proc.count_events("lease.lost")
    assert felt > 0, proc.tail()
    # the CLI and the Claude Code hook find the daemon on the new master too
    env = {"MNEMOD_REDIS_URL": sentinel.url}
    status = json.loads(run_cli(data, "status", "--json", "--redis-url", sentinel.url).stdout)
    assert status["namespaces"]["default"]["daemon"] == "running"
    (data.parent.parent / "home").mkdir()
    with AgentClient(sentinel.url) as agent:
        asked = agent.redis.xinfo_stream(agent.keys.rpc)["entries-added"]
        answer = hook(data.parent, prompt("which timezone?"), "claude-code", env=env)
        assert "Asia/Taipei" in context(answer) and answer.stderr == ""
        assert agent.redis.xinfo_stream(agent.keys.rpc)["entries-added"] == asked + 1  # asked it
    print(  # the figures docs/reliability.md quotes (pytest -s)
        f"confirmed {len(confirmed)} adds, {ingest.retried} sent again ({ingest.errors})"
    )
