"""Followers: how far behind a follower's copy is, and resolve latency with reads spread.

One redis-server of its own; `mnemod run` processes on separate folders with
`--redis-url`. The leader's folder is built with `--entries` memories (the corpus of
`resolve_speed.py`: LoCoMo turns varied with `--data`, else synthetic sentences).

- `lag`: `--adds` add events, one every `--add-ms`; for each, the time from its XADD to the
  record that applied it appearing in the leader's log (`leader_ms`) and in each follower's
  log (`follower_ms`), read by following the logs' newest segment every millisecond. A
  follower looks at the feed every 250 ms while no request comes (runtime/follower.py), and
  catches up before each answer.
- `idle`: each daemon's share of a core over `--idle-seconds` with nothing to do.
- `rpc`: `--askers` threads ask resolve over the rpc stream (XADD, then BLPOP) for
  `--seconds`, first with the leader alone, then with `--followers` followers caught up
  (Redis spreads the requests over the consumer group); latency p50/p99 and answers/s, and
  the ratio of each against the leader alone in the same run.

    python bench/followers.py [--data PATH] [--entries 2000]
        [--followers 2] [--askers 8] [--seconds 10] [--adds 200]
        [--out bench/results/followers.json]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "daemon"))

import resolve_speed as speed
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import EmbeddedRedis
from results import write_results

KEYS_BASE = "mnemod:{default}"


@contextlib.contextmanager
def daemon(folder: Path, url: str) -> Iterator[subprocess.Popen[str]]:
    """`mnemod run` on `folder` against the Redis at `url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | speed.ENV
    env["PYTHONPATH"] = str(speed.ROOT / "daemon")
    args = [sys.executable, "-m", "mnemod.cli.main", "run", "--data-dir", str(folder)]
    args += ["--redis-url", url]
    log = (folder.parent / f"{folder.name}.log").open("wb")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=env, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        log.close()


class LogTail:
    """When each event id first appears in a folder's change log (its newest segment)."""

    def __init__(self, folder: Path) -> None:
        self.log_dir = folder / "default" / "log"
        self.seen: dict[str, float] = {}
        self._offsets: dict[Path, int] = {}

    def poll(self) -> None:
        segments = sorted(self.log_dir.glob("*.jsonl")) if self.log_dir.is_dir() else []
        for path in segments[-2:]:
            start = self._offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(start)
                data = handle.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = start + end
            now = time.perf_counter()
            for line in data[:end].splitlines():
                with contextlib.suppress(orjson.JSONDecodeError):
                    for event_id in orjson.loads(line).get("events") or []:
                        self.seen.setdefault(event_id, now)


def wait_caught_up(client: Any, followers: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        committed = client.hget(f"{KEYS_BASE}:committed", "seq")
        applied = [v.split()[0] for v in client.hgetall(f"{KEYS_BASE}:followers").values()]
        if committed and len(applied) >= followers and all(a == committed for a in applied):
            return
        time.sleep(0.1)
    raise RuntimeError("the followers did not catch up")


def lag(url: str, tails: list[LogTail], adds: int, add_ms: float) -> dict[str, Any]:
    client = connect(url, socket_timeout=30.0)
    sent: dict[str, float] = {}
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            for tail in tails:
                tail.poll()
            time.sleep(0.001)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    rng = random.Random(3)
    for n in range(adds):
        data = {"content": f"lag probe {n} " + " ".join(rng.sample(WORDS, 6)), "type": "context"}
        started = time.perf_counter()
        event_id = client.xadd(f"{KEYS_BASE}:events", {"op": "add", "data": orjson.dumps(data)})
        sent[str(event_id)] = started
        time.sleep(add_ms / 1000)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(all(i in t.seen for i in sent) for t in tails):
        time.sleep(0.05)
    stop.set()
    reader.join()
    client.close()
    out: dict[str, Any] = {}
    names = ["leader", *[f"follower{i}" for i in range(1, len(tails))]]
    for name, tail in zip(names, tails, strict=True):
        delays = [tail.seen[i] - t for i, t in sent.items() if i in tail.seen]
        out[name] = {**speed.percentiles(delays), "seen": len(delays), "sent": len(sent)}
    return out


WORDS = [f"w{n:03d}" for n in range(400)]


def rpc(url: str, prompts: Sequence[str], askers: int, seconds: float) -> dict[str, Any]:
    samples: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def ask_loop(seed: int) -> None:
        ask = speed.raw_asker(url, f"{KEYS_BASE}:rpc")
        rng = random.Random(seed)
        mine = []
        while time.monotonic() < deadline:
            started = time.perf_counter()
            ask(rng.choice(prompts))
            mine.append(time.perf_counter() - started)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=ask_loop, args=(n,)) for n in range(askers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {**speed.percentiles(samples), "per_second": round(len(samples) / seconds, 1)}


def idle_cpu(pids: list[int], seconds: float) -> list[float]:
    """Each process's share of a core (%) over `seconds` with nothing to do."""
    before = [speed.cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    return [
        round(100 * (speed.cpu_seconds(p) - b) / seconds, 2)
        for p, b in zip(pids, before, strict=True)
    ]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    turns, questions, label = speed.corpus(Path(args.data))
    prompts = random.Random(1).sample(questions, min(60, len(questions)))
    with tempfile.TemporaryDirectory(prefix="mnemod-followers-") as name:
        root = Path(name)
        server = EmbeddedRedis(root / "redis")
        url = server.start()
        try:
            leader_dir = root / "leader"
            speed.build(leader_dir, args.entries, speed.memories(turns, random.Random(5)))
            client = connect(url, socket_timeout=30.0)
            with contextlib.ExitStack() as stack:
                procs = [stack.enter_context(daemon(leader_dir, url))]
                deadline = time.monotonic() + 300
                while client.hget(f"{KEYS_BASE}:status", "state") != "running":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the leader did not start")
                    time.sleep(0.1)
                speed.warm_up(speed.raw_asker(url, f"{KEYS_BASE}:rpc"), prompts, 2.0)
                alone = rpc(url, prompts, args.askers, args.seconds)
                folders = [root / f"follower{n}" for n in range(1, args.followers + 1)]
                started = time.perf_counter()
                for folder in folders:
                    folder.mkdir()
                    procs.append(stack.enter_context(daemon(folder, url)))
                wait_caught_up(client, args.followers)
                caught_up_s = time.perf_counter() - started
                idle = idle_cpu([p.pid for p in procs], args.idle_seconds)
                spread = rpc(url, prompts, args.askers, args.seconds)
                tails = [LogTail(leader_dir)] + [LogTail(f) for f in folders]
                lags = lag(url, tails, args.adds, args.add_ms)
            client.close()
        finally:
            server.stop()
    ratio = {
        "p50": round(spread["p50"] / alone["p50"], 2),
        "p99": round(spread["p99"] / alone["p99"], 2),
        "per_second": round(spread["per_second"] / alone["per_second"], 2),
    }
    return {
        "corpus": label,
        "entries": args.entries,
        "followers": args.followers,
        "askers": args.askers,
        "start_from_checkpoint_s": round(caught_up_s, 2),
        "idle_cpu_percent": {"leader": idle[0], "followers": idle[1:]},
        "rpc_leader_alone": alone,
        "rpc_spread": spread,
        "spread_over_alone": ratio,
        "lag_ms": lags,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="", help="LoCoMo JSON lines (else synthetic)")
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--followers", type=int, default=2)
    parser.add_argument("--askers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--add-ms", type=float, default=20.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--out", default="bench/results/followers.json")
    args = parser.parse_args(argv)
    result = measure(args)
    print(f"corpus: {result['corpus']}, {args.entries} entries, {args.followers} followers")
    print(f"followers started from the checkpoint in {result['start_from_checkpoint_s']} s")
    idle = result["idle_cpu_percent"]
    print(f"idle: leader {idle['leader']} % of a core, followers {idle['followers']} %")
    print(f"{'rpc (' + str(args.askers) + ' askers)':<24}{'p50 ms':>9}{'p99 ms':>9}{'per s':>9}")
    for label in ("rpc_leader_alone", "rpc_spread"):
        row = result[label]
        print(f"{label:<24}{row['p50']:>9.2f}{row['p99']:>9.2f}{row['per_second']:>9.1f}")
    ratio = result["spread_over_alone"]
    print(f"{'spread / alone':<24}{ratio['p50']:>9}{ratio['p99']:>9}{ratio['per_second']:>9}")
    print(f"{'XADD -> in the log':<24}{'p50 ms':>9}{'p99 ms':>9}{'seen':>9}")
    for name, row in result["lag_ms"].items():
        print(f"{name:<24}{row['p50']:>9.1f}{row['p99']:>9.1f}{row['seen']:>9}")
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
