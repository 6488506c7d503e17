"""Followers as real processes: several daemons on one Redis, each with its own folder.

The failover of issue 15, end to end: the leader takes adds and removes and is killed with
kill -9; the follower leads within the lease time with every memory, the hot layer never
shrinks, and resolve answers with the facts; a daemon started on an empty folder catches up;
the first comes back with its old files, the second is killed, and what was written while
the first was down is still there. Nothing lost, nothing removed comes back.
"""

from __future__ import annotations

import json
import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from daemon_proc import (
    KEYS,
    Client,
    DaemonFactory,
    DaemonProc,
    add_event,
    distinct_content,
    index_entries,
    pending,
    unread,
)
from helpers import run_cli, wait_until
from mnemod.redisio.embedded import EmbeddedRedis
from test_fault_suite import Model, check_against, entries_read, send, start
from test_fault_suite import settled as fault_settled

pytestmark = pytest.mark.process

LEASE = {"MNEMOD_DAEMON_LEASE_TTL": "2s"}
FACTS = {
    "dog": "The user's dog is called Biscuit and is a beagle",
    "tz": "The user lives in the Asia/Taipei timezone",
}


def resolve(client: Client, prompt: str, timeout: float = 8.0) -> dict[str, object]:
    reply_to = KEYS.reply(uuid.uuid4().hex)
    request = {"op": "resolve", "prompt": prompt, "budget": "400", "reply_to": reply_to}
    client.xadd(KEYS.rpc, request)
    answer = client.blpop([reply_to], timeout=timeout)
    assert answer is not None, f"no answer to {prompt!r}"
    parsed: dict[str, object] = json.loads(answer[1])
    return parsed


def ids(data: Path) -> set[str]:
    return {e["id"] for e in index_entries(data)}


