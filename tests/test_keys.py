"""Every Redis key name as an exact string: the contract agents rely on (docs/design.md §3)."""

from __future__ import annotations

import pytest

from mnemod.errors import InvalidInputError
from mnemod.redisio.keys import (
    GROUP,
    Keys,
    daemons_key,
    events_pattern,
    namespace_of_events,
)


@pytest.fixture
def keys() -> Keys:
    return Keys("mnemod", "ns")


def test_streams_and_channels(keys: Keys) -> None:
    assert keys.events == "mnemod:{ns}:events"
    assert keys.dead == "mnemod:{ns}:dead"
    assert keys.rpc == "mnemod:{ns}:rpc"
    assert keys.changes == "mnemod:{ns}:changes"
    assert keys.status == "mnemod:{ns}:status"
    assert keys.reply("9f1c") == "mnemod:{ns}:reply:9f1c"


def test_hot_layer(keys: Keys) -> None:
    assert keys.item("01J0ABC") == "mnemod:{ns}:m:01J0ABC"
    assert keys.hot == "mnemod:{ns}:hot"
    assert keys.l1 == "mnemod:{ns}:l1"
    assert keys.l2 == "mnemod:{ns}:l2"
    assert keys.key("user.tz") == "mnemod:{ns}:key:user.tz"


def test_layer_sets(keys: Keys) -> None:
    assert keys.layer("l1") == "mnemod:{ns}:l1"
    assert keys.layer("l2") == "mnemod:{ns}:l2"
    assert keys.layer("l3") == "mnemod:{ns}:hot"
    with pytest.raises(InvalidInputError):
        keys.layer("l4")


def test_daemon_bookkeeping(keys: Keys) -> None:
    assert keys.lease == "mnemod:{ns}:lease"
    assert keys.sessions("s-1") == "mnemod:{ns}:session:s-1"
    assert keys.marker == "mnemod:{ns}:epoch"
    assert GROUP == "mnemod"


def test_prefix_and_default_namespace() -> None:
    assert Keys().events == "mnemod:{default}:events"
    assert Keys("mem", "agent-7").item("a") == "mem:{agent-7}:m:a"


def test_every_key_carries_the_hash_tag(keys: Keys) -> None:
    names = [
        keys.events,
        keys.dead,
        keys.rpc,
        keys.changes,
        keys.status,
        keys.item("i"),
        keys.hot,
        keys.l1,
        keys.l2,
        keys.key("k"),
        keys.lease,
        keys.sessions("s"),
        keys.marker,
        keys.reply("r"),
    ]
    assert all(name.startswith("mnemod:{ns}:") for name in names)
    assert len(set(names)) == len(names)


def test_scan_patterns_escape_glob_characters() -> None:
    assert Keys("mnemod", "ns").item_pattern == "mnemod:{ns}:m:*"
    assert Keys("mnemod", "ns").kw_pattern == "mnemod:{ns}:kw:*"
    assert Keys("mnemod", "ns").key_pattern == "mnemod:{ns}:key:*"
    assert Keys("mnemod", "a*b").item_pattern == "mnemod:{a\\*b}:m:*"


def test_item_id_inverts_item(keys: Keys) -> None:
    assert keys.item_id(keys.item("01J0ABC")) == "01J0ABC"
    with pytest.raises(InvalidInputError):
        keys.item_id("mnemod:{other}:m:x")


@pytest.mark.parametrize(
    ("prefix", "namespace"),
    [("", "ns"), ("a:b", "ns"), ("m", ""), ("m", "a{b"), ("m", "a}b"), ("m", "a:b")],
)
def test_bad_prefix_or_namespace(prefix: str, namespace: str) -> None:
    with pytest.raises(InvalidInputError):
        Keys(prefix, namespace)


def test_the_events_stream_of_every_namespace_is_found_by_its_name() -> None:
    assert events_pattern("mnemod") == "mnemod:{*}:events"
    assert events_pattern("a*b") == "a\\*b:{*}:events"
    assert namespace_of_events("mnemod", Keys("mnemod", "work").events) == "work"
    for other in ("mnemod:{work}:rpc", "other:{work}:events", "mnemod:{a}:m:{b}:events"):
        assert namespace_of_events("mnemod", other) is None
    assert daemons_key("mnemod") == "mnemod:daemons"
