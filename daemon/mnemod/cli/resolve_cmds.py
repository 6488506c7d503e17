"""`mnemod resolve`: context for a prompt, from the running daemon (over the rpc stream) or,
with no daemon, from the files directly (`mnemod hook claude-code` is cli/hook_cmd.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mnemod.cli.context import Context
from mnemod.cli.remote import running_daemon
from mnemod.errors import InvalidInputError, LockedError, MnemodError


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    resolve = sub.add_parser(
        "resolve", parents=[common], help="token-budgeted context for a prompt"
    )
    resolve.add_argument("prompt", help="the prompt to find context for")
    resolve.add_argument(
        "--budget", type=int, help="tokens, at least 1 (default: resolve.default_budget, 1000)"
    )
    resolve.add_argument(
        "--session", help="session id: `once` items are injected once per session (default: none)"
    )
    resolve.add_argument(
        "--trace", action="store_true", help="add scores and reasons per item (default: off)"
    )
    resolve.set_defaults(handler=cmd_resolve)


def resolve_payload(
    ctx: Context, prompt: str, budget: int | None, session: str | None, trace: bool
) -> dict[str, Any]:
    """Through the daemon when one runs; otherwise on the files (recording accesses when the
    namespace is free, read-only when another writer holds it)."""
    if budget is not None and budget < 1:
        raise InvalidInputError("--budget", "must be at least 1 token")
    client = running_daemon(ctx)
    if client is not None:
        with client:
            return client.resolve(prompt, budget, session=session, trace=trace)
    try:
        with ctx.engine(write=True) as engine:
            result = engine.resolve(prompt, budget, session=session, trace=trace)
    except LockedError:
        with ctx.engine(write=False) as engine:
            result = engine.resolve(
                prompt, budget, session=session, trace=trace, record_access=False
            )
    from mnemod.redisio.rpc import result_payload  # with redis: not for every command's parser

    return result_payload(result, trace)


def cmd_resolve(ctx: Context) -> int:
    a = ctx.args
    payload = resolve_payload(ctx, a.prompt, a.budget, a.session, a.trace)
    if not payload.get("ok", True):
        raise MnemodError(str(payload.get("error")))
    text = payload["text"]
    if a.trace and not ctx.as_json:
        rows = [json.dumps(row, ensure_ascii=False) for row in payload.get("trace", [])]
        text = "\n".join([text, "", "# trace", *rows])
    ctx.emit(payload, text)
    if not ctx.as_json:
        # on stderr: stdout is exactly the context, to prepend or pipe into a prompt
        count = len(payload["items"])
        sys.stderr.write(
            f"mnemod: {payload['tokens_used']} tokens, {count} item{'' if count == 1 else 's'}, "
            f"{payload['dropped']} left out\n"
        )
    return 0
