"""A tiny agent on `mnemod.client`: add a memory, access it, resolve over RPC, read hot items.

    REDIS_URL=unix:///path/to/.mnemod/redis/redis.sock python examples/agent.py

REDIS_URL is what `mnemod run` prints (or redis://[user:pass@]host:port/db for a shared
Redis); MNEMOD_NAMESPACE defaults to "default". The client needs the `mnemod` package; an
agent that cannot install it talks plain Redis instead: see examples/python_redis.py.
"""

# An example script talks to its user with print.
# ruff: noqa: T201

from __future__ import annotations

import os

from mnemod.client import Client

url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
namespace = os.environ.get("MNEMOD_NAMESPACE", "default")

with Client(url, namespace=namespace) as memory:
    # 1. Add a memory. The id is chosen here, so sending the same add again is harmless;
    #    `wait` returns once the daemon has applied it (raises if it refused it).
    item_id = memory.add(
        "The user prefers metric units and the Asia/Taipei timezone.",
        type="preference",
        importance=4,
        key="user.prefs",
        wait=10,
    )
    stored = memory.get("user.prefs")  # the hot item with that key label (an update of an
    print("stored as", stored["id"] if stored else item_id)  # existing one keeps its id)

    # 2. Access it (by id or key label): extends its life, counts towards promotion.
    memory.access("user.prefs")

    # 3. Resolve: token-budgeted context for a prompt (raises on a refusal or a timeout).
    answer = memory.resolve(
        "Which timezone and units does the user prefer?", budget=500, session="example"
    )
    print(f"context ({answer['tokens_used']} tokens):\n{answer['text']}")

    # 4. Read hot items: the five most retained L3 entries.
    for item in memory.hot("l3", limit=5):
        print("hot:", item["id"], item["content"])
