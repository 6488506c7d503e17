"""Durable ingest and add against their floors: the smallest programs doing the same I/O.

The floor reads the events stream in batches (XREADGROUP, `daemon.batch_size` at a time),
appends each batch's events to a file as JSON lines, fsyncs it once and acknowledges the
batch (XACK) in a bare loop: what every durable ingest pays, with no parsing, dedup,
keywords, token counting, index or hot layer. Then `mnemod run` ingests the same number of
adds into an empty store (bench/scale.py's ingest: agents XADD in pipelines, events/s until
the last is acknowledged). The ratio says how far above the floor the daemon runs on this
machine, which a target in events/s alone cannot; the CPU seconds per 1,000 events (the
floor's loop, the daemon's process) say it too where other work shares the machine.

The floor of one durable `Store.add` (a change-log record appended and fsynced) is timed
too: `--appends` appends of a record of the size an add writes, each with its fsync, p50
and p99 in ms.

XADD→visible (`--visible` adds at `--visible-rate`/s by one agent, as in bench/scale.py):
the daemon's XADD→hash in the hot layer and XADD→acknowledged, beside the floor loop's
XADD→acknowledged, p50/p99 in ms, and each one's CPU ms an event meanwhile (batches of
one or a few: what a batch costs besides its events, which other work on the machine
turns into latency). Each runs as the machine is (its load average printed)
and with `--hogs` processes spinning on the CPU beside it, so what the machine's other work
adds to the latency is told apart from what the daemon's own work does.

    python bench/ingest_floor.py [--events 4000] [--agents 1] [--data …/locomo-dev.jsonl]
        [--visible 400] [--visible-rate 100] [--hogs 2]
        [--out bench/results/ingest_floor.json]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import orjson  # noqa: E402

import resolve_speed as speed  # noqa: E402
import scale  # noqa: E402
from mnemod.config import DaemonConfig  # noqa: E402
from mnemod.redisio.connection import connect  # noqa: E402
from mnemod.redisio.embedded import EmbeddedRedis  # noqa: E402
from mnemod.redisio.keys import GROUP  # noqa: E402
from results import write_results  # noqa: E402

KEYS = scale.KEYS


def floor(folder: Path, contents: list[str], agents: int, batch: int) -> dict[str, Any]:
    """The bare loop over `contents` XADDed by `agents` processes: events/s until the last
    is acknowledged, and the batches it took."""
    server = EmbeddedRedis(folder / "redis")
    url = server.start()
    try:
        client = connect(url, socket_timeout=60.0)
        client.xgroup_create(KEYS.events, GROUP, id="0", mkstream=True)
        context = multiprocessing.get_context("fork")
        go, out = context.Event(), context.Queue()
        share = len(contents) // agents
        procs = [
            context.Process(
                target=scale._agent, args=(url, contents[i * share : (i + 1) * share], go, out)
            )
            for i in range(agents)
        ]
        for proc in procs:
            proc.start()
        time.sleep(0.5)  # the agents have prepared their events
        total, batches = share * agents, 0
        log = folder / "floor.jsonl"
        with log.open("ab") as handle:
            cpu = time.process_time()
            started = time.perf_counter()
            go.set()
            done = 0
            while done < total:
                replies = client.xreadgroup(GROUP, "floor", {KEYS.events: ">"}, batch, 100)
                for _, messages in replies or []:
                    ids = [event_id for event_id, _ in messages]
                    handle.write(b"".join(orjson.dumps(fields) + b"\n" for _, fields in messages))
                    handle.flush()
                    os.fsync(handle.fileno())
                    client.xack(KEYS.events, GROUP, *ids)
                    done += len(ids)
                    batches += 1
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu
        for proc in procs:
            proc.join(timeout=30)
    finally:
        server.stop()
    return {"events": total, "seconds": round(seconds, 2), "events_per_s": round(total / seconds),
            "cpu_s_per_1000": round(1000 * cpu / total, 3), "batches": batches}  # fmt: skip


def _floor_loop(url: str, batch: int, log: Path, stop: Any) -> None:
    """The floor's loop as a process of its own, until `stop` is set."""
    client = connect(url, socket_timeout=60.0)
    with log.open("ab") as handle:
        while not stop.is_set():
            replies = client.xreadgroup(GROUP, "floor", {KEYS.events: ">"}, batch, 100)
            for _, messages in replies or []:
                handle.write(b"".join(orjson.dumps(fields) + b"\n" for _, fields in messages))
                handle.flush()
                os.fsync(handle.fileno())
                client.xack(KEYS.events, GROUP, *[event_id for event_id, _ in messages])


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


