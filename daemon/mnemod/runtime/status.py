"""The `mnemod:{ns}:status` hash: what `mnemod status` and `mnemod doctor` read."""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from mnemod import __version__
from mnemod.clock import Clock, format_time
from mnemod.config import redact_url
from mnemod.redisio.keys import Keys
from mnemod.redisio.status_hash import write_status
from mnemod.runtime.hot_sync import HotSync
from mnemod.runtime.scheduler import Scheduler
from mnemod.runtime.writer import Writer
from mnemod.store.engine import Engine


class StatusWriter:
    def __init__(self, client: redis.Redis, keys: Keys, owner: str, url: str, clock: Clock) -> None:
        self.client = client
        self.keys = keys
        self.owner = owner
        self.url = redact_url(url)
        self.clock = clock
        self.started_at = format_time(clock.now())

    def write(
        self, engine: Engine, writer: Writer, hot: HotSync, scheduler: Scheduler, state: str
    ) -> None:
        jobs: dict[str, Any] = {}
        for name, spec in scheduler.jobs.items():
            jobs[name] = {"schedule": spec, **writer.job_results.get(name, {})}
        counts = {
            "l1": len(engine.l1_items()),
            "l2": len(engine.l2_entries),
            "l3": len(engine.entries),
            "hot": hot.count(),
            "by_type": engine.counts_by_type(),
        }
        fields = {
            "version": __version__,
            "pid": str(os.getpid()),
            "owner": self.owner,
            "state": state,
            "started_at": self.started_at,
            "heartbeat": format_time(self.clock.now()),
            "redis_url": self.url,
            "data_dir": str(engine.paths.root),
            "counts": json.dumps(counts),
            "jobs": json.dumps(jobs),
            "last_gc": json.dumps(writer.job_results.get("gc", {})),
            "last_snapshot": json.dumps(writer.job_results.get("snapshot", {})),
            "last_event_id": engine.last_event_id or "",
            "l1_problems": json.dumps([str(p) for p in engine.l1_problems]),
            "waiting": json.dumps(engine.derived_waiting),
        }
        write_status(self.client, self.keys, fields)
