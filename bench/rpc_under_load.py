"""Resolve over the Redis RPC while agents keep writing: the tail a busy agent sees.

The corpus and prompts are those of `resolve_speed.py` (LoCoMo turns varied, or synthetic
sentences). `mnemod run` serves the folder; one thread adds memories through the client at
`--adds-per-second` (each add a snapshot's worth of work: one is due every 2 s while events
come), another asks `Client.resolve` after `--pause-ms` of idle, for `--seconds`. The
requests that wait are those that arrive while the daemon takes a snapshot, does a slice
of the bookkeeping answers leave (runtime/bookkeeping.py), or collects garbage; the table
shows how long.

With `--gc`, a full GC (an `op gc` event) is started once the daemon serves, and the
requests are asked until it finished (at least `--seconds`): the table is then of those
answered while it ran, beside its duration, its own work (`busy_ms`), its longest step
and the longest stretches the writer logged as keeping requests waiting (`writer.stalled`,
over 50 ms, from the GC's start on: wall and the writer's CPU ms; on a loaded machine the
rest is waiting for a core). It starts after one add and one resolve were answered (the
first of each builds the lookups it needs); the first GC after start-up looks from every
entry (the longest it takes).

    python bench/rpc_under_load.py [--entries 10000] [--adds-per-second 20] [--pause-ms 5]
        [--seconds 20] [--gc] [--out bench/results/rpc_under_load.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "daemon"))

import resolve_speed as speed
from mnemod.client import Client
from mnemod.redisio.keys import Keys
from results import write_results

KEYS = Keys("mnemod", "default")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    turns, questions, _ = speed.corpus(Path(args.data))
    prompts = random.Random(1).sample(questions, min(60, len(questions)))
    source = speed.memories(turns, random.Random(args.entries))
    with tempfile.TemporaryDirectory(prefix="mnemod-load-") as name:
        folder = Path(name)
        speed.build(folder, args.entries, source)
        with speed.daemon(folder) as (url, _pid, _ready):
            asker, adder = Client(url), Client(url)
            stop = threading.Event()
            added = 0

            def add() -> None:
                nonlocal added
                while not stop.is_set():
                    adder.add(next(source), type="context")
                    added += 1
                    stop.wait(1.0 / args.adds_per_second)

            if args.gc:  # once what the first add and resolve build is built
                asker.add(next(source), type="context")
                asker.resolve(prompts[0], budget=speed.BUDGET, timeout=600)
                time.sleep(1.0)  # the step that answered it ends (and logs a stall) first
            writer = threading.Thread(target=add, daemon=True)
            if args.adds_per_second > 0:
                writer.start()
            samples: list[tuple[float, float]] = []  # (answered at, seconds it took)
            log_path = folder / "daemon.log"
            gc_sent = gc_done = None
            since = ""  # the stalls logged from then on are shown (the GC's, with --gc)
            if args.gc:
                gc_sent, since = time.perf_counter(), datetime.now(UTC).isoformat()
                asker.redis.xadd(KEYS.events, {"op": "gc", "data": "{}"})
            deadline = time.monotonic() + args.seconds
            checked = time.monotonic()
            while time.monotonic() < deadline or (args.gc and gc_done is None):
                for prompt in prompts:
                    time.sleep(args.pause_ms / 1000)
                    started = time.perf_counter()
                    asker.resolve(prompt, budget=speed.BUDGET, timeout=60)
                    now = time.perf_counter()
                    samples.append((now, now - started))
                    if args.gc and gc_done is None and time.monotonic() - checked > 0.2:
                        checked = time.monotonic()
                        if events(log_path, "gc.finished", expire_only=False):
                            gc_done = time.perf_counter()
            stop.set()
            if writer.is_alive():
                writer.join(timeout=10)
        snapshots = [r["duration_ms"] for r in events(log_path, "snapshot.written")]
        finished = events(log_path, "gc.finished", expire_only=False)
        stalled = longest_stalls(
            [r for r in events(log_path, "writer.stalled") if str(r.get("timestamp")) >= since]
        )
    if gc_sent is not None and gc_done is not None:
        samples = [(at, took) for at, took in samples if gc_sent <= at <= gc_done]
    row = summary(args, [took for _, took in samples], added, len(snapshots))
    if args.gc and finished:
        report = finished[-1]
        assert gc_sent is not None and gc_done is not None
        row["gc"] = {
            "seen_s": round(gc_done - gc_sent, 1),
            "duration_ms": report.get("duration_ms"),
            "busy_ms": report.get("busy_ms"),
            "longest_step_ms": report.get("longest_step_ms"),
            "merged": report.get("merged"),
        }
    row["stalls"] = stalled
    return row


def events(log_path: Path, name: str, **match: Any) -> list[dict[str, Any]]:
    """The daemon's log lines of event `name` with the fields in `match`."""
    found = []
    for line in log_path.read_text().splitlines():
        if f'"{name}"' in line:
            row = json.loads(line)
            if row.get("event") == name and all(row.get(k) == v for k, v in match.items()):
                found.append(row)
    return found


