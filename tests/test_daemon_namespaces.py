"""Many namespaces in one `mnemod run`, and several daemons sharing out their leadership —
each daemon a real process."""

from __future__ import annotations

import json
import signal
import time

import pytest

from daemon_proc import Client, DaemonFactory, DaemonProc, index_entries, stopped
from helpers import run_cli, wait_until
from mnemod.client import Client as Memory
from mnemod.redisio.embedded import EmbeddedRedis
from mnemod.redisio.keys import Keys

pytestmark = pytest.mark.process

LEASE = {"MNEMOD_DAEMON_LEASE_TTL": "2s"}


def leaders(client: Client, namespaces: list[str]) -> dict[str, int | None]:
    """namespace → the pid in its lease holder's owner id (`host:pid:random`)."""
    found: dict[str, int | None] = {}
    for namespace in namespaces:
        holder = client.get(Keys("mnemod", namespace).lease)
        found[namespace] = int(holder.split(":")[-2]) if holder else None
    return found


def led_by(client: Client, namespaces: list[str], proc: DaemonProc) -> int:
    return sum(1 for pid in leaders(client, namespaces).values() if pid == proc.pid)


def test_one_daemon_serves_several_namespaces(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    config = data.parent / "mnemod.toml"
    config.write_text('[daemon]\nnamespaces = ["alpha", "beta"]\n')
    proc = daemons.daemon(data, config=config).start()
    url = proc.url_from_stdout()
    proc.wait_log("daemon.running", at_least=2)
    facts = {"alpha": "The user drinks green tea", "beta": "The build runs on a Raspberry Pi"}
    for namespace, fact in facts.items():
        with Memory(url, namespace=namespace) as memory:
            memory.add(fact, id=f"{namespace}-fact", type="preference", wait=10)
    for namespace, fact in facts.items():
        assert [e["content"] for e in index_entries(data, namespace)] == [fact]
        with Memory(url, namespace=namespace) as memory:
            answer = memory.resolve(fact.split()[-1], budget=200)
        assert fact in answer["text"]
        other = next(f for n, f in facts.items() if n != namespace)
        assert other not in answer["text"]  # each namespace its own memory
    status = json.loads(run_cli(data, "status", "--all", "--json").stdout)["namespaces"]
    assert {ns: status[ns]["pid"] for ns in facts} == dict.fromkeys(facts, str(proc.pid))
    shown = json.loads(run_cli(data, "status", "--config", str(config), "--json").stdout)
    assert list(shown["namespaces"]) == ["alpha", "beta"]  # what this config serves
    # the health check of this config checks every namespace it serves
    doctor = json.loads(run_cli(data, "doctor", "--config", str(config), "--json").stdout)
    held = [c["detail"] for c in doctor["checks"] if c["check"] == "leader"]
    assert [detail.split(":")[0] for detail in held] == ["alpha", "beta"]
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0
    assert proc.count_events("daemon.draining") == 2


def test_a_namespace_agents_start_writing_to_is_taken_up(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    run_cli(data, "add", "The user's dog is called Bao", "--namespace", "early")
    env = {"MNEMOD_DAEMON_DISCOVER_INTERVAL": "1s"}
    proc = daemons.daemon(data, namespace="*", env=env).start()
    url = proc.url_from_stdout()
    with Memory(url, namespace="fresh") as memory:
        memory.add("The user's cat is called Pixel", id="cat")  # the first write creates it
        proc.wait_log("namespace.found", at_least=2, timeout=20)
        memory.wait_applied(timeout=20)
    assert [e["id"] for e in index_entries(data, "fresh")] == ["cat"]
    found = [e["namespace"] for e in proc.log_events() if e["event"] == "namespace.found"]
    assert sorted(found) == ["early", "fresh"]  # at start-up, or once the agent wrote
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit() == 0


def test_two_daemons_share_twenty_namespaces_and_one_takes_all_when_the_other_dies(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    data = daemons.data_dir()
    namespaces = [f"agent{n:02d}" for n in range(20)]
    flags = ",".join(namespaces)
    first = daemons.daemon(data, redis_url=external.url, namespace=flags, env=LEASE).start()
    client = daemons.client(external.url)
    wait_until(lambda: led_by(client, namespaces, first) == 20, timeout=60)
    second = daemons.daemon(data, redis_url=external.url, namespace=flags, env=LEASE).start()

    def shared() -> bool:
        counts = (led_by(client, namespaces, first), led_by(client, namespaces, second))
        return sum(counts) == 20 and all(8 <= count <= 12 for count in counts)

    joined = time.monotonic()
    wait_until(shared, timeout=60, interval=0.2)
    print(f"shared out (8-12 each) {time.monotonic() - joined:.2f} s after the second started")
    assert first.count_events("lease.handing_over") >= 8
    with Memory(external.url, namespace="agent07") as memory:  # led by either: it is applied
        memory.add("The user's standup is at 9:30", id="standup", wait=15)
    assert [e["id"] for e in index_entries(data, "agent07")] == ["standup"]

    second.kill9()
    killed = time.monotonic()
    wait_until(lambda: led_by(client, namespaces, first) == 20, timeout=30, interval=0.1)
    print(f"after the kill -9 the survivor led all 20 in {time.monotonic() - killed:.2f} s")
    # the lease time (2 s; at once on this host, where the process is seen gone) plus a
    # look at the daemons and a standby's poll, each a third of it, and the start-ups
    assert time.monotonic() - killed < 2 + 2 * 2 / 3 + 3
    first.signal(signal.SIGTERM)
    assert first.wait_exit(timeout=60) == 0
    assert all(pid is None for pid in leaders(client, namespaces).values())


def test_a_frozen_daemon_s_namespaces_are_led_again_after_the_lease_time(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    """As a daemon on a lost host: alive, but renewing nothing (SIGSTOP). Its presence and
    leases lapse, the other takes its namespaces over; woken, it stops writing them (its
    leases are gone) and gets its share back by hand-over. Each has a data folder of its
    own, as on two hosts (the frozen one's locks would keep the other out of a shared one)."""
    namespaces = [f"team{n}" for n in range(6)]
    flags = ",".join(namespaces)
    procs = [
        daemons.daemon(
            daemons.data_dir(host), redis_url=external.url, namespace=flags, env=LEASE
        ).start()
        for host in ("one", "two")
    ]
    client = daemons.client(external.url)
    wait_until(lambda: [led_by(client, namespaces, p) for p in procs] == [3, 3], timeout=60)
    frozen, other = procs
    frozen.signal(signal.SIGSTOP)
    wait_until(lambda: stopped(frozen.pid), timeout=10)
    paused = time.monotonic()
    try:
        wait_until(lambda: led_by(client, namespaces, other) == 6, timeout=30, interval=0.1)
        took = time.monotonic() - paused
        print(f"a frozen daemon's namespaces were led again in {took:.2f} s")
        assert took < 2 + 2 * 2 / 3 + 3  # its leases lapse, then a look of the other
    finally:
        frozen.signal(signal.SIGCONT)
    frozen.wait_log("lease.lost", at_least=3, timeout=20)
    wait_until(lambda: [led_by(client, namespaces, p) for p in procs] == [3, 3], timeout=60)
    for proc in procs:
        proc.signal(signal.SIGTERM)
    assert [proc.wait_exit(timeout=60) for proc in procs] == [0, 0]
