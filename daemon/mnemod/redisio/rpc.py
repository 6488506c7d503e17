"""RPC requests on `mnemod:{ns}:rpc`: parse a request and shape its reply.

A request carries `op=resolve`, `prompt`, `budget`, optional `session` and `trace`, and
`reply_to`: the list the JSON answer is pushed to (it expires after 60 s). `op=stats` with
`reply_to` alone asks for the namespace's counts as the daemon holds them. A malformed
request is answered with an error when it names a usable `reply_to`; otherwise it goes to the
dead-letter stream. Nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemod.errors import InvalidInputError
from mnemod.redisio.connection import check_text
from mnemod.redisio.keys import Keys

if TYPE_CHECKING:  # the client checks requests without loading the ranking
    from mnemod.domain.resolve import ResolveResult

REPLY_TTL_SECONDS = 60
MAX_PROMPT_CHARS = 100_000
MAX_BUDGET = 1_000_000
OPS = ("resolve", "stats")


@dataclass(frozen=True)
class ResolveRequest:
    request_id: str
    prompt: str
    budget: int | None
    session: str | None
    trace: bool
    reply_to: str


@dataclass(frozen=True)
class StatsRequest:
    request_id: str
    reply_to: str


def reply_target(raw: dict[str, str], keys: Keys) -> str | None:
    """The usable `reply_to` of a request, or None: the namespace's reply lists
    (`mnemod:{ns}:reply:<token>`) or any key outside mnemod's own (a request must not be
    able to overwrite the hot layer)."""
    target = raw.get("reply_to", "")
    if not target or len(target) > 200 or not target.isprintable():
        return None  # not printable: a control character, or bytes that are not UTF-8
    if target.startswith(keys.reply("")) and len(target) > len(keys.reply("")):
        return target
    if target.startswith(f"{keys.prefix}:{{"):
        return None
    return target


def parse_request(
    request_id: str, raw: dict[str, str], keys: Keys, max_budget: int = MAX_BUDGET
) -> ResolveRequest | StatsRequest:
    where = f"rpc {request_id}"
    check_text(raw, where)
    reply_to = reply_target(raw, keys)
    if reply_to is None:
        raise InvalidInputError("reply_to", "missing, too long, or one of mnemod's own keys", where)
    op = raw.get("op", "")
    if op not in OPS:
        raise InvalidInputError("op", f"unknown op {op[:40]!r} (known: {', '.join(OPS)})", where)
    if op == "stats":
        return StatsRequest(request_id, reply_to)
    prompt = raw.get("prompt")
    if prompt is None:
        raise InvalidInputError("prompt", "missing", where)
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidInputError(
            "prompt", f"{len(prompt)} characters, at most {MAX_PROMPT_CHARS}", where
        )
    budget: int | None = None
    if raw.get("budget"):
        try:
            budget = int(raw["budget"])
        except ValueError:
            raise InvalidInputError("budget", "must be a whole number of tokens", where) from None
        if not 1 <= budget <= max_budget:
            raise InvalidInputError("budget", f"must be 1–{max_budget}", where)
    session = raw.get("session") or None
    if session is not None and (len(session) > 200 or "\n" in session):
        raise InvalidInputError("session", "at most 200 characters, one line", where)
    trace = raw.get("trace", "").lower() in ("1", "true", "yes")
    return ResolveRequest(request_id, prompt, budget, session, trace, reply_to)


def result_payload(result: ResolveResult, with_trace: bool) -> dict[str, Any]:
    """The JSON shape of a resolve answer: the same for the RPC, the CLI and the hook."""
    payload: dict[str, Any] = {
        "ok": True,
        "text": result.text,
        "tokens_used": result.tokens_used,
        "tiers_used": list(result.tiers_used),
        "dropped": result.dropped,
        "hot_overflow": result.hot_overflow,
        "items": [
            {
                "id": c.id,
                "layer": c.layer,
                "type": c.type,
                "key": c.key,
                "content": c.content,
                "tokens": c.tokens,
                "merged_from": list(c.merged_from),
            }
            for c in result.items
        ],
    }
    if with_trace:
        payload["trace"] = result.trace
    return payload
