"""Resolve over the Redis RPC while agents keep writing: the tail a busy agent sees.

The corpus and prompts are those of `resolve_speed.py` (LoCoMo turns varied, or synthetic
sentences). `mnemod run` serves the folder; one thread adds memories through the client at
`--adds-per-second` (each add a snapshot's worth of work: one is due every 2 s while events
come), another asks `Client.resolve` after `--pause-ms` of idle, for `--seconds`. The
requests that wait are those that arrive while the daemon takes a snapshot, does a slice
of the bookkeeping answers leave (runtime/bookkeeping.py), or collects garbage; the table
shows how long.

    python bench/rpc_under_load.py [--entries 10000] [--adds-per-second 20] [--pause-ms 5]
        [--seconds 20] [--out bench/results/rpc_under_load.json]
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "daemon"))

import resolve_speed as speed
from mnemod.client import Client
from results import write_results


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

            writer = threading.Thread(target=add, daemon=True)
            if args.adds_per_second > 0:
                writer.start()
            samples: list[float] = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                for prompt in prompts:
                    time.sleep(args.pause_ms / 1000)
                    started = time.perf_counter()
                    asker.resolve(prompt, budget=speed.BUDGET, timeout=60)
                    samples.append(time.perf_counter() - started)
            stop.set()
            if writer.is_alive():
                writer.join(timeout=10)
        snapshots = [
            json.loads(line)["duration_ms"]
            for line in (folder / "daemon.log").read_text().splitlines()
            if '"snapshot.written"' in line
        ]
    ordered = sorted(samples)
    return {
        "entries": args.entries,
        "adds_per_second": args.adds_per_second,
        "pause_ms": args.pause_ms,
        "requests": len(ordered),
        "added": added,
        "snapshots": len(snapshots),
        "rpc_ms": {
            "p50": speed.percentile(ordered, 0.5),
            "p90": speed.percentile(ordered, 0.9),
            "p99": speed.percentile(ordered, 0.99),
            "max": round(ordered[-1] * 1000, 1),
        },
        "over_100ms": sum(1 for s in ordered if s > 0.1),
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
        "--out", default=str(speed.ROOT / "bench" / "results" / "rpc_under_load.json")
    )
    args = parser.parse_args(argv)
    row = measure(args)
    rpc = row["rpc_ms"]
    print(
        f"resolve over RPC, {row['entries']} entries, {row['adds_per_second']:g} adds/s, "
        f"{row['pause_ms']:g} ms between requests, budget {speed.BUDGET}"
    )
    head = ("requests", "added", "snapshots", "p50", "p90", "p99", "max", ">100 ms")
    print("".join(f"{h:>10}" for h in head) + "   (ms)")
    cells = [
        row["requests"], row["added"], row["snapshots"],
        rpc["p50"], rpc["p90"], rpc["p99"], rpc["max"], row["over_100ms"],
    ]  # fmt: skip
    print("".join(f"{c:>10}" for c in cells))
    write_results(args.out, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
