"""`mnemod run` as a real process: start on the embedded Redis, apply events, drain on
SIGTERM, reload on SIGHUP, and stay healthy under a flood of bad events."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from daemon_proc import (
    KEYS,
    Client,
    DaemonFactory,
    add_event,
    alive,
    distinct_content,
    history,
    index_entries,
    index_last_event_id,
    pending,
    serving_one_fact,
)
from helpers import run_cli, wait_until
from mnemod.cli.maintenance import STATS_REPLAY_MOST
from mnemod.client import Client as MemoryClient
from mnemod.clock import parse_time
from mnemod.redisio.embedded import EmbeddedRedis
from mnemod.redisio.events import stream_id_key


def start_embedded(daemons: DaemonFactory, **kwargs: Any) -> tuple[Path, Client]:
    data = daemons.data_dir()
    proc = daemons.daemon(data, **kwargs).start()
    url = proc.url_from_stdout()
    client = daemons.client(url)
    proc.wait_log("daemon.running")
    return data, client


def in_index(data: Path, entry_id: str) -> bool:
    return any(e["id"] == entry_id for e in index_entries(data))


def test_start_add_and_sigterm_drain(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    url = proc.url_from_stdout()
    assert url.startswith("unix://")
    client = daemons.client(url)
    proc.wait_log("daemon.running")

    payload = {"type": "preference", "content": "User prefers Asia/Taipei", "importance": 4}
    client.xadd(KEYS.events, {"op": "add", "data": json.dumps(payload)})

    def item_id() -> str:
        ids = client.zrange(KEYS.hot, 0, -1)
        return str(ids[0]) if ids else ""

    entry_id = wait_until(item_id, timeout=10)
    stored = client.hgetall(KEYS.item(entry_id))
    assert stored["content"] == payload["content"]
    assert stored["importance"] == "4"
    assert stored["layer"] == "l3"
    wait_until(lambda: in_index(data, entry_id), timeout=10)

    # a burst, then SIGTERM at once: the daemon stops taking events, finishes its batch,
    # snapshots and acknowledges; what it did not read stays queued for the next start
    rng = random.Random(1)
    contents = [f"drain {distinct_content(rng)}" for _ in range(50)]
    ids = [add_event(client, content) for content in contents]
    redis_pid = daemons.embedded_pids()[0]
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
    wait_until(lambda: not alive(redis_pid), timeout=10)
    assert daemons.embedded_pids() == []
    assert not (data / "redis" / "redis.sock").exists()
    assert proc.count_events("snapshot.written") >= 1
    last = index_last_event_id(data)
    assert last is not None
    stored = {e["content"] for e in index_entries(data)}
    assert payload["content"] in stored
    applied = [
        c for c, i in zip(contents, ids, strict=True) if stream_id_key(i) <= stream_id_key(last)
    ]
    assert {c for c in stored if c.startswith("drain ")} == set(applied)

    # nothing pending; the rest is applied by the next start, on the same embedded server
    with EmbeddedRedis(data / "redis") as server:
        client = daemons.client(server.url)
        assert pending(client) == 0
        delivered = client.xinfo_groups(KEYS.events)[0]["last-delivered-id"]
        assert stream_id_key(delivered) <= stream_id_key(ids[-1])
    again = daemons.daemon(data).start()
    client = daemons.client(again.url_from_stdout())
    wait_until(lambda: len(index_entries(data)) == 1 + len(contents), timeout=15)
    again.signal(signal.SIGTERM)
    assert again.wait_exit(timeout=30) == 0
    assert index_last_event_id(data) == ids[-1]
    assert daemons.embedded_pids() == []


def test_resolve_selections_are_kept_through_a_sigterm(daemons: DaemonFactory) -> None:
    """Answers go out first and their accesses are recorded in a quiet moment: requests
    back to back, then SIGTERM at once, and every selection is still in the snapshot."""
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    url = proc.url_from_stdout()
    proc.wait_log("daemon.running")
    with MemoryClient(url) as memory:
        entry_id = memory.add("Ferries to Texel leave Den Helder every hour", wait=15)
        for _ in range(5):
            answer = memory.resolve("when do the ferries to Texel leave?", budget=300)
            assert [item["id"] for item in answer["items"]] == [entry_id]
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
    (entry,) = [e for e in index_entries(data) if e["id"] == entry_id]
    assert (entry["access_count"], entry["selected_count"]) == (5, 5)


def test_stats_beside_a_running_daemon_come_from_it(daemons: DaemonFactory) -> None:
    """`mnemod stats` asks the daemon (an `op stats` request on the rpc stream) when the
    records after the checkpoint name more entries than it would read from the file one by
    one; the answer is the one the files give once the daemon stops."""
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    url = proc.url_from_stdout()
    proc.wait_log("daemon.running")
    client = daemons.client(url)
    rng = random.Random(7)
    with MemoryClient(url) as memory:
        for _ in range(STATS_REPLAY_MOST):
            memory.add(distinct_content(rng))
        memory.add("The user's dog is called Bao", type="relation", importance=4, wait=15)
        answer = memory.stats()
    kinds = {"context": STATS_REPLAY_MOST, "relation": 1}
    assert answer["counts"]["entries"] == STATS_REPLAY_MOST + 1
    assert answer["counts"]["by_type"] == kinds
    assert answer["counts"]["tokens"] > 0
    asked = len(client.xrange(KEYS.rpc))
    live = json.loads(run_cli(data, "stats", "--json").stdout)
    requests = client.xrange(KEYS.rpc)
    assert len(requests) == asked + 1 and requests[-1][1]["op"] == "stats"
    assert (live["l3"], live["l3_by_type"]) == (STATS_REPLAY_MOST + 1, kinds)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
    assert json.loads(run_cli(data, "stats", "--json").stdout) == live


def test_sighup_reloads_config_and_keeps_old_on_error(daemons: DaemonFactory) -> None:
    config = daemons.root / "mnemod.toml"
    config.write_text("[dedup]\nthreshold = 0.55\n")
    data, client = start_embedded(daemons, config=config)
    proc = daemons.daemons[0]

    config.write_text("[dedup]\nthreshold = 0.9\n")
    proc.signal(signal.SIGHUP)
    proc.wait_log("config.reloaded")
    reloaded = [e for e in proc.log_events() if e.get("event") == "config.reloaded"]
    assert reloaded[-1]["source"].endswith("mnemod.toml")

    # 0.9: these two (Jaccard 0.6 on keywords) are kept apart; at 0.55 they would merge
    first = add_event(client, "alpha bravo charlie delta")
    second = add_event(client, "alpha bravo charlie echo")
    assert first and second
    wait_until(lambda: len(index_entries(data)) == 2, timeout=10)

    config.write_text("[dedup\nthreshold = \n")  # broken TOML
    proc.signal(signal.SIGHUP)
    proc.wait_log("config.reload_failed")
    assert proc.running()
    add_event(client, "alpha bravo charlie foxtrot")  # still 0.9: a third entry
    wait_until(lambda: len(index_entries(data)) == 3, timeout=10)
    assert proc.running()


def malformed_events(count: int, max_bytes: int) -> list[tuple[dict[str, str], str]]:
    """`count` bad events of varied kinds, each with a word its error must contain."""
    kinds: list[tuple[dict[str, str], str]] = [
        ({"op": "add", "data": "{not json"}, "json"),
        ({"op": "add", "data": json.dumps({"content": 42})}, "content"),
        ({"op": "add", "data": json.dumps({"content": "x" * (max_bytes + 1)})}, "content"),
        ({"op": "frobnicate", "data": "{}"}, "op"),
        ({"data": json.dumps({"content": "no op"})}, "op"),
        ({"op": "add"}, "data"),
        ({"op": "add", "data": "[1, 2, 3]"}, "object"),
        ({"op": "add", "data": json.dumps({"content": "c", "importance": 9})}, "importance"),
        ({"op": "add", "data": json.dumps({"content": "c", "importance": "high"})}, "importance"),
        ({"op": "add", "data": json.dumps({"content": "c", "triggers": ["(unclosed"]})}, "trigger"),
        ({"op": "access", "data": json.dumps({"id": "01NOSUCHENTRY0000000000000"})}, "entry"),
        ({"op": "access", "data": json.dumps({})}, "id"),
        ({"op": "remove", "data": json.dumps({"id": 7})}, "id"),
        ({"op": "update", "data": json.dumps({"id": "nope", "importance": 0})}, "importance"),
        ({"op": "add", "data": json.dumps({"content": "c", "type": "gossip"})}, "type"),
        ({"op": "add", "data": json.dumps({"content": "   "})}, "content"),
        ({"op": "add", "data": "null"}, "object"),
        ({"op": "add", "data": json.dumps({"content": "c", "tags": "not-a-list"})}, "tags"),
    ]
    return [kinds[n % len(kinds)] for n in range(count)]


def test_daemons_of_two_namespaces_share_the_embedded_server(daemons: DaemonFactory) -> None:
    """The daemon that started the folder's redis-server stops first: the other namespace's
    daemon keeps its Redis. When the server dies anyway (kill -9), that daemon starts it
    again and its agents go on writing; the events queued before are kept."""
    data = daemons.data_dir()
    first = daemons.daemon(data).start()
    url = first.url_from_stdout()
    first.wait_log("daemon.running")
    second = daemons.daemon(data, namespace="alice").start()
    second.wait_log("daemon.running")
    with MemoryClient(url, namespace="alice") as alice:
        alice.add("Alice drinks green tea", wait=10)
        first.signal(signal.SIGTERM)
        assert first.wait_exit() == 0
        assert first.count_events("redis.embedded.left_running") == 1
        assert "green tea" in alice.resolve("what does Alice drink?")["text"]

        server = int((data / "redis" / "redis.pid").read_text())
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: not alive(server), timeout=10)
        second.wait_log("redis.embedded.revived", timeout=30)
        alice.add("Alice walks to work", wait=20)
        assert "walks" in alice.resolve("how does Alice get to work?")["text"]
    assert second.running()
    assert [e["content"] for e in index_entries(data, "alice")] == [
        "Alice drinks green tea",
        "Alice walks to work",
    ]


def test_its_own_keys_overwritten_by_something_else_do_not_stop_it(
    daemons: DaemonFactory,
) -> None:
    """The status hash and the dead-letter stream turned into strings made the heartbeat
    and the next dead letter fail with WRONGTYPE, and the daemon exit (and again after
    each restart). They are replaced, and the daemon goes on."""
    data, client = start_embedded(daemons)
    proc = daemons.daemons[0]
    client.delete(KEYS.status)
    client.set(KEYS.status, "not a hash")
    client.set(KEYS.dead, "not a stream")
    client.xadd(KEYS.events, {"op": "add", "data": "{not json"})
    add_event(client, "still applied after that")
    wait_until(lambda: any(e["content"].startswith("still") for e in index_entries(data)), 15)
    wait_until(lambda: client.type(KEYS.status) == "hash", timeout=15)
    assert client.xlen(KEYS.dead) == 1
    assert proc.count_events("redis.foreign_key_replaced") == 2
    assert proc.running()


def test_malformed_events_go_to_dead_letter(daemons: DaemonFactory) -> None:
    data, client = start_embedded(daemons, env={"MNEMOD_LIMITS_MAX_CONTENT_BYTES": "2048"})
    proc = daemons.daemons[0]
    bad = malformed_events(1000, 2048)
    pipe = client.pipeline(transaction=False)
    for fields, _word in bad:
        pipe.xadd(KEYS.events, fields)
    sent = pipe.execute()
    good = add_event(client, "still healthy after the flood")

    wait_until(lambda: client.xlen(KEYS.dead) == len(bad), timeout=30)
    wait_until(lambda: any(e["content"].startswith("still") for e in index_entries(data)), 15)
    dead = client.xrange(KEYS.dead, "-", "+")
    by_event = {fields["event_id"]: fields for _id, fields in dead}
    for event_id, (fields, word) in zip(sent, bad, strict=True):
        got = by_event[event_id]
        assert word in got["error"].lower(), (fields, got["error"])
        for name, value in fields.items():
            assert got[name] == value  # the original is kept
    assert good not in by_event
    assert len(index_entries(data)) == 1
    wait_until(lambda: pending(client) == 0, timeout=10)

    def heartbeat_fresh() -> bool:
        beat = client.hget(KEYS.status, "heartbeat")
        return beat is not None and time.time() - parse_time(beat).timestamp() < 3

    wait_until(heartbeat_fresh, timeout=10)
    assert proc.running()


def test_access_never_recreates_removed_or_merged(daemons: DaemonFactory) -> None:
    data, client = start_embedded(daemons)
    add_event(client, "kept entry about gardening tomatoes", id="keep-1")
    add_event(client, "doomed entry about sailing boats", id="gone-1")
    wait_until(lambda: len(index_entries(data)) == 2, timeout=10)
    client.xadd(KEYS.events, {"op": "remove", "data": json.dumps({"id": "gone-1"})})
    # merged away: the same words as keep-1 fold into it
    add_event(client, "kept entry about gardening tomatoes", id="fold-1")
    wait_until(
        lambda: (
            [e["id"] for e in index_entries(data)] == ["keep-1"]
            and index_entries(data)[0]["merged_from"] == ["fold-1"]
        ),
        timeout=10,
    )
    for target in ("gone-1", "fold-1", "gone-1", "fold-1"):
        client.xadd(KEYS.events, {"op": "access", "data": json.dumps({"id": target})})
    last = add_event(client, "sentinel entry about quantum cats", id="sentinel")
    wait_until(lambda: in_index(data, "sentinel"), timeout=10)
    wait_until(lambda: pending(client) == 0, timeout=10)
    assert last
    ids = sorted(e["id"] for e in index_entries(data))
    assert ids == ["keep-1", "sentinel"]
    assert client.exists(KEYS.item("gone-1")) == 0
    assert client.exists(KEYS.item("fold-1")) == 0
    survivor = next(e for e in index_entries(data) if e["id"] == "keep-1")
    assert survivor["access_count"] == 2  # accesses of a merged id reach the survivor
    assert [r["op"] for r in history(data) if r["id"] == "gone-1"] == ["add", "remove"]
    dead = client.xrange(KEYS.dead, "-", "+")
    assert [f["error"] for _i, f in dead if "gone-1" in f.get("data", "")]  # not found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_daemon_uses_almost_no_cpu(daemons: DaemonFactory) -> None:
    """Very loose on purpose (CI machines are noisy); bench/idle_cpu.py gives the number."""
    data = daemons.data_dir()
    proc = daemons.daemon(data, env={"MNEMOD_SCHEDULE_HEARTBEAT": "5s"}).start()
    proc.url_from_stdout()
    proc.wait_log("daemon.running")
    before, started = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(3)  # a measuring window, not synchronisation
    used = cpu_seconds(proc.pid) - before
    print(f"idle CPU: {used:.3f} s over {time.monotonic() - started:.1f} s")
    assert used < 0.5


def test_a_commit_that_cannot_be_written_keeps_the_daemon_serving(
    daemons: DaemonFactory,
) -> None:
    """A full disk or a read-only filesystem makes the change log's append raise: the daemon
    logs `files.write_failed`, goes on answering, reads no more events, tries again less
    and less often, and acknowledges the events once their record is durable."""
    data = daemons.data_dir()
    proc, client = serving_one_fact(daemons, data)
    log_dir = data / "default" / "log"
    log_dir.rename(log_dir.with_name("log.aside"))
    log_dir.write_text("in the way")  # no segment can be written there
    add_event(client, "The user's dog is called Miso", id="dog")
    proc.wait_log("files.write_failed")
    client.xadd(KEYS.rpc, {"op": "resolve", "prompt": "the dog's name?", "reply_to": "t:dog"})
    answer = client.blpop(["t:dog"], timeout=8)
    assert answer is not None and "Miso" in json.loads(answer[1])["text"], proc.tail()
    assert proc.running() and pending(client) == 1
    log_dir.unlink()
    log_dir.with_name("log.aside").rename(log_dir)
    wait_until(lambda: {e["id"] for e in index_entries(data)} == {"tz", "dog"}, 15)
    wait_until(lambda: pending(client) == 0, 10)
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
