"""RPC request validation: every malformed request names its problem."""

from __future__ import annotations

import pytest

from mnemod.errors import InvalidInputError
from mnemod.redisio.keys import Keys
from mnemod.redisio.rpc import ResolveRequest, StatsRequest, parse_request, reply_target

KEYS = Keys("mnemod", "default")


def request(**fields: str) -> dict[str, str]:
    return {"op": "resolve", "prompt": "hi", "reply_to": "agent:reply:1", **fields}


def test_a_good_request() -> None:
    parsed = parse_request("1-0", request(budget="500", session="s", trace="1"), KEYS)
    assert isinstance(parsed, ResolveRequest)
    assert (parsed.budget, parsed.session, parsed.trace) == (500, "s", True)


def test_reply_targets() -> None:
    assert (
        reply_target(request(reply_to="mnemod:{default}:reply:abc"), KEYS)
        == "mnemod:{default}:reply:abc"
    )
    assert reply_target(request(reply_to="mnemod:{default}:hot"), KEYS) is None
    assert reply_target(request(reply_to="mnemod:{default}:reply:"), KEYS) is None
    assert reply_target(request(reply_to="x" * 201), KEYS) is None
    assert reply_target({"op": "resolve"}, KEYS) is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"op": "nope"}, "op"),
        ({"budget": "many"}, "budget"),
        ({"budget": "0"}, "budget"),
        ({"session": "a\nb"}, "session"),
        ({"reply_to": "mnemod:{default}:m:1"}, "reply_to"),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_request("1-0", request(**fields), KEYS)
    assert caught.value.field == field


def test_missing_prompt() -> None:
    raw = request()
    del raw["prompt"]
    with pytest.raises(InvalidInputError, match="prompt: missing"):
        parse_request("1-0", raw, KEYS)


def test_a_stats_request_needs_only_its_reply_target() -> None:
    parsed = parse_request("1-0", {"op": "stats", "reply_to": "agent:reply:1"}, KEYS)
    assert isinstance(parsed, StatsRequest)
    assert (parsed.request_id, parsed.reply_to) == ("1-0", "agent:reply:1")
    with pytest.raises(InvalidInputError) as caught:
        parse_request("1-0", {"op": "stats"}, KEYS)
    assert caught.value.field == "reply_to"
