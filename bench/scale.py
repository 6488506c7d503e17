"""How mnemod holds up as memories accumulate: one command for the scale targets.

For each size the corpus of `resolve_speed.py` (LoCoMo turns varied copy by copy, or
synthetic sentences without the data file) is built once through `Store.add` inside
`engine.batch()`, and a copy of the folder is kept as it was built. On that store:

- library: `mnemod.open` (the checkpoint read, the log replayed; the indexes are built
  later), the first add and the first resolve after it (which build the dedup postings and
  resolve's view), read-only recovery (`read_committed`: checkpoint and log); durable `Store.add`
  with autosave, one change-log commit each (`--adds` of them, p50/p99); `engine.checkpoint()`
  after an add; `engine.resolve` in process (p50/p99, accesses not recorded);
- daemon (`mnemod run`, its own embedded redis-server): start-up (process start until the
  `daemon.running` log line), the indexes built in its idle slices after (`engine.warmed`),
  resident memory of the daemon and of its redis-server `--settle` s after that;
  XADD→visible, one agent adding at `--visible-rate` events/s, timed until the item's hash
  `m:<id>` exists in the hot layer and, separately, until the event is acknowledged
  (durable: in the change log);
- CLI reads: `mnemod stats|get|status|list` as processes, on the closed store and beside the
  running daemon after the XADD→visible adds (change-log records after the checkpoint), and
  the interpreter importing the CLI alone;
- maintenance (a daemon on a copy, expiry and the hot refresh every 2 s): resolves over
  the RPC stream one after another, idle, while a full GC (`op gc` on the events stream)
  runs in slices on the writer, and for `--window` s while an agent adds 50 memories/s
  (checkpoints fall due as the log grows): latency and the longest gap between two answers
  in each phase, the jobs seen to finish, and the longest stretch of each kind the writer
  logged as `writer.stalled` (over 50 ms; wall and the writer's own CPU);
- durable ingest (on fresh copies of the built store, and of an empty one, once the daemon
  built what its open left for later): `--events` adds XADDed in pipelines by 1 and by 8
  agent processes, events/s from the first XADD until the last is acknowledged, the
  daemon's CPU seconds per 1,000 events meanwhile, and how fast the agents could XADD;
- GC, at sizes up to `--gc-max`: the plan alone (`domain.gc.plan_gc`, from scratch), the
  exhaustive pass GC made before the index (up to `--exhaustive-max`), `engine.gc()` from
  scratch and again after 1,000 more memories (engine and plan); beyond, extrapolated from
  the measured sizes (log-log fit, or n² from one) and marked EXTRAPOLATED.

The durable add (its CPU p50), the open, the daemon's start-up and the CLI reads are also
given in CPU time (user and system), steadier than the clock when other work shares the
machine (a durable add's wall time is mostly its fsync on a shared disk).

Ratios are against a baseline of the same run: the smallest size (library add), the empty
store (ingest, RSS), 1 agent (8 agents), idle RPC resolve (resolve during GC). The load
average is printed: on a shared machine every wall time stretches.

    python bench/scale.py [--sizes 1000,10000,100000] [--quick] [--adds 200] [--events 5000]
        [--gc-max 10000] [--exhaustive-max 10000] [--window 10]
        [--only all|maintenance|ingest]
        [--profile] [--stores DIR] [--out bench/results/scale.json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import math
import multiprocessing
import os
import pstats
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import footprint  # noqa: E402
import mnemod  # noqa: E402
import resolve_speed as speed  # noqa: E402
from mnemod.client import Client  # noqa: E402
from mnemod.domain import dedup  # noqa: E402
from mnemod.domain.gc import plan_gc  # noqa: E402
from mnemod.ids import new_id  # noqa: E402
from mnemod.redisio.connection import connect  # noqa: E402
from mnemod.redisio.keys import GROUP, Keys  # noqa: E402
from mnemod.store.paths import NamespacePaths  # noqa: E402
from mnemod.store.recovery import read_committed  # noqa: E402
from results import write_results  # noqa: E402

KEYS = Keys("mnemod", "default")
PIPELINE = 100  # events per XADD pipeline of an ingest agent


# ---- small helpers --------------------------------------------------------------------------
def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """A process's CPU time (user and system) so far: on a machine other work shares, a
    steadier figure than the time on the clock."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def stats(samples: Sequence[float]) -> dict[str, Any]:
    """p50/p99/max in ms of seconds (`percentiles` of resolve_speed, with the max)."""
    out: dict[str, Any] = speed.percentiles(samples)
    out["max"] = ms(max(samples)) if samples else float("nan")
    return out


def ratio(value: float, base: float) -> float | None:
    return round(value / base, 2) if base and not math.isnan(base) else None


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=speed.STORE_COPY_IGNORE)
    return target


