"""The daemon against Redis trouble: data loss (FLUSHALL), an outage, and two daemons on one
namespace (leader lease) — each with `mnemod run` as a real process."""

from __future__ import annotations

import json
import random
import shutil
import signal
import time

from daemon_proc import (
    KEYS,
    Client,
    DaemonFactory,
    DaemonProc,
    add_event,
    distinct_content,
    index_entries,
    pending,
    stopped,
    unread,
)
from helpers import run_cli, wait_until
from mnemod.redisio.embedded import DAEMON_CLIENT, EmbeddedRedis
from mnemod.redisio.keys import GROUP
from mnemod.runtime.writer import CONSUMER


def hot_items(client: Client) -> dict[str, dict[str, str]]:
    """The hot L3 items as stored, less their score (it decays with time)."""
    found = {}
    for item_id in client.zrange(KEYS.hot, 0, -1):
        stored = client.hgetall(KEYS.item(item_id))
        stored.pop("score", None)
        found[str(item_id)] = stored
    return found


def test_flushall_rebuilds_the_hot_layer(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    # the default heartbeat (5 s): recovery must not depend on a fast test schedule
    proc = daemons.daemon(data, env={"MNEMOD_SCHEDULE_HEARTBEAT": "5s"}).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    rng = random.Random(3)
    for n in range(20):
        add_event(client, distinct_content(rng), id=f"item-{n}")
    wait_until(lambda: client.zcard(KEYS.hot) == 20 and len(index_entries(data)) == 20, 10)
    before = hot_items(client)

    client.flushall()
    flushed = time.monotonic()
    wait_until(
        lambda: client.zcard(KEYS.hot) == 20 and client.exists(KEYS.marker) == 1,
        timeout=5,
    )
    assert time.monotonic() - flushed < 5
    assert hot_items(client) == before
    assert proc.count_events("redis.data_lost") >= 1

    # still applying events after the rebuild, and nothing lost in the files
    add_event(client, distinct_content(rng), id="after-flush")
    wait_until(lambda: len(index_entries(data)) == 21, timeout=10)
    wait_until(lambda: client.exists(KEYS.item("after-flush")) == 1, timeout=5)
    wait_until(lambda: client.hget(KEYS.status, "heartbeat") is not None, timeout=10)
    assert proc.running()


def test_redis_outage_pauses_and_resumes(daemons: DaemonFactory, external: EmbeddedRedis) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data, redis_url=external.url).start()
    proc.wait_log("daemon.running")
    client = daemons.client(external.url)
    rng = random.Random(5)
    first = [add_event(client, distinct_content(rng)) for _ in range(100)]
    external.stop()  # at once: some events are applied, some not yet
    proc.wait_log("redis.unavailable", at_least=3)
    assert proc.running()
    waits = [e["retry_in"] for e in proc.log_events() if e.get("event") == "redis.unavailable"]
    # one attempt per failure, and the wait is the one logged: the ceiling doubles (0.1,
    # 0.2, 0.4 s, less up to half of it); each failure counted twice, it went 0.1, 0.4, 1.6
    assert all(wait <= 0.1 * 2**n + 0.005 for n, wait in enumerate(waits[:3])), waits
    external.start()  # same folder, same socket, the AOF brings the events back
    client = daemons.client(external.url)
    second = [add_event(client, distinct_content(rng)) for _ in range(100)]
    wait_until(lambda: len(index_entries(data)) == 200, timeout=30)
    wait_until(lambda: pending(client) == 0 and unread(client) == 0, timeout=10)
    assert len({e["content"] for e in index_entries(data)}) == 200
    assert first and second
    assert proc.running()
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0


