"""APScheduler 3 behind one small module (the only importer; it ships no type hints).

Every job is a one-liner that posts a command to the writer. Jobs coalesce, never overlap,
and a listener logs every failed or missed run: nothing is silent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import structlog
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from mnemod.config import ScheduleConfig, parse_schedule
from mnemod.runtime.commands import Command

log = structlog.get_logger("mnemod.scheduler")


class Scheduler:
    def __init__(self, schedule: ScheduleConfig, post: Callable[[Command], None]) -> None:
        self._scheduler = BackgroundScheduler(
            timezone="UTC",
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
        )
        self._scheduler.add_listener(self._on_problem, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        self._post = post
        self.jobs: dict[str, str] = {}
        for name, spec in asdict(schedule).items():
            self.jobs[name] = spec
            self._scheduler.add_job(
                self._post,
                trigger=_trigger(spec),
                args=[Command(name if name != "heartbeat" else "heartbeat")],
                id=name,
                name=name,
            )

    def start(self) -> None:
        self._scheduler.start()
        log.info("scheduler.started", jobs=self.jobs)

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
            log.info("scheduler.stopped")

    def next_runs(self) -> dict[str, str]:
        return {
            job.id: job.next_run_time.isoformat() if job.next_run_time else ""
            for job in self._scheduler.get_jobs()
        }

    def _on_problem(self, event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            log.warning(
                "scheduler.job_missed", job=event.job_id, scheduled=str(event.scheduled_run_time)
            )
        else:
            log.error("scheduler.job_failed", job=event.job_id, error=repr(event.exception))


def _trigger(spec: str) -> Any:
    kind, value = parse_schedule(spec)
    if kind == "cron":
        return CronTrigger.from_crontab(value, timezone="UTC")
    return IntervalTrigger(seconds=value.total_seconds(), timezone="UTC")