def leader_and_follower(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> tuple[DaemonProc, DaemonProc, Client]:
    """A leading daemon on folder `a`, a follower on folder `b`, and an agent's client."""
    leader = daemons.daemon(daemons.data_dir("a"), redis_url=external.url, env=LEASE).start()
    leader.wait_log("daemon.running")
    follower = daemons.daemon(daemons.data_dir("b"), redis_url=external.url, env=LEASE).start()
    follower.wait_log("lease.standby")
    return leader, follower, daemons.client(external.url)


def followers_seen(data: Path, url: str) -> dict[str, int | None]:
    """What `mnemod status` says of the namespace's one follower: how far behind it is."""
    done = run_cli(data, "status", "--redis-url", url, "--json")
    info = json.loads(done.stdout)["namespaces"]["default"]
    found = list(info["followers"].values())
    if len(found) != 1 or info["committed_seq"] is None:
        return {}
    return {"behind": found[0]["behind"]}


def settled(client: Client) -> bool:
    return unread(client) == 0 and pending(client) == 0


def leading(procs: list[DaemonProc], client: Client) -> DaemonProc:
    """The daemon that holds the lease (its pid is in the status hash)."""

    def found() -> DaemonProc | None:
        pid = client.hget(KEYS.status, "pid")
        return next((p for p in procs if p.running() and str(p.pid) == pid), None)

    proc = wait_until(found, 15)
    assert proc is not None
    return proc


def test_failover_across_three_folders_loses_nothing_and_resurrects_nothing(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    rng = random.Random(15)
    folders = [daemons.data_dir(name) for name in ("a", "b", "c")]
    first = daemons.daemon(folders[0], redis_url=external.url, env=LEASE).start()
    first.wait_log("daemon.running")
    second = daemons.daemon(folders[1], redis_url=external.url, env=LEASE).start()
    second.wait_log("lease.standby")
    client = daemons.client(external.url)

    for key, content in FACTS.items():
        add_event(client, content, id=key)
    added = [f"m{n:03d}" for n in range(300)]
    for entry_id in added:
        add_event(client, distinct_content(rng), id=entry_id)
    removed = set(rng.sample(added, 50))
    for entry_id in sorted(removed):
        client.xadd(KEYS.events, {"op": "remove", "data": json.dumps({"id": entry_id})})
    expected = (set(added) - removed) | set(FACTS)
    wait_until(lambda: settled(client) and ids(folders[0]) == expected, 30)
    wait_until(lambda: ids(folders[1]) == expected, 15)  # the follower's own copy
    hot_before = int(client.zcard(KEYS.hot))
    assert hot_before == len(expected)

    first.kill9()
    killed = time.monotonic()
    smallest = hot_before
    while not second.count_events("daemon.running"):
        smallest = min(smallest, int(client.zcard(KEYS.hot)))
        assert time.monotonic() - killed < 2 + 3, "the follower did not lead within the lease"
        time.sleep(0.01)
    for _ in range(20):  # the rebuild just after taking over
        smallest = min(smallest, int(client.zcard(KEYS.hot)))
        time.sleep(0.01)
    assert smallest >= hot_before, f"the hot layer shrank to {smallest} of {hot_before}"
    assert "Biscuit" in str(resolve(client, "what is my dog called?")["text"])

    third = daemons.daemon(folders[2], redis_url=external.url, env=LEASE).start()
    add_event(client, "Written while the first daemon was down: the boat is blue", id="during")
    expected.add("during")
    removed_since = set(rng.sample(sorted(expected - set(FACTS) - {"during"}), 10))
    for entry_id in sorted(removed_since):  # the first daemon's files still hold these
        client.xadd(KEYS.events, {"op": "remove", "data": json.dumps({"id": entry_id})})
    expected -= removed_since
    removed |= removed_since
    wait_until(lambda: settled(client) and ids(folders[1]) == expected, 15)
    wait_until(lambda: ids(folders[2]) == expected, 20)  # started empty, caught up

    again = daemons.daemon(folders[0], redis_url=external.url, env=LEASE).start()
    again.wait_log("lease.standby")
    wait_until(lambda: ids(folders[0]) == expected, 20)  # its old files, caught up
    second.kill9()
    new_leader = leading([again, third], client)
    assert "blue" in str(resolve(client, "what colour is the boat?")["text"])
    add_event(client, "After the second failover: the car is green", id="later")
    expected.add("later")
    wait_until(lambda: settled(client), 15)
    for folder in (folders[0], folders[2]):
        wait_until(lambda f=folder: ids(f) == expected, 15)  # type: ignore[misc]
    assert not ids(new_leader.data_dir) & removed, "a removed memory came back"
    assert not set(client.zrange(KEYS.hot, 0, -1)) & removed, "back in the hot layer"
    assert int(client.zcard(KEYS.hot)) == len(expected)
    assert client.xlen(KEYS.dead) == 0


def test_a_copy_the_cli_wrote_while_another_daemon_led_is_set_aside_and_started_again(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    leader, follower, client = leader_and_follower(daemons, external)
    leader_dir, copy_dir = leader.data_dir, follower.data_dir
    add_event(client, "The first memory, followed", id="x1")
    wait_until(lambda: ids(copy_dir) == {"x1"}, 15)
    wait_until(lambda: followers_seen(leader_dir, external.url) == {"behind": 0}, 15)
    follower.signal(signal.SIGTERM)
    assert follower.wait_exit() == 0
    run_cli(copy_dir, "add", "A stray memory the CLI wrote into the copy", "--type", "insight")
    add_event(client, "The second memory, while the copy was stopped", id="x2")
    wait_until(lambda: settled(client) and ids(leader_dir) == {"x1", "x2"}, 15)

    again = daemons.daemon(copy_dir, redis_url=external.url, env=LEASE).start()
    again.wait_log("replica.folder_set_aside")
    wait_until(lambda: ids(copy_dir) == {"x1", "x2"}, 15)  # the namespace's, without the stray
    (aside,) = (copy_dir / ".diverged").iterdir()
    assert any("stray" in e["content"] for e in index_entries(aside.parent, aside.name))
    status = json.loads(run_cli(copy_dir, "status", "--redis-url", external.url, "--json").stdout)
    assert status["namespaces"]["default"]["set_aside"] == [str(aside)]
    doctor = json.loads(run_cli(copy_dir, "doctor", "--redis-url", external.url, "--json").stdout)
    (warned,) = [c for c in doctor["checks"] if c["check"] == "set aside"]
    assert warned["state"] == "warn" and str(aside) in warned["detail"]
    assert ids(leader_dir) == {"x1", "x2"}
    leader.kill9()
    leading([again], client)
    assert "stray" not in str(resolve(client, "a stray memory the CLI wrote")["text"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_of_the_leader_during_an_ingest_with_two_followers_loses_nothing(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    folders = [daemons.data_dir(name) for name in ("a", "b", "c")]
    procs = {f: start(daemons, f, redis_url=external.url) for f in folders}
    client = daemons.client(external.url)
    wait_until(lambda: client.hget(KEYS.status, "pid") is not None, 20)
    model = Model(random.Random(2615))
    send(client, model.generate(10_000))
    rng = random.Random(11)
    kills = 0
    while entries_read(client) < 9_800 or kills < 20:
        leader = leading(list(procs.values()), client)
        target = min(10_000, entries_read(client) + rng.randint(100, 600))

        def reached(t: int = target, p: DaemonProc = leader) -> bool:
            return entries_read(client) >= t or not p.running()

        wait_until(reached, 60)
        leader.kill9()
        kills += 1
        procs[leader.data_dir] = start(daemons, leader.data_dir, redis_url=external.url)
        if entries_read(client) >= 10_000 and kills >= 20:
            break
    fault_settled(client, 120)
    leader = leading(list(procs.values()), client)
    for proc in procs.values():
        if proc is not leader:
            proc.wait_log("lease.standby")  # following (its signal handlers set)
            proc.signal(signal.SIGTERM)
            assert proc.wait_exit(timeout=60) == 0, proc.tail()
    leader.signal(signal.SIGTERM)
    assert leader.wait_exit(timeout=60) == 0, leader.tail()
    print(f"kill -9 of the leader: {kills}, events: {len(model.events)}")
    check_against(model, leader.data_dir)


def test_a_request_a_dead_daemon_took_is_answered_by_another(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    leader, follower, client = leader_and_follower(daemons, external)
    copy_dir = follower.data_dir
    add_event(client, "The user's dog is called Biscuit and is a beagle", id="dog")
    wait_until(lambda: ids(copy_dir) == {"dog"}, 15)
    reply_to = KEYS.reply(uuid.uuid4().hex)
    for proc in (leader, follower):
        proc.signal(signal.SIGSTOP)
    try:
        # once no daemon waits on the stream, a consumer of the group takes the request
        # and dies with it (it is never answered there)
        wait_until(lambda: "flags=b" not in str(client.execute_command("CLIENT", "LIST")), 10)
        request = {"op": "resolve", "prompt": "what is my dog called?", "reply_to": reply_to}
        client.xadd(KEYS.rpc, request)
        taken = client.xreadgroup("mnemod", "follower:gone", {KEYS.rpc: ">"}, count=1)
        assert taken and len(taken[0][1]) == 1
    finally:
        for proc in (leader, follower):
            proc.signal(signal.SIGCONT)
    answer = client.blpop([reply_to], timeout=20)
    assert answer is not None and "Biscuit" in json.loads(answer[1])["text"]
    assert leader.count_events("rpc.claimed") + follower.count_events("rpc.claimed") >= 1


def test_a_leader_stopped_cleanly_hands_over_to_its_follower_with_every_memory(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    rng = random.Random(8)
    leader, follower, client = leader_and_follower(daemons, external)
    leader_dir, copy_dir = leader.data_dir, follower.data_dir
    expected = {f"s{n:02d}" for n in range(40)}
    for entry_id in sorted(expected):
        add_event(client, distinct_content(rng), id=entry_id)
    leader.signal(signal.SIGTERM)  # it commits (publishes) its batch; the rest waits
    assert leader.wait_exit() == 0
    follower.wait_log("daemon.running")
    wait_until(lambda: settled(client) and ids(copy_dir) == expected, 15)
    assert ids(leader_dir) <= expected
    assert int(client.zcard(KEYS.hot)) == len(expected)
