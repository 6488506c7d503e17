"""mnemod from Python with plain redis-py (`pip install redis`): nothing here imports mnemod.

Add a memory, access it, resolve over RPC, read hot items. The same steps work from any
language with a Redis client.

    REDIS_URL=unix:///path/to/.mnemod/redis/redis.sock python examples/python_redis.py

REDIS_URL is what `mnemod run` prints (or redis://[user:pass@]host:port/db for a shared
Redis); MNEMOD_NAMESPACE defaults to "default".
"""

# An example script talks to its user with print.
# ruff: noqa: T201

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import redis

url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
namespace = os.environ.get("MNEMOD_NAMESPACE", "default")
base = "mnemod:{" + namespace + "}"  # every key of a namespace starts like this
r = redis.Redis.from_url(url, decode_responses=True)

# 1. Add a memory: an event on the events stream (only "content" is required).
memory = {
    "content": "The user prefers metric units and the Asia/Taipei timezone.",
    "type": "preference",
    "importance": 4,
    "key": "user.prefs",
}
r.xadd(f"{base}:events", {"op": "add", "data": json.dumps(memory)})

# The daemon applies events in the background; wait until the key label points at an id.
deadline = time.monotonic() + 10
while (item_id := r.get(f"{base}:key:user.prefs")) is None and time.monotonic() < deadline:
    time.sleep(0.1)
if item_id is None:
    sys.exit(f"mnemod did not apply the add: is it running? see {base}:dead")
print("stored as", item_id)

# 2. Access it (by id or key label): extends its life, counts towards promotion.
r.xadd(f"{base}:events", {"op": "access", "data": json.dumps({"id": "user.prefs"})})

# 3. Resolve over RPC: the answer (JSON) is pushed to a list we name, outside mnemod's keys.
reply_to = f"example-reply:{uuid.uuid4().hex}"
request = {
    "op": "resolve",
    "prompt": "Which timezone and units does the user prefer?",
    "budget": 500,
    "session": "example",
    "reply_to": reply_to,
}
r.xadd(f"{base}:rpc", request)
popped = r.blpop([reply_to], timeout=10)
if popped is None:
    sys.exit("no answer from mnemod within 10 s")
answer = json.loads(popped[1])
if not answer.get("ok"):
    sys.exit(f"mnemod refused the request: {answer.get('error')}")
print(f"context ({answer['tokens_used']} tokens):\n{answer['text']}")

# 4. Read hot items: the five most retained L3 entries, then one item by id.
for hot_id in r.zrevrange(f"{base}:hot", 0, 4):
    print("hot:", hot_id, r.hget(f"{base}:m:{hot_id}", "content"))
print(r.hgetall(f"{base}:m:{item_id}"))
r.close()