def test_a_stop_while_redis_is_down_still_writes_the_last_snapshot(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    """The events applied since the last snapshot exist only in the daemon's memory and in
    Redis. A stop while Redis is down raised at the final snapshot's hot-layer work, and
    wrote nothing: a Redis that came back empty would have lost them. Now the files get
    them, and the next daemon, on an empty Redis, starts with them."""
    data = daemons.data_dir()
    slow = {"MNEMOD_SCHEDULE_SNAPSHOT": "1h"}  # applied, not yet in a snapshot
    proc = daemons.daemon(data, redis_url=external.url, env=slow).start()
    proc.wait_log("daemon.running")
    client = daemons.client(external.url)
    rng = random.Random(11)
    for n in range(20):
        add_event(client, distinct_content(rng), id=f"kept-{n}")
    client.xadd(KEYS.rpc, {"op": "resolve", "prompt": "anything", "reply_to": "t:a"})
    wait_until(lambda: unread(client) == 0 and client.llen("t:a") == 1, timeout=10)
    external.stop()
    proc.wait_log("redis.unavailable")
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0, proc.tail()
    assert proc.count_events("snapshot.written_without_redis") == 1
    assert sorted(e["id"] for e in index_entries(data)) == sorted(f"kept-{n}" for n in range(20))
    shutil.rmtree(external.folder / "appendonlydir")  # Redis comes back empty
    external.start()
    again = daemons.daemon(data, redis_url=external.url).start()
    again.wait_log("daemon.running")
    assert daemons.client(external.url).zcard(KEYS.hot) == 20  # rebuilt from the files


def blocked_in_read(client: Client) -> bool:
    """The daemon waits in a blocking XREADGROUP (so a batch delivered now is its reply)."""
    return any(
        c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "") for c in client.client_list()
    )


def leader_pid(client: Client) -> int | None:
    """The pid in the current lease holder's owner id (`host:pid:random`)."""
    holder = client.get(KEYS.lease)
    return int(holder.split(":")[-2]) if holder else None


def blocked_for(client: Client) -> int:
    """For how many seconds the daemon's XREADGROUP has waited in Redis (its `idle`); -1
    when no read of the daemon's waits."""
    for info in client.client_list():
        if (
            info["name"].startswith(DAEMON_CLIENT)
            and info["cmd"] == "xreadgroup"
            and "b" in info["flags"]
        ):
            return int(info["idle"])
    return -1


def test_a_batch_delivered_as_the_connection_went_is_read_again(
    daemons: DaemonFactory,
) -> None:
    """Redis delivered a request and an event (they are pending for the daemon), but the
    reply went with the daemon's connection. Once reconnected, the daemon reads its
    pending entries again: the agent waiting for an answer gets it, and the memory is
    stored. Before, they waited for the next start.

    The connection is killed while the daemon's XREADGROUP waits in Redis, where a lost
    reply happens. A read that had ended (its BLOCK timed out) leaves an idle connection,
    which redis-py replaces without an error, and rightly nothing is read again: a 10 s
    BLOCK (under a 30 s socket timeout) keeps the read waiting while the test acts."""
    data = daemons.data_dir()
    tz = "User prefers the Asia/Taipei timezone"
    run_cli(data, "add", tz, "--type", "preference", "--id", "tz")
    env = {"MNEMOD_DAEMON_BLOCK": "10s", "MNEMOD_REDIS_SOCKET_TIMEOUT": "30s"}
    proc = daemons.daemon(data, env=env).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    # Redis counts `idle` by the clock's second: 2-4 means 1-5 s. So 5 s of the BLOCK are
    # left for what follows, and the snapshot interval (under 1 s) has passed since the
    # last snapshot: what is read again is written at once, not after the next BLOCK.
    wait_until(lambda: 2 <= blocked_for(client) <= 4, timeout=25)
    proc.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: stopped(proc.pid), timeout=10)
        client.client_kill_filter(_type="normal", skipme=True)  # the daemon's connections
        client.xadd(KEYS.rpc, {"op": "resolve", "prompt": "which timezone?", "reply_to": "t:lost"})
        add_event(client, "The user's dog is called Miso", id="dog")
        # delivered to the daemon's consumer, as its XREADGROUP would have been
        client.xreadgroup(GROUP, CONSUMER, {KEYS.rpc: ">", KEYS.events: ">"})
    finally:
        proc.signal(signal.SIGCONT)
    answer = client.blpop(["t:lost"], timeout=8)  # under the client's 10 s socket timeout
    assert answer is not None, proc.tail()
    assert "Asia/Taipei" in json.loads(answer[1])["text"]
    wait_until(lambda: {e["id"] for e in index_entries(data)} == {"tz", "dog"}, 15)
    assert proc.count_events("redis.unavailable") >= 1