@contextlib.contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` processes spinning on the CPU meanwhile: other work on the machine."""
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    procs = [context.Process(target=_spin, args=(stop,)) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)


def floor_visible(folder: Path, source: Iterator[str], count: int, rate: float,
                  batch: int) -> dict[str, Any]:  # fmt: skip
    """XADD→acknowledged of the floor's loop (its events never reach a hot layer)."""
    folder.mkdir()
    server = EmbeddedRedis(folder / "redis")
    url = server.start()
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    try:
        connect(url).xgroup_create(KEYS.events, GROUP, id="0", mkstream=True)
        loop = context.Process(target=_floor_loop, args=(url, batch, folder / "floor.jsonl", stop))
        loop.start()
        try:
            assert loop.pid is not None
            cpu = scale.cpu_seconds(loop.pid)
            row = scale.xadd_visible(url, source, count, rate, wait_visible=False)
            row["cpu_ms_per_event"] = round(1000 * (scale.cpu_seconds(loop.pid) - cpu) / count, 3)
        finally:
            stop.set()
            loop.join(timeout=30)
    finally:
        server.stop()
    return {k: v for k, v in row.items() if k not in ("visible_ms", "never_visible")}


def daemon_visible(folder: Path, source: Iterator[str], count: int,
                   rate: float) -> dict[str, Any]:  # fmt: skip
    """XADD→visible and →acknowledged of `mnemod run` on an empty store, and the
    daemon's CPU an event meanwhile (a batch of one, or a few, at this rate)."""
    folder.mkdir()
    with scale.daemon(folder) as running:
        running.warmed(60.0)
        cpu = scale.cpu_seconds(running.proc.pid)
        row = scale.xadd_visible(running.url, source, count, rate)
        row["cpu_ms_per_event"] = round(
            1000 * (scale.cpu_seconds(running.proc.pid) - cpu) / count, 3
        )
        return row


def visible(base: Path, source: Iterator[str], args: argparse.Namespace,
            batch: int) -> dict[str, Any]:  # fmt: skip
    """The floor's and the daemon's latency, as the machine is and beside `--hogs`."""
    out: dict[str, Any] = {}
    for load in ("as is", f"{args.hogs} hogs"):
        with hogs(args.hogs if load != "as is" else 0):
            loadavg = os.getloadavg()[0]
            name = load.replace(" ", "_")
            floor_row = floor_visible(base / f"floor-{name}", source, args.visible,
                                      args.visible_rate, batch)  # fmt: skip
            daemon_row = daemon_visible(base / f"daemon-{name}", source, args.visible,
                                        args.visible_rate)  # fmt: skip
        out[load] = {"loadavg": round(loadavg, 2), "floor": floor_row, "daemon": daemon_row}
    return out


def append_floor(folder: Path, count: int, size: int = 1200) -> dict[str, Any]:
    """`count` appends of `size` bytes, each fsynced (what a durable add cannot go below)."""
    record = b"x" * (size - 1) + b"\n"
    samples = []
    with (folder / "appends.jsonl").open("ab") as handle:
        for _ in range(count):
            started = time.perf_counter()
            handle.write(record)
            handle.flush()
            os.fsync(handle.fileno())
            samples.append(time.perf_counter() - started)
    return scale.stats(samples)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--appends", type=int, default=200, help="timed fsynced appends")
    parser.add_argument("--visible", type=int, default=400, help="events timed to visible")
    parser.add_argument("--visible-rate", type=float, default=100.0, help="their events/s")
    parser.add_argument("--hogs", type=int, default=2, help="spinning processes, loaded runs")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest_floor.json"))
    args = parser.parse_args(argv)
    turns, _, label = speed.corpus(Path(args.data))
    source = speed.memories(turns, random.Random(0))
    contents = [next(source) for _ in range(args.events)]
    batch = DaemonConfig().batch_size
    with tempfile.TemporaryDirectory(prefix="mnemod-floor-") as name:
        base = Path(name)
        (base / "floor").mkdir()
        appends = append_floor(base, args.appends)
        bare = floor(base / "floor", contents, args.agents, batch)
        (base / "daemon").mkdir()
        daemon = scale.ingest(base / "daemon", iter(contents), args.events, args.agents)
        latency = visible(base, source, args, batch) if args.visible else {}
    ratio = scale.ratio(bare["events_per_s"], daemon["events_per_s"])
    cpu_ratio = scale.ratio(daemon["cpu_s_per_1000"], bare["cpu_s_per_1000"])
    print(f"durable ingest into an empty store, {args.events} adds by {args.agents} agent(s), "
          f"batches of {batch}; corpus: {label}; {os.cpu_count()} CPUs")  # fmt: skip
    rows = [("floor: XREADGROUP, append, fsync, XACK", bare), ("mnemod run", daemon)]
    print(f"{'':<40}{'events/s':>10}{'CPU s/1000':>12}{'batches':>10}")
    for title, row in rows:
        print(
            f"{title:<40}{row['events_per_s']:>10}{row['cpu_s_per_1000']:>12}{row['batches']:>10}"
        )
    print(f"floor / mnemod: {ratio} in events/s, {cpu_ratio} in CPU an event")
    print(f"append + fsync of one add's record: p50 {appends['p50']} ms, p99 {appends['p99']} ms")
    if latency:
        print(f"XADD->visible, {args.visible} adds at {args.visible_rate}/s by one agent "
              "(ms; the floor's events are only acknowledged)")  # fmt: skip
        print(f"{'':<22}{'load avg':>9}{'p50':>9}{'p99':>9}{'max':>9}{'CPU ms/ev':>11}")
        for load, run in latency.items():
            floor_row, daemon_row = run["floor"], run["daemon"]
            for title, ms, cpu in (
                ("floor: acked", floor_row["acked_ms"], floor_row["cpu_ms_per_event"]),
                ("mnemod: acked", daemon_row["acked_ms"], daemon_row["cpu_ms_per_event"]),
                ("mnemod: in hot layer", daemon_row["visible_ms"], ""),
            ):
                print(f"{title:<22}{run['loadavg']:>9}{ms['p50']:>9}{ms['p99']:>9}{ms['max']:>9}"
                      f"{cpu:>11}  {load}")  # fmt: skip
    write_results(args.out, {"corpus": label, "batch_size": batch, "floor": bare,
                             "daemon": daemon, "floor_vs_daemon": ratio,
                             "daemon_vs_floor_cpu": cpu_ratio,
                             "append_fsync_ms": appends, "visible": latency})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
