"""A tiny agent that uses mnemod through plain Redis: remember one fact, then ask for context.

Only redis-py is needed (`pip install redis`); nothing here imports mnemod. The same three
steps work from any language with a Redis client:

1. XADD  mnemod:{ns}:events  * op add data '{"content": ..., "type": ...}'
2. XADD  mnemod:{ns}:rpc     * op resolve prompt "..." budget 500 reply_to <list key>
3. BLPOP <list key> 30       -> the JSON answer (`text`, `items`, `tokens_used`, ...)

Environment: REDIS_URL (default redis://localhost:6379/0), MNEMOD_NAMESPACE (default
"default"), MNEMOD_PREFIX (default "mnemod"). With the embedded default, REDIS_URL is the
unix:// URL `mnemod run` prints at start.
"""

# An example script talks to its user with print.
# ruff: noqa: T201

from __future__ import annotations

import json
import os
import sys
import uuid

import redis

WAIT_SECONDS = 30


def main() -> int:
    url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    namespace = os.environ.get("MNEMOD_NAMESPACE", "default")
    prefix = os.environ.get("MNEMOD_PREFIX", "mnemod")
    base = f"{prefix}:{{{namespace}}}"  # the {namespace} hash tag: one Cluster slot
    client = redis.Redis.from_url(url, decode_responses=True)

    # Listen for the change notice before writing, so it cannot be missed.
    changes = client.pubsub(ignore_subscribe_messages=True)
    changes.subscribe(f"{base}:changes")

    # 1. Remember something. The daemon applies events in the background; an event is
    #    never lost, even if mnemod is down right now: it waits in the stream.
    fact = {
        "content": "The user prefers answers in metric units and the Asia/Taipei timezone.",
        "type": "preference",
        "importance": 4,
        "key": "user.preferences",
        "tags": ["example"],
    }
    event_id = client.xadd(f"{base}:events", {"op": "add", "data": json.dumps(fact)})
    print("queued add event", event_id)

    notice = changes.get_message(timeout=WAIT_SECONDS)
    changes.close()
    if notice is None:
        print("no change notice yet: is mnemod running? asking anyway", file=sys.stderr)
    else:
        print(f"mnemod applied it: {notice['data']}")

    # 2. Ask for token-budgeted context for a prompt. The answer goes to a list we name.
    reply_to = f"example-agent:reply:{uuid.uuid4().hex}"
    client.xadd(
        f"{base}:rpc",
        {
            "op": "resolve",
            "prompt": "How far is it from Taipei to Tainan, and what time is it there?",
            "budget": 500,
            "session": "example-session",
            "reply_to": reply_to,
        },
    )

    # 3. Wait for the answer (the daemon lets the reply list expire after 60 s).
    popped = client.blpop([reply_to], timeout=WAIT_SECONDS)
    if popped is None:
        print(f"no answer within {WAIT_SECONDS} s: is mnemod running on {url}?", file=sys.stderr)
        return 1
    answer = json.loads(popped[1])
    if "error" in answer:
        print(f"mnemod refused the request: {answer['error']}", file=sys.stderr)
        return 1
    print(f"context ({answer.get('tokens_used')} tokens):")
    print(answer.get("text", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
