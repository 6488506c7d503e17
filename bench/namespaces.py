"""One daemon serving many namespaces: what it costs in memory, and what each ingests.

For each count N (`--counts`), `mnemod run --namespace ns00,ns01,…` on a fresh folder (its
own embedded redis-server). Once every namespace leads and `--settle` seconds passed: the
resident memory of the daemon (`rss_mb`, peak `peak_mb`), of its redis-server, and its
threads. Then every namespace ingests at once: one agent process per namespace XADDs
`--events` adds in pipelines; `ns_events_per_s` is each namespace's events over the
seconds from the start until its last event is acknowledged (durable, in the change log:
median and slowest of the namespaces), `events_per_s` all events over the time until the
last namespace is done. RSS after the ingest.

Against N=1 of the same run: `rss_vs_1`, `mb_per_added_ns` (RSS above the one-namespace
daemon, per namespace added), `ns_ingest_vs_1` (median per-namespace ingest), and
`separate_mb`, what N one-namespace daemons (one process each) would hold resident. Last,
the adds of the largest count all into one namespace: what the same memories cost without
the namespaces (RSS after the ingest).

    python bench/namespaces.py [--counts 1,5,20] [--events 1000] [--settle 2]
        [--data locomo-dev.jsonl] [--out bench/results/namespaces.json]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import resolve_speed as speed  # noqa: E402
import scale  # noqa: E402
from mnemod.redisio.connection import connect  # noqa: E402
from mnemod.redisio.keys import Keys  # noqa: E402
from results import write_results  # noqa: E402


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def ingest_all(url: str, names: list[str], source: Iterator[str], events: int) -> dict[str, Any]:
    """Every namespace's agent XADDs `events` adds at once; per namespace, the seconds until
    its last is acknowledged."""
    context = multiprocessing.get_context("fork")
    go = context.Event()
    outs = {name: context.Queue() for name in names}
    procs = [
        context.Process(
            target=scale._agent,
            args=(url, [next(source) for _ in range(events)], go, outs[name], Keys("mnemod", name)),
        )
        for name in names
    ]
    for proc in procs:
        proc.start()
    time.sleep(0.5 + 0.05 * len(names))  # the agents have prepared their events
    client = connect(url, socket_timeout=60.0)
    started = time.time()
    go.set()
    last_ids = {name: outs[name].get(timeout=600)[1] for name in names}
    done: dict[str, float] = {}
    while len(done) < len(names):
        for name in names:
            if name not in done:
                last, oldest = scale.acked_through(client, Keys("mnemod", name))
                if scale.is_acked(last_ids[name], last, oldest):
                    done[name] = time.time() - started
        time.sleep(0.005)
    for proc in procs:
        proc.join(timeout=30)
    client.close()
    rates = sorted(events / seconds for seconds in done.values())
    return {
        "events_per_ns": events,
        "seconds": round(max(done.values()), 2),
        "events_per_s": round(events * len(names) / max(done.values())),
        "ns_events_per_s": {"median": round(statistics.median(rates)), "slowest": round(rates[0])},
    }


def measure(
    count: int, source: Iterator[str], args: argparse.Namespace, events: int
) -> dict[str, Any]:
    names = [f"ns{n:02d}" for n in range(count)]
    with tempfile.TemporaryDirectory(prefix="mnemod-namespaces-") as folder:
        running = scale.Daemon(Path(folder), namespaces=names)
        try:
            running.wait_running()
            time.sleep(args.settle)
            row: dict[str, Any] = {"namespaces": count, "start_s": round(running.start_s, 2)}
            row.update(running.memory())
            row["threads"] = threads(running.proc.pid)
            row["ingest"] = ingest_all(running.url, names, source, events)
            row["rss_after_mb"] = running.memory()["rss_mb"]
        finally:
            running.stop()
    return row


def derive(rows: list[dict[str, Any]]) -> None:
    one = rows[0]
    for row in rows:
        count = row["namespaces"]
        row["rss_vs_1"] = scale.ratio(row["rss_mb"], one["rss_mb"])
        if count > 1:
            row["mb_per_added_ns"] = round((row["rss_mb"] - one["rss_mb"]) / (count - 1), 1)
        row["separate_mb"] = round(one["rss_mb"] * count, 1)
        median = row["ingest"]["ns_events_per_s"]["median"]
        row["ns_ingest_vs_1"] = scale.ratio(median, one["ingest"]["ns_events_per_s"]["median"])


def table(rows: list[dict[str, Any]]) -> str:
    spec = [
        ("start-up s (all leading)", lambda r: r["start_s"]),
        ("daemon RSS MB", lambda r: r["rss_mb"]),
        ("  vs 1 namespace", lambda r: r["rss_vs_1"]),
        ("  MB per added namespace", lambda r: r.get("mb_per_added_ns")),
        ("  N one-ns daemons MB", lambda r: r["separate_mb"]),
        ("redis-server RSS MB", lambda r: r["redis_mb"]),
        ("threads", lambda r: r["threads"]),
        ("ingest ev/s, all", lambda r: r["ingest"]["events_per_s"]),
        ("ingest ev/s per ns, median", lambda r: r["ingest"]["ns_events_per_s"]["median"]),
        ("  slowest namespace", lambda r: r["ingest"]["ns_events_per_s"]["slowest"]),
        ("  median vs 1 namespace", lambda r: r["ns_ingest_vs_1"]),
        ("daemon RSS after ingest MB", lambda r: r["rss_after_mb"]),
    ]
    width = 28
    out = [f"{'namespaces':<{width}}" + "".join(f"{r['namespaces']:>10}" for r in rows)]
    for label, get in spec:
        out.append(f"{label:<{width}}" + "".join(f"{scale.cell(get(r)):>10}" for r in rows))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="", help="LoCoMo JSONL (default: synthetic)")
    parser.add_argument("--counts", default="1,20", help="namespaces per daemon, 1 first")
    parser.add_argument("--events", type=int, default=1000, help="adds per namespace")
    parser.add_argument("--settle", type=float, default=2.0, help="s after start-up, for RSS")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "namespaces.json"))
    args = parser.parse_args(argv)
    counts = sorted({1, *(int(c) for c in args.counts.split(","))})
    if args.data:
        turns, _, label = speed.corpus(Path(args.data))
    else:
        turns, label = speed.synthetic(random.Random(7))[0], "synthetic Zipf sentences"
    source = speed.memories(turns, random.Random(0))
    rows = []
    for count in counts:
        rows.append(measure(count, source, args, args.events))
        scale.log(f"{count} namespaces: rss {rows[-1]['rss_mb']} MB")
    derive(rows)
    # what the same memories cost in one namespace: RSS after ingest, apart from the others
    total = measure(1, source, args, args.events * counts[-1])
    scale.log(f"1 namespace, {args.events * counts[-1]} adds: rss {total['rss_after_mb']} MB")
    print(f"one daemon, many namespaces ({args.events} adds each, corpus: {label})")
    print(table(rows))
    print(
        f"the same {total['ingest']['events_per_ns']} adds into one namespace: "
        f"RSS after ingest {total['rss_after_mb']} MB, {total['ingest']['events_per_s']} ev/s"
    )
    payload = {"corpus": label, "events": args.events, "rows": rows, "one_namespace": total}
    write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
