"""The daemon's /metrics as a scraper sees it: every GC counted, however it was started."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from daemon_proc import KEYS, DaemonFactory, add_event
from helpers import run_cli, wait_until
from test_metrics import free_port, sample


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_a_gc_from_the_cli_or_an_event_is_counted(daemons: DaemonFactory, tmp_path: Path) -> None:
    data_dir = daemons.data_dir()
    port = free_port()
    quiet = {"MNEMOD_SCHEDULE_GC": "1h", "MNEMOD_SCHEDULE_EXPIRY": "1h"}
    proc = daemons.daemon(data_dir, env={"MNEMOD_METRICS_PORT": str(port), **quiet}).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    ns = '{namespace="default"}'
    first = scrape(port)
    assert sample(first, f"mnemod_gc_runs_total{ns}") == 0  # there from the start, at 0
    assert sample(first, f"mnemod_events_dead_lettered_total{ns}") == 0
    assert sample(first, f"mnemod_process_resident_memory_bytes{ns}") > 0

    add_event(client, "Weekly review on Fridays at 10", id="review")
    add_event(client, "Weekly review on Fridays at 10 sharp", id="review-again", type="context")
    done = run_cli(data_dir, "gc", "--json")  # sent to the daemon as an `op gc` event
    assert json.loads(done.stdout)["via"] == "daemon"
    wait_until(lambda: sample(scrape(port), f"mnemod_gc_runs_total{ns}") == 1, timeout=10)

    # jobs run in the order they came: once the run after it is counted, the dry run was done
    client.xadd(KEYS.events, {"op": "gc", "data": json.dumps({"dry_run": True})})  # not a run
    client.xadd(KEYS.events, {"op": "gc", "data": "{}"})
    wait_until(lambda: sample(scrape(port), f"mnemod_gc_runs_total{ns}") >= 2, timeout=10)
    assert sample(scrape(port), f"mnemod_gc_runs_total{ns}") == 2
