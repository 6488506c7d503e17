"""Prometheus metrics: own registry, counted always, served only when a port is set."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from mnemod.runtime.metrics import Metrics, MetricsServerError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sample(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_start} not in the scrape")


def populated() -> Metrics:
    metrics = Metrics()
    metrics.event_applied("default", 3)
    metrics.event_dead_lettered("default")
    metrics.gc_finished("default", expired=2, merged=1, promoted=0)
    metrics.snapshot_written("default", 0.02)
    metrics.resolved("agent-b", 0.003)
    metrics.set_hot_items("default", 42)
    metrics.set_leader("default", True)
    metrics.set_events_pending("default", 7)
    return metrics


def test_scrape_over_http() -> None:
    metrics = populated()
    port = free_port()
    stop = metrics.serve("127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        stop()
    ns = '{namespace="default"}'
    assert sample(text, f"mnemod_events_applied_total{ns}") == 3
    assert sample(text, f"mnemod_events_dead_lettered_total{ns}") == 1
    assert sample(text, f"mnemod_gc_runs_total{ns}") == 1
    assert sample(text, f"mnemod_gc_expired_total{ns}") == 2
    assert sample(text, f"mnemod_gc_merged_total{ns}") == 1
    assert sample(text, f"mnemod_gc_promoted_total{ns}") == 0
    assert sample(text, f"mnemod_snapshot_seconds_count{ns}") == 1
    assert sample(text, 'mnemod_resolve_seconds_count{namespace="agent-b"}') == 1
    assert sample(text, f"mnemod_hot_items{ns}") == 42
    assert sample(text, f"mnemod_is_leader{ns}") == 1
    assert sample(text, f"mnemod_events_pending{ns}") == 7


def test_stop_closes_the_port() -> None:
    port = free_port()
    stop = Metrics().serve("127.0.0.1", port)
    stop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_port_zero_serves_nothing_but_still_counts() -> None:
    metrics = Metrics()
    stop = metrics.serve("127.0.0.1", 0)
    metrics.set_leader("default", False)
    stop()
    assert sample(metrics.render().decode(), 'mnemod_is_leader{namespace="default"}') == 0


def test_registries_are_independent() -> None:
    first, second = Metrics(), Metrics()
    first.event_applied("default")
    assert "mnemod_events_applied_total{" not in second.render().decode()


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(MetricsServerError, match=f"127.0.0.1:{port}"):
            Metrics().serve("127.0.0.1", port)


def test_the_namespace_series_exist_at_zero_from_the_start() -> None:
    text = Metrics("agent-a").render().decode()
    ns = '{namespace="agent-a"}'
    for name in (
        "events_applied_total",
        "events_dead_lettered_total",
        "gc_runs_total",
        "gc_expired_total",
        "gc_merged_total",
        "gc_promoted_total",
        "snapshot_seconds_count",
        "resolve_seconds_count",
        "hot_items",
        "is_leader",
        "events_pending",
    ):
        assert sample(text, f"mnemod_{name}{ns}") == 0, name


def test_process_metrics_carry_the_namespace_label() -> None:
    text = Metrics("agent-a").render().decode()
    assert sample(text, 'mnemod_process_resident_memory_bytes{namespace="agent-a"}') > 0
    assert sample(text, 'mnemod_process_open_fds{namespace="agent-a"}') > 0
    unlabelled = [
        line for line in text.splitlines() if line.startswith("mnemod_process_") and "{" not in line
    ]
    assert unlabelled == []


def test_a_daemon_of_several_namespaces_has_every_series_of_each_from_the_start() -> None:
    metrics = Metrics(process_label="alpha,beta")
    for namespace in ("alpha", "beta"):
        metrics.add_namespace(namespace)
    text = metrics.render().decode()
    for namespace in ("alpha", "beta"):
        assert sample(text, f'mnemod_events_applied_total{{namespace="{namespace}"}}') == 0
        assert sample(text, f'mnemod_is_leader{{namespace="{namespace}"}}') == 0
    assert 'mnemod_process_resident_memory_bytes{namespace="alpha,beta"}' in text