def test_two_daemons_one_leader_and_failover(
    daemons: DaemonFactory, external: EmbeddedRedis
) -> None:
    data = daemons.data_dir()
    env = {"MNEMOD_DAEMON_LEASE_TTL": "2s"}
    procs = [daemons.daemon(data, redis_url=external.url, env=env).start() for _ in range(2)]
    client = daemons.client(external.url)
    wait_until(lambda: sum(p.count_events("daemon.running") for p in procs) == 1, 20)
    leader: DaemonProc = next(p for p in procs if p.count_events("daemon.running"))
    standby: DaemonProc = next(p for p in procs if p is not leader)
    # both may stand by on the way (one takes the lease, finds the folder locked by the
    # other and lets it go): the one that does not lead is standing by
    standby.wait_log("lease.standby", timeout=20)
    assert leader_pid(client) == leader.pid
    wait_until(lambda: client.hget(KEYS.status, "pid") == str(leader.pid), timeout=30)
    owner = client.hget(KEYS.status, "owner")
    assert owner == client.get(KEYS.lease)

    rng = random.Random(9)
    add_event(client, distinct_content(rng), id="before")
    wait_until(lambda: [e["id"] for e in index_entries(data)] == ["before"], timeout=30)
    assert standby.count_events("events.batch") == 0

    leader.kill9()
    standby.wait_log("daemon.running", timeout=30)
    assert leader_pid(client) == standby.pid
    add_event(client, distinct_content(rng), id="after")
    wait_until(lambda: {e["id"] for e in index_entries(data)} == {"before", "after"}, 30)
    wait_until(lambda: client.hget(KEYS.status, "pid") == str(standby.pid), timeout=30)
    wait_until(lambda: pending(client) == 0, timeout=30)
    standby.signal(signal.SIGTERM)
    assert standby.wait_exit(timeout=30) == 0
    assert client.get(KEYS.lease) is None  # released on the way out


def test_l1_file_appears_and_broken_version_keeps_last_good(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    l1 = data / "l1"
    l1.mkdir(exist_ok=True)
    good = '[[memory]]\ncontent = "Always answer in English"\ntags = ["lang"]\n'
    (l1 / "x.toml").write_text(good)
    written = time.monotonic()

    def l1_ids() -> list[str]:
        return [str(i) for i in client.zrange(KEYS.l1, 0, -1)]

    ids = wait_until(l1_ids, timeout=2)
    assert time.monotonic() - written < 2
    assert client.hget(KEYS.item(ids[0]), "content") == "Always answer in English"
    assert client.hget(KEYS.item(ids[0]), "layer") == "l1"

    (l1 / "x.toml").write_text('[[memory]]\ncontent = "Always answer in\n')  # broken at line 2

    def problems() -> list[str]:
        raw = client.hget(KEYS.status, "l1_problems")
        found: list[str] = json.loads(raw) if raw else []
        return found

    found = wait_until(problems, timeout=5)
    assert "x.toml:2" in found[0], found
    assert l1_ids() == ids
    assert client.hget(KEYS.item(ids[0]), "content") == "Always answer in English"

    (l1 / "x.toml").write_text(good.replace("English", "French"))
    wait_until(
        lambda: (
            client.hget(KEYS.item(l1_ids()[0]), "content") == "Always answer in French"
            if l1_ids()
            else False
        ),
        timeout=5,
    )
    wait_until(lambda: problems() == [], timeout=5)
    assert proc.running()