def longest_stalls(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The longest stretch of each kind the writer logged as keeping requests waiting:
    [wall ms, the writer's CPU ms in it]."""
    longest: dict[str, list[float]] = {}
    for row in rows:
        what = str(row.get("what"))
        wall, cpu = float(row.get("ms", 0.0)), float(row.get("cpu_ms", 0.0))
        was = longest.get(what, [0.0, 0.0])
        longest[what] = [max(was[0], wall), max(was[1], cpu)]
    return longest


def summary(
    args: argparse.Namespace, samples: list[float], added: int, snapshots: int
) -> dict[str, Any]:
    ordered = sorted(samples) or [float("nan")]
    return {
        "entries": args.entries,
        "adds_per_second": args.adds_per_second,
        "pause_ms": args.pause_ms,
        "requests": len(samples),
        "added": added,
        "snapshots": snapshots,
        "rpc_ms": {
            "p50": speed.percentile(ordered, 0.5),
            "p90": speed.percentile(ordered, 0.9),
            "p99": speed.percentile(ordered, 0.99),
            "max": round(ordered[-1] * 1000, 1),
        },
        "over_50ms": sum(1 for s in samples if s > 0.05),
        "over_100ms": sum(1 for s in samples if s > 0.1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=str(speed.ROOT.parent / "shared" / "data" / "locomo-dev.jsonl")
    )
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--adds-per-second", type=float, default=20.0)
    parser.add_argument("--pause-ms", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--gc", action="store_true", help="start a full GC and measure while it runs"
    )
    parser.add_argument(
        "--out", default=str(speed.ROOT / "bench" / "results" / "rpc_under_load.json")
    )
    args = parser.parse_args(argv)
    row = measure(args)
    rpc = row["rpc_ms"]
    while_gc = " while a full GC ran" if "gc" in row else ""
    print(
        f"resolve over RPC{while_gc}, {row['entries']} entries, "
        f"{row['adds_per_second']:g} adds/s, "
        f"{row['pause_ms']:g} ms between requests, budget {speed.BUDGET}"
    )
    head = ("requests", "added", "snapshots", "p50", "p90", "p99", "max", ">50 ms", ">100 ms")
    print("".join(f"{h:>10}" for h in head) + "   (ms)")
    cells = [
        row["requests"], row["added"], row["snapshots"], rpc["p50"], rpc["p90"],
        rpc["p99"], rpc["max"], row["over_50ms"], row["over_100ms"],
    ]  # fmt: skip
    print("".join(f"{c:>10}" for c in cells))
    if "gc" in row:
        gc = row["gc"]
        print(
            f"GC: {gc['seen_s']} s seen, busy {gc['busy_ms']} ms, longest step "
            f"{gc['longest_step_ms']} ms, merged {gc['merged']}"
        )
    for what, (wall, cpu) in sorted(row["stalls"].items()):
        print(f"writer stalled by {what}: longest {wall} ms ({cpu} ms CPU)")
    write_results(args.out, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