# ---- the daemon -----------------------------------------------------------------------------
class Daemon:
    """`mnemod run` on a folder; its stderr (JSON log lines) read on a thread so that the
    moment of `daemon.running` is seen as it is written."""

    def __init__(
        self,
        folder: Path,
        profile: Path | None = None,
        namespaces: Sequence[str] = (),
        extra: dict[str, str] | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | speed.ENV
        env |= extra or {}
        env["PYTHONPATH"] = str(ROOT / "daemon")
        args = [sys.executable, "-m", "mnemod.cli.main", "run", "--data-dir", str(folder)]
        if namespaces:  # running once each of them leads
            args += ["--namespace", ",".join(namespaces)]
        self.leading = max(1, len(namespaces))
        if profile is not None:  # the writer's loop runs on the main thread
            args[1:1] = ["-m", "cProfile", "-o", str(profile)]
        self.folder = folder
        self.running = threading.Event()
        self.lines: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        self.start_s = float("nan")
        self.start_cpu_s = float("nan")  # the daemon's CPU time until it runs
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.proc.stdout is not None
        self.url = next(w for w in self.proc.stdout.readline().split() if w.startswith("unix://"))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            self.lines.append(row)
            leading = row.get("event") == "daemon.running" and not self.running.is_set()
            if leading and len(self.events("daemon.running")) >= self.leading:
                self.start_s = time.perf_counter() - self.started
                self.start_cpu_s = cpu_seconds(self.proc.pid)
                self.running.set()

    def wait_running(self, timeout: float = 600.0) -> float:
        deadline = time.monotonic() + timeout
        while not self.running.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start on {self.folder}")
        return self.start_s

    def memory(self) -> dict[str, float]:
        pid = self.proc.pid
        redis_kb = sum(footprint.status_kb(c, "VmRSS") for c in footprint.children(pid))
        return {
            "rss_mb": round(footprint.status_kb(pid, "VmRSS") / 1024, 1),
            "peak_mb": round(footprint.status_kb(pid, "VmHWM") / 1024, 1),
            "redis_mb": round(redis_kb / 1024, 1),
        }

    def warmed(self, timeout: float) -> float | None:
        """Seconds the daemon took, after start-up, to build the indexes an open leaves for
        later (its `engine.warmed` line), waited for; None for a store with nothing to build."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events("engine.warmed")
            if found:
                return float(found[0]["seconds"])
            time.sleep(0.05)
        return None

    def events(self, name: str) -> list[dict[str, Any]]:
        return [row for row in self.lines if row.get("event") == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=300)
        self._reader.join(timeout=10)


@contextlib.contextmanager
def daemon(
    folder: Path, profile: Path | None = None, extra: dict[str, str] | None = None
) -> Iterator[Daemon]:
    running = Daemon(folder, profile, extra=extra)
    try:
        running.wait_running()
        yield running
    finally:
        running.stop()


def acked_through(client: Any, keys: Keys = KEYS) -> tuple[str, str | None]:
    """(last delivered id, oldest pending id or None): an event at or below the first and
    below the second is acknowledged."""
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_groups(keys.events)
    pipe.xpending(keys.events, GROUP)
    groups, pending = pipe.execute()
    last = next((str(g["last-delivered-id"]) for g in groups if g["name"] == GROUP), "0-0")
    oldest = pending.get("min") if pending and pending.get("pending") else None
    return last, oldest


def is_acked(event_id: str, last: str, oldest: str | None) -> bool:
    key = speed_key(event_id)
    return key <= speed_key(last) and (oldest is None or key < speed_key(oldest))


def speed_key(stream_id: str) -> tuple[int, int]:
    milli, _, seq = stream_id.partition("-")
    return int(milli), int(seq or 0)


def add_fields(content: str) -> dict[str, str]:
    data = {"content": content, "id": new_id(datetime.now(UTC))}
    return {"op": "add", "data": json.dumps(data)}


# ---- daemon measurements --------------------------------------------------------------------
def xadd_visible(
    url: str, source: Iterator[str], count: int, rate: float, wait_visible: bool = True
) -> dict[str, Any]:
    """One agent XADDs `count` adds at `rate`/s; a poller notes when each item's hash is in
    the hot layer (unless not `wait_visible`: a loop with no hot layer) and when its event
    is acknowledged."""
    client = connect(url, socket_timeout=60.0)
    poller = connect(url, socket_timeout=60.0)
    sent: dict[str, tuple[str, float]] = {}  # item id -> (event id, sent at)
    visible: dict[str, float] = {}
    acked: dict[str, float] = {}
    done = threading.Event()
    lock = threading.Lock()

    def poll() -> None:
        while True:
            with lock:
                waiting = [(i, e, t) for i, (e, t) in sent.items() if i not in acked]
                unseen = [i for i in sent if i not in visible] if wait_visible else []
            if not waiting and not unseen and done.is_set():
                return
            pipe = poller.pipeline(transaction=False)
            for item_id in unseen:
                pipe.exists(KEYS.item(item_id))
            found = pipe.execute() if unseen else []
            last, oldest = acked_through(poller)
            now = time.perf_counter()
            for item_id, hit in zip(unseen, found, strict=True):
                if hit:
                    visible[item_id] = now - sent[item_id][1]
            for item_id, event_id, at in waiting:
                if is_acked(event_id, last, oldest):
                    acked[item_id] = now - at
            if done.is_set() and not waiting and time.perf_counter() - last_sent[0] > 5.0:
                return  # items folded into others by dedup never get a hash of their own
            time.sleep(0.001)

    last_sent = [time.perf_counter()]
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    interval = 1.0 / rate
    next_at = time.perf_counter()
    for _ in range(count):
        fields = add_fields(next(source))
        item_id = json.loads(fields["data"])["id"]
        while time.perf_counter() < next_at:
            time.sleep(max(0.0, next_at - time.perf_counter()))
        at = time.perf_counter()
        event_id = client.xadd(KEYS.events, fields)  # type: ignore[arg-type]
        with lock:
            sent[item_id] = (str(event_id), at)
        last_sent[0] = at
        next_at += interval
    done.set()
    thread.join(timeout=120)
    return {
        "rate": rate,
        "sent": count,
        "visible_ms": stats(list(visible.values())),
        "acked_ms": stats(list(acked.values())),
        "never_visible": count - len(visible),
    }


def _agent(url: str, contents: list[str], go: Any, out: Any, keys: Keys = KEYS) -> None:
    """An ingest agent: waits for `go`, XADDs its events in pipelines, reports when done."""
    client = connect(url, socket_timeout=120.0)
    batches = [contents[i : i + PIPELINE] for i in range(0, len(contents), PIPELINE)]
    prepared = [[add_fields(c) for c in batch] for batch in batches]
    last_id = ""
    go.wait()
    for batch in prepared:
        pipe = client.pipeline(transaction=False)
        for fields in batch:
            pipe.xadd(keys.events, fields)
        last_id = str(pipe.execute()[-1])
    out.put((time.time(), last_id))


def ingest(
    folder: Path, source: Iterator[str], events: int, agents: int, profile: Path | None = None
) -> dict[str, Any]:
    """`events` adds from `agents` processes into the daemon on `folder`: events/s until all
    are acknowledged (the daemon under cProfile, writing to `profile`, when given)."""
    with daemon(folder, profile) as running:
        row: dict[str, Any] = {"agents": agents, "events": events, "start_s": running.start_s}
        # what an open leaves for later is built first: the ingest of a daemon that runs
        row["warm_s"] = running.warmed(600.0)
        context = multiprocessing.get_context("fork")
        go, out = context.Event(), context.Queue()
        share = events // agents
        procs = [
            context.Process(
                target=_agent, args=(running.url, [next(source) for _ in range(share)], go, out)
            )
            for _ in range(agents)
        ]
        for proc in procs:
            proc.start()
        time.sleep(0.5)  # the agents have prepared their events
        client = connect(running.url, socket_timeout=60.0)
        cpu_before = cpu_seconds(running.proc.pid)
        started = time.time()
        go.set()
        finished = [out.get(timeout=600) for _ in procs]
        xadd_s = max(at for at, _ in finished) - started
        last_ids = [event_id for _, event_id in finished]
        newest = max(last_ids, key=speed_key)
        while True:
            last, oldest = acked_through(client)
            if is_acked(newest, last, oldest):
                break
            time.sleep(0.002)
        seconds = time.time() - started
        cpu = cpu_seconds(running.proc.pid) - cpu_before
        for proc in procs:
            proc.join(timeout=30)
        batches = running.events("events.batch")
        row.update(
            events=share * agents,
            seconds=round(seconds, 2),
            events_per_s=round(share * agents / seconds),
            cpu_s_per_1000=round(1000 * cpu / (share * agents), 3),
            xadd_per_s=round(share * agents / xadd_s),
            batches=len(batches),
            rss_after_mb=running.memory()["rss_mb"],
        )
    return row


class Asker:
    """Resolves over RPC one after another on a thread of its own, each answer's time kept:
    the longest gap between two answers is the longest the writer's loop kept every
    request waiting (plus one request's own time)."""

    def __init__(self, url: str, prompts: Sequence[str]) -> None:
        self.memory = Client(url)
        self.calls = iter(list(prompts) * 100_000)
        self.done: list[tuple[float, float]] = []  # (answered at, seconds it took)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._ask, daemon=True)
        self.thread.start()

    def _ask(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            self.memory.resolve(next(self.calls), budget=speed.BUDGET, timeout=600)
            now = time.perf_counter()
            self.done.append((now, now - started))

    def between(self, start: float, end: float) -> dict[str, Any]:
        """Latency of the answers given in [start, end], and the longest gap between
        answers there (from the last answer before `start`)."""
        answered = [(at, took) for at, took in self.done if start <= at <= end]
        before = [at for at, _ in self.done if at < start]
        times = ([before[-1]] if before else [start]) + [at for at, _ in answered]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return {
            **stats([took for _, took in answered]),
            "max_gap_ms": round(max(gaps, default=end - start) * 1000, 1),
        }

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=600)
        self.memory.close()


def wait_log(
    running: Daemon, event: str, count: int, timeout: float = 3600.0, **match: Any
) -> None:
    deadline = time.monotonic() + timeout
    while (
        len([r for r in running.events(event) if all(r.get(k) == v for k, v in match.items())])
        < count
    ):
        if time.monotonic() > deadline or running.proc.poll() is not None:
            raise RuntimeError(f"no {event} from the daemon")
        time.sleep(0.01)


MAINTENANCE_ENV = {"MNEMOD_SCHEDULE_EXPIRY": "2s", "MNEMOD_SCHEDULE_HOT_REFRESH": "2s"}


def maintenance_stalls(folder: Path, source: Iterator[str], prompts: Sequence[str],
                       window: float) -> dict[str, Any]:  # fmt: skip
    """Once the daemon's indexes are warm, resolve over RPC, one after another, idle, while
    a full GC (an `op gc` event) runs, and for `window` s while an agent adds 50
    memories/s with expiry and the hot refresh every 2 s (and the checkpoints the log's
    growth makes due): latencies and the longest gap between answers in each phase, with
    the jobs seen to finish in it."""
    with daemon(folder, extra=MAINTENANCE_ENV) as running:
        # maintenance's stalls, not a cold start's: the first resolve after start waits
        # for the indexes to be built (measured apart, "first resolve after open")
        running.warmed(600.0)
        asker = Asker(running.url, prompts)
        client = connect(running.url, socket_timeout=60.0)
        try:
            time.sleep(1.0)
            start = time.perf_counter()
            time.sleep(2.0)
            row: dict[str, Any] = {"idle": asker.between(start, time.perf_counter())}
            seen = len([r for r in running.events("gc.finished") if not r.get("expire_only")])
            gc_sent = time.perf_counter()
            client.xadd(KEYS.events, {"op": "gc", "data": "{}"})
            wait_log(running, "gc.finished", seen + 1, expire_only=False)
            gc_done = time.perf_counter()
            finished = [r for r in running.events("gc.finished") if not r.get("expire_only")][-1]
            row["gc"] = {
                **asker.between(gc_sent, gc_done),
                "gc_s": round(gc_done - gc_sent, 2),
                "busy_ms": finished.get("busy_ms"),
                "longest_step_ms": finished.get("longest_step_ms"),
                "merged": finished.get("merged"),
            }
            counts = {e: len(running.events(e)) for e in JOB_EVENTS}
            start = time.perf_counter()
            while time.perf_counter() - start < window:
                client.xadd(KEYS.events, add_fields(next(source)))
                time.sleep(0.02)
            end = time.perf_counter()
            row["steady"] = {
                **asker.between(start, end),
                **{name: len(running.events(e)) - counts[e] for e, name in JOB_EVENTS.items()},
            }
            row["stalls"] = stalls(running)
        finally:
            asker.close()
            client.close()
    return row


def stalls(running: Daemon) -> dict[str, list[float]]:
    """The longest stretch of each kind the writer logged as keeping requests waiting
    (`writer.stalled`: over 50 ms): [wall ms, the writer's CPU ms in it] (on a loaded
    machine the difference is time spent waiting for a core)."""
    longest: dict[str, list[float]] = {}
    for row in running.events("writer.stalled"):
        what = str(row.get("what"))
        wall, cpu = float(row.get("ms", 0.0)), float(row.get("cpu_ms", 0.0))
        was = longest.get(what, [0.0, 0.0])
        longest[what] = [max(was[0], wall), max(was[1], cpu)]
    return longest


JOB_EVENTS = {"gc.finished": "expiry_runs", "hot.rebuilt": "hot_refreshes",
              "snapshot.written": "checkpoints"}  # fmt: skip


def cli_reads(folder: Path, entry_id: str, tries: int = 3) -> dict[str, float]:
    """`mnemod stats|list|get|status` as a user runs them (a process each: start-up and
    imports included), best of `tries` seconds; `python` is the interpreter starting and
    importing the CLI alone, what every command pays before it reads anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | speed.ENV
    env["PYTHONPATH"] = str(ROOT / "daemon")
    base = [sys.executable, "-m", "mnemod.cli.main"]
    commands = {
        "python": [sys.executable, "-c", "import mnemod.cli.main"],
        "stats": [*base, "stats", "--data-dir", str(folder)],
        "status": [*base, "status", "--data-dir", str(folder)],
        "get": [*base, "get", entry_id, "--data-dir", str(folder)],
        "list": [*base, "list", "--data-dir", str(folder)],
    }
    out: dict[str, float] = {}
    for name, command in commands.items():
        runs, cpus = [], []
        for _ in range(tries):
            started, used = time.perf_counter(), _children_cpu()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True, timeout=600)
            runs.append(time.perf_counter() - started)
            cpus.append(_children_cpu() - used)
        out[name] = round(min(runs), 3)
        out[f"{name}_cpu"] = round(min(cpus), 3)
    return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---- library measurements -------------------------------------------------------------------
def library(folder: Path, size: int, source: Iterator[str], prompts: Sequence[str],
            args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {}
    paths = NamespacePaths(folder, "default")
    opens: list[tuple[float, float]] = []
    for _ in range(2):
        started, cpu = time.perf_counter(), time.process_time()
        store = mnemod.open(folder, config=speed.CONFIG)
        opens.append((time.perf_counter() - started, time.process_time() - cpu))
        store.close()
    row["open_s"] = round(min(wall for wall, _ in opens), 3)
    row["open_cpu_s"] = round(min(cpu for _, cpu in opens), 3)
    row["recover_ro_s"] = round(min(timed(lambda: read_committed(paths)) for _ in range(2)), 3)
    store = mnemod.open(folder, config=speed.CONFIG)
    try:
        when = speed.START + speed.STEP * size
        # the open leaves the dedup postings for the first add, resolve's view for the first
        # resolve (store.warming): what those two pay once
        row["first_add_s"] = round(timed(lambda: store.add(next(source), created_at=when)), 3)
        probe = prompts[0] if prompts else "what?"
        first = timed(lambda: store.engine.resolve(probe, speed.BUDGET, record_access=False))
        row["first_resolve_s"] = round(first, 3)
        ids = list(store.engine.entries)
        row["probe_id"] = ids[len(ids) // 2] if ids else ""
        contents = [next(source) for _ in range(args.adds)]
        adds, add_cpus = [], []  # the CPU beside the clock: a shared disk's fsync is in the wall
        for i, c in enumerate(contents):
            cpu = time.process_time()
            adds.append(
                timed(lambda c=c, t=when + timedelta(seconds=i): store.add(c, created_at=t))
            )
            add_cpus.append(time.process_time() - cpu)
        row["add_ms"] = stats(adds)
        row["add_cpu_ms"] = stats(add_cpus)
        if args.profile:  # more adds, after the timed ones: the profiler slows what it sees
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(min(args.adds, 50)):
                store.add(next(source))
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
            row["add_profile"] = text.getvalue()
        checkpoints = []
        for _ in range(3):
            store.add(next(source))
            checkpoints.append(timed(store.engine.checkpoint))
        row["checkpoint_s"] = round(min(checkpoints), 3)
        row["index_mb"] = round(paths.index.stat().st_size / 2**20, 1)
        engine = store.engine
        now = when + timedelta(days=1)
        for prompt in prompts[:10]:
            engine.resolve(prompt, speed.BUDGET, now=now, record_access=False)
        resolves = [
            timed(lambda p=p: engine.resolve(p, speed.BUDGET, now=now, record_access=False))
            for p in prompts
        ]
        row["resolve_ms"] = stats(resolves)
    finally:
        store.close()
    return row


def gc_times(folder: Path, source: Iterator[str], size: int, exhaustive_max: int) -> dict[str, Any]:
    """`engine.gc()` from scratch, then after 1,000 more memories; the plan alone
    (`domain.gc.plan_gc`, no index: from scratch) on the same entries, and the exhaustive
    pass GC made before the index (`domain.dedup.merge_groups`) up to `exhaustive_max`."""
    store = mnemod.open(folder, config=speed.CONFIG)
    row: dict[str, Any] = {}
    try:
        engine = store.engine
        entries = list(engine.entries.values())
        now = engine.clock.now()
        row["plan_s"] = round(timed(lambda: plan_gc(entries, engine.config, now)), 3)
        if size <= exhaustive_max:
            row["exhaustive_s"] = round(
                timed(lambda: dedup.merge_groups(entries, engine.config.dedup)), 3
            )
        row["gc_s"] = round(timed(engine.gc), 3)
        row["after_gc"] = len(engine.entries)
        when = speed.START + speed.STEP * (size + 10_000)
        with engine.batch():
            for index in range(1000):
                store.add(next(source), created_at=when + timedelta(seconds=index))
        entries = list(engine.entries.values())
        index_ = engine.gc_index()
        row["plan_after_1k_s"] = round(
            timed(lambda: plan_gc(entries, engine.config, now, index=index_)), 3
        )
        row["gc_after_1k_s"] = round(timed(engine.gc), 3)
    finally:
        store.close()
    return row


def extrapolate(measured: dict[int, float], size: int) -> tuple[float, str]:
    """Seconds at `size` from a log-log fit through the two largest measured sizes (a
    quadratic from the one there is, when only one)."""
    points = sorted(measured.items())
    if len(points) >= 2:
        (n1, t1), (n2, t2) = points[-2], points[-1]
        power = math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 and t2 > 0 else 2.0
        how = f"fit n^{power:.2f} through {n1} and {n2}"
    else:
        (n2, t2), power = points[-1], 2.0
        how = f"assumed n^2 from {n2}"
    return round(t2 * (size / n2) ** power, 1), how


# ---- one size -------------------------------------------------------------------------------
def built(
    size: int, base: Path, turns: list[str], kept: str | None = None
) -> tuple[Iterator[str], Path, dict[str, Any]]:
    """The corpus's memories (those after the store's), the folder of a store of `size` of
    them, and the row. With `kept` (`--stores`), a store built there before for the same
    size and corpus is copied instead of built again, and one built now is kept there."""
    source = speed.memories(turns, random.Random(size))
    folder = base / f"n{size}"
    seconds, copied = speed.kept_build(
        folder, size, turns, source, Path(kept) if kept is not None else None
    )
    row: dict[str, Any] = {"entries": size, "build_s": seconds}
    log(f"{size}: copied (built in {seconds} s)" if copied else f"{size}: built in {seconds} s")
    return source, folder, row


def run_size(size: int, base: Path, turns: list[str], prompts: list[str],
             args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    source, folder, row = built(size, base, turns, args.stores)
    pristine = copy_store(folder, base / f"n{size}-built")
    row.update(library(folder, size, source, prompts, args))
    log(f"{size}: library add p50 {row['add_ms']['p50']} ms, open {row['open_s']} s")
    row["cli"] = cli_reads(folder, row["probe_id"], args.cli_tries)
    with daemon(folder) as running:
        row["start_s"] = round(running.start_s, 2)
        row["start_cpu_s"] = round(running.start_cpu_s, 2)
        row["warm_s"] = running.warmed(args.warm_timeout)
        time.sleep(args.settle)
        row.update(running.memory())
        row["visible"] = xadd_visible(running.url, source, args.visible, args.visible_rate)
        row["cli_daemon"] = cli_reads(folder, row["probe_id"], args.cli_tries)
        log(f"{size}: daemon start {row['start_s']} s, rss {row['rss_mb']} MB")
    maintenance(row, size, pristine, base, source, prompts, args)
    ingest_runs(row, size, pristine, base, source, args)
    if args.profile and size == args.largest:  # an extra run: the profiler slows it
        copy = copy_store(pristine, base / f"n{size}-profiled")
        out = base / "daemon.prof"
        ingest(copy, source, args.events, 1, profile=out)
        row["ingest_profile"] = profile_text(out, "cumulative", 30)
        shutil.rmtree(copy)
    shutil.rmtree(folder)
    shutil.rmtree(pristine)
    return row


def maintenance(row: dict[str, Any], size: int, pristine: Path, base: Path,
                source: Iterator[str], prompts: list[str],
                args: argparse.Namespace) -> None:  # fmt: skip
    """The writer's stalls during maintenance (on a copy), then GC's times."""
    copy = copy_store(pristine, base / f"n{size}-maintenance")
    row["maintenance"] = maintenance_stalls(copy, source, prompts, args.window)
    shutil.rmtree(copy)
    gc_row = row["maintenance"]["gc"]
    log(f"{size}: during GC resolve p99 {gc_row['p99']} ms, longest gap {gc_row['max_gap_ms']} ms")
    if size <= args.gc_max:
        row.update(gc_times(pristine, source, size, args.exhaustive_max))
        log(f"{size}: gc {row['gc_s']} s, after +1,000 {row['gc_after_1k_s']} s")


def maintenance_only(size: int, base: Path, turns: list[str], prompts: list[str],
                     args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    source, folder, row = built(size, base, turns, args.stores)
    maintenance(row, size, folder, base, source, prompts, args)
    shutil.rmtree(folder)
    return row


def ingest_only(size: int, base: Path, turns: list[str], prompts: list[str],
                args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """XADD->visible and durable ingest alone, on a store of `size`."""
    source, folder, row = built(size, base, turns, args.stores)
    with daemon(copy_store(folder, base / f"n{size}-visible")) as running:
        row["warm_s"] = running.warmed(args.warm_timeout)
        row["visible"] = xadd_visible(running.url, source, args.visible, args.visible_rate)
    shutil.rmtree(base / f"n{size}-visible")
    ingest_runs(row, size, folder, base, source, args)
    shutil.rmtree(folder)
    return row


def ingest_runs(row: dict[str, Any], size: int, pristine: Path, base: Path,
                source: Iterator[str], args: argparse.Namespace) -> None:  # fmt: skip
    """Durable ingest by 1 and by 8 agents, each on a fresh copy of `pristine`."""
    row["ingest"] = []
    for agents in (1, 8):
        copy = copy_store(pristine, base / f"n{size}-ingest{agents}")
        row["ingest"].append(ingest(copy, source, args.events, agents))
        shutil.rmtree(copy)
        last = row["ingest"][-1]
        log(f"{size}: ingest {agents} agents {last['events_per_s']}/s, "
            f"{last['cpu_s_per_1000']} CPU s/1000")  # fmt: skip


def empty_baseline(base: Path, turns: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The empty store: daemon start-up and memory, ingest with 1 and 8 agents."""
    source = speed.memories(turns, random.Random(0))
    row: dict[str, Any] = {"entries": 0}
    folder = base / "empty"
    folder.mkdir()
    with daemon(folder) as running:
        row["start_s"] = round(running.start_s, 2)
        time.sleep(args.settle)
        row.update(running.memory())
    ingest_runs(row, 0, folder, base, source, args)
    shutil.rmtree(folder)
    return row


def profile_text(path: Path, order: str, top: int) -> str:
    """The daemon's own functions (start-up included: `Engine.__init__`, `rebuild`; the
    ingest is under `Writer.step`)."""
    text = io.StringIO()
    stats = pstats.Stats(str(path), stream=text).sort_stats(order)
    stats.print_stats("mnemod/(runtime|store|redisio|domain|files)/", top)
    return text.getvalue()


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ---- the table ------------------------------------------------------------------------------
def derive(rows: list[dict[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """Ratios against the run's baselines, and GC beyond the sizes it ran at."""
    if rows and rows[0]["entries"] == 0:
        ingest_ratios(rows)
    measured = [r for r in rows if r["entries"]]
    for row in measured:
        if "maintenance" in row:
            m = row["maintenance"]
            m["gc_p99_vs_idle"] = ratio(m["gc"]["p99"], m["idle"]["p99"])
    extrapolated: dict[str, Any] = {}
    for key in ("gc_s", "exhaustive_s", "plan_s"):
        timed_at = {r["entries"]: r[key] for r in measured if r.get(key, 0) > 0}
        for size in sorted({*sizes, 100_000}):
            if timed_at and size > max(timed_at):
                seconds, how = extrapolate(timed_at, size)
                extrapolated.setdefault(str(size), {})[key] = {"s": seconds, "extrapolated": how}
    return extrapolated


def ingest_ratios(rows: list[dict[str, Any]]) -> None:
    empty, measured = rows[0], rows[1:]
    first_add = measured[0]["add_ms"]["p50"] if measured and "add_ms" in measured[0] else math.nan
    for row in rows:
        one, eight = row["ingest"]
        eight["vs_1_agent"] = ratio(eight["events_per_s"], one["events_per_s"])
        for mine, base in zip(row["ingest"], empty["ingest"], strict=True):
            mine["vs_empty"] = ratio(mine["events_per_s"], base["events_per_s"])
        if row["entries"] and "add_ms" in row:  # the library's rows (not with --only ingest)
            row["add_vs_smallest"] = ratio(row["add_ms"]["p50"], first_add)
            above = row["rss_mb"] - empty["rss_mb"]
            row["rss_per_entry_kb"] = round(above * 1024 / row["entries"], 2)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: list[dict[str, Any]], extrapolated: dict[str, Any]) -> str:
    def pick(path: str) -> Callable[[dict[str, Any]], Any]:
        def get(row: dict[str, Any]) -> Any:
            value: Any = row
            for part in path.split("."):
                if isinstance(value, list):
                    value = value[int(part)]
                elif isinstance(value, dict):
                    value = value.get(part)
                else:
                    return None
                if value is None:
                    return None
            return value

        return get

    lines_spec = [
        ("build s (batch)", "build_s"),
        ("library add p50 ms", "add_ms.p50"),
        ("library add p99 ms", "add_ms.p99"),
        ("  add p50 vs smallest", "add_vs_smallest"),
        ("  add CPU p50 ms", "add_cpu_ms.p50"),
        ("checkpoint write s", "checkpoint_s"),
        ("index.json MB", "index_mb"),
        ("mnemod.open s", "open_s"),
        ("  open CPU s", "open_cpu_s"),
        ("  first add after open s", "first_add_s"),
        ("  first resolve after open s", "first_resolve_s"),
        ("read-only recovery s", "recover_ro_s"),
        ("CLI python+imports s", "cli.python"),
        ("  CPU s", "cli.python_cpu"),
        ("CLI stats s (no daemon)", "cli.stats"),
        ("  CPU s", "cli.stats_cpu"),
        ("CLI get s (no daemon)", "cli.get"),
        ("  CPU s", "cli.get_cpu"),
        ("CLI status s (no daemon)", "cli.status"),
        ("  CPU s", "cli.status_cpu"),
        ("CLI list s (no daemon)", "cli.list"),
        ("  CPU s", "cli.list_cpu"),
        ("CLI stats s (daemon)", "cli_daemon.stats"),
        ("  CPU s", "cli_daemon.stats_cpu"),
        ("CLI get s (daemon)", "cli_daemon.get"),
        ("  CPU s", "cli_daemon.get_cpu"),
        ("CLI status s (daemon)", "cli_daemon.status"),
        ("  CPU s", "cli_daemon.status_cpu"),
        ("CLI list s (daemon)", "cli_daemon.list"),
        ("  CPU s", "cli_daemon.list_cpu"),
        ("resolve in process p50 ms", "resolve_ms.p50"),
        ("resolve in process p99 ms", "resolve_ms.p99"),
        ("daemon start-up s", "start_s"),
        ("  start-up CPU s", "start_cpu_s"),
        ("  indexes warmed after s", "warm_s"),
        ("daemon RSS MB", "rss_mb"),
        ("  daemon peak MB", "peak_mb"),
        ("  RSS above empty KB/entry", "rss_per_entry_kb"),
        ("redis-server RSS MB", "redis_mb"),
        ("ingest 1 agent ev/s", "ingest.0.events_per_s"),
        ("  daemon CPU s/1000 events", "ingest.0.cpu_s_per_1000"),
        ("  vs empty store", "ingest.0.vs_empty"),
        ("  agent XADD ev/s", "ingest.0.xadd_per_s"),
        ("ingest 8 agents ev/s", "ingest.1.events_per_s"),
        ("  daemon CPU s/1000 events", "ingest.1.cpu_s_per_1000"),
        ("  vs empty store", "ingest.1.vs_empty"),
        ("  vs 1 agent", "ingest.1.vs_1_agent"),
        ("  agents XADD ev/s", "ingest.1.xadd_per_s"),
        ("XADD->hash in hot p50 ms", "visible.visible_ms.p50"),
        ("XADD->hash in hot p99 ms", "visible.visible_ms.p99"),
        ("  never in hot (folded/out)", "visible.never_visible"),
        ("XADD->acked p50 ms", "visible.acked_ms.p50"),
        ("XADD->acked p99 ms", "visible.acked_ms.p99"),
        ("resolve RPC idle p99 ms", "maintenance.idle.p99"),
        ("  idle longest gap ms", "maintenance.idle.max_gap_ms"),
        ("resolve RPC in GC p50 ms", "maintenance.gc.p50"),
        ("resolve RPC in GC p99 ms", "maintenance.gc.p99"),
        ("  in GC max ms", "maintenance.gc.max"),
        ("  in GC longest gap ms", "maintenance.gc.max_gap_ms"),
        ("  in GC, requests", "maintenance.gc.n"),
        ("  in GC p99 vs idle", "maintenance.gc_p99_vs_idle"),
        ("GC in daemon (op gc) s", "maintenance.gc.gc_s"),
        ("  GC's longest step ms", "maintenance.gc.longest_step_ms"),
        ("  GC merged", "maintenance.gc.merged"),
        ("adds+jobs resolve p99 ms", "maintenance.steady.p99"),
        ("  adds+jobs max ms", "maintenance.steady.max"),
        ("  adds+jobs longest gap ms", "maintenance.steady.max_gap_ms"),
        ("  expiry runs", "maintenance.steady.expiry_runs"),
        ("  hot refreshes", "maintenance.steady.hot_refreshes"),
        ("  checkpoints", "maintenance.steady.checkpoints"),
        ("GC plan (domain) scratch s", "plan_s"),
        ("GC plan (domain) +1,000 s", "plan_after_1k_s"),
        ("exhaustive pass s", "exhaustive_s"),
        ("GC engine.gc() s", "gc_s"),
        ("GC engine.gc() +1,000 s", "gc_after_1k_s"),
    ]
    width = 28
    out = [f"{'':<{width}}" + "".join(f"{r['entries']:>12}" for r in rows)]
    for label, path in lines_spec:
        get = pick(path)
        values = [get(r) for r in rows]
        if all(v is None for v in values):
            continue
        out.append(f"{label:<{width}}" + "".join(f"{cell(v):>12}" for v in values))
    for size, guesses in extrapolated.items():
        for key, guess in guesses.items():
            out.append(f"{key} at {size}: ~{guess['s']} s EXTRAPOLATED ({guess['extrapolated']})")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--quick", action="store_true", help="small sizes and counts (~2 min)")
    parser.add_argument("--adds", type=int, default=200, help="timed durable adds per size")
    parser.add_argument("--events", type=int, default=4000, help="events per ingest run")
    parser.add_argument("--visible", type=int, default=400, help="events timed to visible")
    parser.add_argument("--visible-rate", type=float, default=100.0, help="their events/s")
    parser.add_argument("--gc-max", type=int, default=10_000, help="largest size GC runs at")
    parser.add_argument(
        "--exhaustive-max",
        type=int,
        default=10_000,
        help="largest size the exhaustive pass runs at",
    )
    parser.add_argument("--window", type=float, default=10.0, help="s of adds with jobs")
    parser.add_argument(
        "--only", choices=("all", "maintenance", "ingest"), default="all",
        help="maintenance: only the stalls during maintenance and the GC times; ingest: only "
        "XADD->visible and durable ingest (with the empty store's)",
    )  # fmt: skip
    parser.add_argument("--settle", type=float, default=1.0, help="s after start-up, for RSS")
    parser.add_argument("--queries", type=int, default=60, help="distinct resolve prompts")
    parser.add_argument("--cli-tries", type=int, default=3, help="runs of each CLI read")
    parser.add_argument(
        "--warm-timeout", type=float, default=600.0, help="s to wait for `engine.warmed`"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the adds and the daemon's ingest"
    )
    parser.add_argument(
        "--stores", default=None,
        help="folder keeping each built store, reused by later runs of the same size and data",
    )  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.adds, args.events, args.visible = "1000,3000", 50, 1000, 150
        args.gc_max, args.queries, args.settle = 3000, 30, 0.5
    sizes = sorted(int(s) for s in args.sizes.split(","))
    args.largest = sizes[-1]
    turns, questions, label = speed.corpus(Path(args.data))
    prompts = random.Random(1).sample(questions, min(args.queries, len(questions)))
    began = time.monotonic()
    load = os.getloadavg()  # a loaded machine stretches every wall time
    with tempfile.TemporaryDirectory(prefix="mnemod-scale-") as name:
        base = Path(name)
        rows = [empty_baseline(base, turns, args)] if args.only != "maintenance" else []
        run = {"all": run_size, "maintenance": maintenance_only, "ingest": ingest_only}[args.only]
        for size in sizes:
            rows.append(run(size, base, turns, prompts, args))
            # what is measured so far, in case a larger size does not finish
            write_results(args.out, {"corpus": label, "partial": True, "sizes": rows})
    extrapolated = derive(rows, sizes)
    print(f"mnemod at scale, corpus: {label}; {os.cpu_count()} CPUs; "
          f"{round(time.monotonic() - began)} s")  # fmt: skip
    print(
        f"{args.adds} durable adds, {args.events} events per ingest run, {args.visible} "
        f"events at {args.visible_rate:g}/s for XADD->visible, GC up to {args.gc_max}"
    )
    print(table(rows, extrapolated))
    print(f"load average (1 min) at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
    for row in rows:
        for what, (wall, cpu) in row.get("maintenance", {}).get("stalls", {}).items():
            print(f"  {row['entries']}: longest writer.stalled {what}: {wall} ms ({cpu} ms CPU)")
    for row in rows:
        if "add_profile" in row and row["entries"] == sizes[-1]:
            print(f"\ncProfile of the durable adds at {row['entries']}:\n{row['add_profile']}")
        if "ingest_profile" in row:
            print(f"\ncProfile of the daemon, 1-agent ingest at {row['entries']}:")
            print(row["ingest_profile"])
    payload = {
        "corpus": label,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "sizes": rows,
        "gc_extrapolated": extrapolated,
    }
    write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
