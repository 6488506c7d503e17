"""Optional Prometheus metrics: counters and gauges the daemon updates, /metrics on demand.

`Metrics` owns its own `CollectorRegistry` (never the process-global one), so tests and
several daemons in one process do not collide. It always counts; nothing is exposed until
`serve(host, port)` is called with a port > 0 (`[metrics] port`, default 0: off). An
unexposed `Metrics` is the no-op variant: updating it costs a lock and an addition.

Every series carries a `namespace` label, the process metrics (`process_*`) included (a
daemon of several namespaces labels those with the namespaces it serves, `a,b`). Each
namespace the daemon serves has every labelled series at 0 from the start, so that
`increase()` and `absent()` alerts see the series before its first change.

Names (all prefixed `mnemod_`):

| metric | type | meaning |
|---|---|---|
| events_applied_total | counter | events applied to L3 |
| events_dead_lettered_total | counter | events moved to the dead-letter stream |
| gc_{runs,expired,merged,promoted}_total | counter | GC runs and their results |
| snapshot_seconds | histogram | time to write index.json durably |
| resolve_seconds | histogram | time to answer one resolve |
| hot_items | gauge | items in the Redis hot layer |
| is_leader | gauge | 1 while this daemon holds the namespace lease |
| events_pending | gauge | events in the stream not yet applied |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from mnemod.errors import MnemodError

if TYPE_CHECKING:
    from mnemod.domain.gc import GcReport

PREFIX = "mnemod"
SNAPSHOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RESOLVE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class MetricsServerError(MnemodError):
    """The /metrics endpoint cannot listen where configured."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(f"metrics: cannot listen on {host}:{port}: {reason}")


class Metrics:
    """The daemon's metrics, in a registry of their own; `namespace`, if given, is the
    daemon's: its series are created at 0 and the process metrics carry it (or
    `process_label`, for a daemon of several namespaces: `add_namespace` each)."""

    def __init__(self, namespace: str | None = None, process_label: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("namespace",)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, namespace=PREFIX, registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, namespace=PREFIX, registry=self.registry)

        self.events_applied = counter("events_applied", "Events applied to L3.")
        self.events_dead_lettered = counter(
            "events_dead_lettered", "Events moved to the dead-letter stream."
        )
        self.gc_runs = counter("gc_runs", "Garbage collection runs (dry runs excluded).")
        self.gc_expired = counter("gc_expired", "Entries expired into archive.jsonl by GC.")
        self.gc_merged = counter("gc_merged", "Near-duplicate entries merged by GC.")
        self.gc_promoted = counter("gc_promoted", "Entries promoted to L2 by GC.")
        self.snapshot_seconds = Histogram(
            "snapshot_seconds",
            "Time to write the L3 snapshot durably.",
            labels,
            namespace=PREFIX,
            registry=self.registry,
            buckets=SNAPSHOT_BUCKETS,
        )
        self.resolve_seconds = Histogram(
            "resolve_seconds",
            "Time to answer one resolve request.",
            labels,
            namespace=PREFIX,
            registry=self.registry,
            buckets=RESOLVE_BUCKETS,
        )
        self.hot_items = gauge("hot_items", "Items in the Redis hot layer.")
        self.is_leader = gauge("is_leader", "1 while this daemon holds the namespace lease.")
        self.events_pending = gauge("events_pending", "Events in the stream not yet applied.")
        self._series = (
            self.events_applied,
            self.events_dead_lettered,
            self.gc_runs,
            self.gc_expired,
            self.gc_merged,
            self.gc_promoted,
            self.snapshot_seconds,
            self.resolve_seconds,
            self.hot_items,
            self.is_leader,
            self.events_pending,
        )
        # process_resident_memory_bytes and friends: what a small Pi cares about.
        process = ProcessCollector(namespace=PREFIX, registry=None)
        label = namespace if process_label is None else process_label
        self.registry.register(process if label is None else _Labelled(process, label))
        if namespace is not None:
            self.add_namespace(namespace)

    def add_namespace(self, namespace: str) -> None:
        """A namespace the daemon serves: each of its series exists, at 0."""
        for metric in self._series:
            metric.labels(namespace)

    # One method per thing that happens, so callers never touch prometheus_client.
    def event_applied(self, namespace: str, count: int = 1) -> None:
        self.events_applied.labels(namespace).inc(count)

    def event_dead_lettered(self, namespace: str, count: int = 1) -> None:
        self.events_dead_lettered.labels(namespace).inc(count)

    def gc_finished(self, namespace: str, *, expired: int, merged: int, promoted: int) -> None:
        self.gc_runs.labels(namespace).inc()
        self.gc_expired.labels(namespace).inc(expired)
        self.gc_merged.labels(namespace).inc(merged)
        self.gc_promoted.labels(namespace).inc(promoted)

    def gc_reported(self, namespace: str, report: GcReport) -> None:
        """A GC run however it was started (schedule, `mnemod gc`, an `op gc` event); a dry
        run changes nothing and is not counted."""
        if not report.dry_run:
            self.gc_finished(
                namespace, expired=report.expired, merged=report.merged, promoted=report.promoted
            )

    def snapshot_written(self, namespace: str, seconds: float) -> None:
        self.snapshot_seconds.labels(namespace).observe(seconds)

    def resolved(self, namespace: str, seconds: float) -> None:
        self.resolve_seconds.labels(namespace).observe(seconds)

    def set_hot_items(self, namespace: str, count: int) -> None:
        self.hot_items.labels(namespace).set(count)

    def set_leader(self, namespace: str, leader: bool) -> None:
        self.is_leader.labels(namespace).set(1 if leader else 0)

    def set_events_pending(self, namespace: str, count: int) -> None:
        self.events_pending.labels(namespace).set(count)

    def render(self) -> bytes:
        """The text exposition format, as /metrics serves it."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Serve /metrics on host:port in a daemon thread; returns the function that stops it.

        With port 0 (the default: off) nothing listens and the stop function does nothing.
        """
        if port <= 0:
            return _nothing
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsServerError(host, port, exc.strerror or str(exc)) from exc

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join()

        return stop


def _nothing() -> None:
    return None


class _Labelled(Collector):
    """Another collector's metrics with a `namespace` label added to every sample."""

    def __init__(self, inner: Collector, namespace: str) -> None:
        self.inner = inner
        self.namespace = namespace

    def collect(self) -> Iterator[Metric]:
        for metric in self.inner.collect():
            labelled = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            labelled.samples = [
                s._replace(labels={**s.labels, "namespace": self.namespace}) for s in metric.samples
            ]
            yield labelled
