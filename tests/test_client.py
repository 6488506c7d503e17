"""`mnemod.client` end to end: a real `mnemod run` process on its embedded Redis, driven
through the client an agent imports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon_proc import DaemonFactory, DaemonProc, index_entries, managed
from helpers import wait_until
from mnemod.client import (
    Client,
    EventRejectedError,
    NoAnswerError,
    NotReplicatedError,
    RequestRejectedError,
)
from mnemod.errors import InvalidInputError, RedisUnavailableError

pytestmark = pytest.mark.process  # starts processes of its own


class Running:
    def __init__(self, proc: DaemonProc, data_dir: Path, url: str) -> None:
        self.proc = proc
        self.data_dir = data_dir
        self.url = url


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One daemon for the module: each test writes memories of its own subject."""
    with managed(tmp_path_factory.mktemp("client")) as factory:
        yield start(factory)


def start(factory: DaemonFactory) -> Running:
    data = factory.data_dir()
    proc = factory.daemon(data).start()
    url = proc.url_from_stdout()
    proc.wait_log("daemon.running")
    return Running(proc, data, url)


@pytest.fixture
def client(daemon: Running) -> Iterator[Client]:
    with Client(daemon.url) as memory:
        yield memory


def test_add_appears_in_the_hot_layer(client: Client) -> None:
    item_id = client.add(
        "Zebra crossings in Utrecht have blinking orange lights",
        type="context",
        importance=4,
        key="test.zebra",
        tags=["traffic"],
    )
    item = wait_until(lambda: client.get(item_id))
    assert item is not None
    assert item["content"] == "Zebra crossings in Utrecht have blinking orange lights"
    assert (item["id"], item["layer"], item["key"], item["importance"]) == (
        item_id,
        "l3",
        "test.zebra",
        4,
    )
    assert "zebra" in item["keywords"]
    assert client.get("test.zebra") == item  # by key label
    assert item_id in client.hot_ids("l3", limit=None)
    assert item_id in [i["id"] for i in client.hot("l3", limit=None)]
    assert client.get("no-such-id-or-key") is None


def test_same_id_twice_stores_one_entry(client: Client, daemon: Running) -> None:
    content = "The staging database is backed up every night at 02:00 UTC"
    first = client.add(content, id="retry-safe-1", type="progress")
    again = client.add(content, id="retry-safe-1", type="progress")
    assert first == again == "retry-safe-1"
    client.wait_applied(timeout=15)  # the second event: applied and durable
    stored = [e for e in index_entries(daemon.data_dir) if e["id"] == "retry-safe-1"]
    assert len(stored) == 1
    assert [e["content"] for e in index_entries(daemon.data_dir)].count(content) == 1
    assert client.hot_ids(limit=None).count("retry-safe-1") == 1


def test_generated_ids_are_unique_and_sortable(client: Client) -> None:
    ids = [client.add(f"Sortable id probe number {n} about kettles") for n in range(5)]
    assert len(set(ids)) == 5
    assert ids == sorted(ids)


def test_access_update_promote_remove(client: Client) -> None:
    item_id = client.add("The cat Miso eats salmon kibble twice a day", key="test.miso", wait=15)
    assert client.get(item_id) is not None

    client.access("test.miso", wait=15)  # a key label works as well as the id
    assert wait_until(lambda: (client.get(item_id) or {}).get("access_count") == 1)

    client.update(item_id, importance=5, tags=["pets"], wait=15)
    assert wait_until(lambda: (client.get(item_id) or {}).get("importance") == 5)

    client.promote(item_id, wait=15)
    promoted = wait_until(lambda: (client.get(item_id) or {}).get("layer") == "l2")
    assert promoted
    assert item_id in client.hot_ids("l2", limit=None)
    assert item_id not in client.hot_ids("l3", limit=None)

    client.remove(item_id, wait=15)
    assert wait_until(lambda: client.get(item_id) is None)
    assert client.get("test.miso") is None


def test_resolve_returns_the_matching_memory(client: Client) -> None:
    client.add(
        "User prefers answers in metric units and the Asia/Taipei timezone",
        type="preference",
        importance=4,
        wait=15,
    )
    answer = client.resolve("which timezone does the user prefer?", budget=500, trace=True)
    assert answer["ok"] is True
    assert "Asia/Taipei" in answer["text"]
    assert any("Asia/Taipei" in item["content"] for item in answer["items"])
    assert 0 < answer["tokens_used"] <= 500
    assert "trace" in answer


def test_rejected_requests_raise(client: Client) -> None:
    with pytest.raises(RequestRejectedError, match="session") as caught:
        client.resolve("anything", session="two\nlines")
    assert caught.value.answer["ok"] is False

    client.add("An entry of a type the daemon does not know", type="no-such-type")
    with pytest.raises(EventRejectedError, match="type"):
        client.wait_applied(timeout=15)

    with pytest.raises(InvalidInputError, match="content"):
        client.add("   ")
    with pytest.raises(InvalidInputError, match="importance"):
        client.add("valid content", importance=9)
    with pytest.raises(InvalidInputError, match="id"):
        client.add("valid content", id="not a valid id")
    with pytest.raises(InvalidInputError, match="budget"):
        client.resolve("anything", budget=0)
    with pytest.raises(InvalidInputError, match="colour"):
        client.update("some-id", colour="red")
    with pytest.raises(InvalidInputError, match="layer"):
        client.hot("l9")
    # bytes that were not UTF-8 (as a shell hands them over): refused before sending
    with pytest.raises(InvalidInputError, match="content: not valid UTF-8"):
        client.add("caf\udce9")
    with pytest.raises(InvalidInputError, match="tags: not valid UTF-8"):
        client.add("valid content", tags=["t\udcff"])
    with pytest.raises(InvalidInputError, match="prompt: not valid UTF-8"):
        client.resolve("caf\udce9?")


def test_timeout_without_a_daemon(redis_server: str) -> None:
    """Redis is up but no daemon reads the namespace: the request stays queued, the
    caller gets a clear timeout instead of hanging."""
    with Client.from_url(redis_server, namespace="nobody-home") as memory:
        with pytest.raises(NoAnswerError, match="mnemod run"):
            memory.resolve("hello?", timeout=0.3)
        memory.add("Queued while no daemon runs")
        with pytest.raises(NoAnswerError, match="stays queued"):
            memory.wait_applied(timeout=0.3)
        assert memory.status() == {}


def test_unreachable_redis(tmp_path: Path) -> None:
    with Client(f"unix://{tmp_path}/missing.sock") as memory:
        with pytest.raises(RedisUnavailableError):
            memory.resolve("hello?", timeout=0.3)
        with pytest.raises(RedisUnavailableError):
            memory.add("something to remember")


def test_an_add_no_replica_confirmed_raises_and_stays_queued(redis_server: str) -> None:
    """`replicas=1` waits (WAIT, on the XADD's connection) for a replica this server does
    not have: NotReplicatedError says none confirmed the add within `replica_timeout`,
    and the add is queued all the same (sending it again is safe)."""
    with Client(redis_server, "unreplicated", replicas=1, replica_timeout=0.05) as memory:
        with pytest.raises(NotReplicatedError, match="0 of 1 replica") as caught:
            memory.add("Kept by the master alone", id="solo")
        assert caught.value.event_id == memory.last_event_id
        assert memory.redis.xlen(memory.keys.events) == 1
    with pytest.raises(InvalidInputError, match="replicas"):
        Client(redis_server, replicas=-1)
